"""Writes for accounts: members, keys, teams, applications, and the admin actions log.

Every service that changes something takes the `actor` who asked (console user, API token,
or a command) and records one AdminAction in the same transaction.
"""

import getpass
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from accounts.keys import MANAGEMENT_TOKEN_PREFIX, NewKey, key_generate
from accounts.models import AdminAction, ApiKey, Application, ManagementToken, Member, Team
from accounts.selectors import Viewer


class AccountError(Exception):
    """A request that names something that does not exist or cannot be done."""


@dataclass(frozen=True)
class Actor:
    """Who made a change, and through what: written on the admin action."""

    user_id: int | None
    label: str
    via: str  # AdminAction.Via

    @classmethod
    def command(cls, name: str) -> "Actor":
        """A management command run by whoever is logged in on the machine."""
        try:
            who = getpass.getuser()
        except Exception:  # no login name in some containers
            who = "unknown"
        return cls(user_id=None, label=f"{who} (manage.py {name})", via=AdminAction.Via.COMMAND)

    @classmethod
    def of(cls, viewer: Viewer, *, via: str = AdminAction.Via.CONSOLE) -> "Actor":
        return cls(user_id=viewer.user_id, label=viewer.label, via=via)


SYSTEM = Actor(user_id=None, label="system", via=AdminAction.Via.COMMAND)


def admin_action_record(
    *,
    actor: Actor,
    action: str,
    obj: Any,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    team_id: int | None = None,
    object_type: str | None = None,
) -> AdminAction:
    """Append one entry to the admin actions log. `before`/`after` hold only the fields
    that matter for the action, JSON-safe (see `snapshot_of`), never a secret."""
    return AdminAction.objects.create(
        actor_id=actor.user_id,
        actor_label=actor.label[:254],
        via=actor.via,
        action=action,
        object_type=object_type or type(obj).__name__.lower(),
        object_repr=str(obj)[:300],
        team_id=team_id,
        before=before,
        after=after,
    )


def snapshot_of(obj: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    """The named fields of a model instance as JSON-safe values (dates and decimals as
    strings, related objects by their str)."""
    out: dict[str, Any] = {}
    for name in fields:
        value = getattr(obj, name)
        if value is None or isinstance(value, (bool, int, float, str)):
            out[name] = value
        elif hasattr(value, "all") and callable(value.all):  # a many-to-many manager
            out[name] = sorted(str(v) for v in value.all())
        elif hasattr(value, "isoformat"):
            out[name] = value.isoformat()
        else:
            out[name] = str(value)
    return out


@transaction.atomic
def member_ensure(*, email: str, team: Team, role: str = Member.Role.MEMBER) -> Member:
    """The member with this email, created (with an unusable password) if missing."""
    User = get_user_model()
    user, created = User.objects.get_or_create(username=email, defaults={"email": email})
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    if user.email != email:
        user.email = email
        user.save(update_fields=["email"])
    member, created = Member.objects.get_or_create(user=user, defaults={"team": team, "role": role})
    if not created and (member.team_id != team.id or member.role != role):
        member.team, member.role = team, role
        member.save(update_fields=["team", "role"])
    return member


def key_issue(
    *,
    member_email: str,
    application_slug: str,
    name: str = "",
    expires_days: int | None = None,
) -> tuple[ApiKey, str]:
    """Create a key and return it with its plaintext, which exists only in this return value."""
    member = Member.objects.select_related("team").filter(user__email=member_email).first()
    if member is None:
        raise AccountError(f"no member with email {member_email!r}")
    application = Application.objects.filter(slug=application_slug).first()
    if application is None:
        raise AccountError(f"no application {application_slug!r}")
    if application.team_id != member.team_id:
        raise AccountError(
            f"member {member_email} is in team {member.team.slug}, "
            f"application {application_slug} is not"
        )
    if expires_days is not None and expires_days <= 0:
        raise AccountError("expires-days must be a positive number of days")
    new: NewKey = key_generate()
    key = ApiKey.objects.create(
        member=member,
        application=application,
        name=name,
        prefix=new.prefix,
        secret_hash=new.secret_hash,
        expires_at=timezone.now() + timedelta(days=expires_days) if expires_days else None,
    )
    return key, new.plaintext


def key_revoke(*, prefix: str) -> ApiKey:
    key = ApiKey.objects.filter(prefix=prefix).first()
    if key is None:
        raise AccountError(f"no key with prefix {prefix!r}")
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


# --- management tokens (the /api/v1/ API) -----------------------------------------------


@transaction.atomic
def management_token_issue(
    *,
    actor: Actor,
    name: str = "",
    user_email: str | None = None,
    team_slug: str | None = None,
    expires_days: int | None = None,
) -> tuple[ManagementToken, str]:
    """Create a management token and return it with its plaintext, which exists only in
    this return value. With a user it acts with that user's roles (narrowed to the team if
    one is given); without one it is an admin token, global or of its team."""
    user = None
    if user_email is not None:
        user = get_user_model().objects.filter(email=user_email, is_active=True).first()
        if user is None:
            raise AccountError(f"no active user with email {user_email!r}")
    team = None
    if team_slug is not None:
        team = Team.objects.filter(slug=team_slug).first()
        if team is None:
            raise AccountError(f"no team {team_slug!r}")
    if expires_days is not None and expires_days <= 0:
        raise AccountError("expires-days must be a positive number of days")
    new: NewKey = key_generate(MANAGEMENT_TOKEN_PREFIX)
    token = ManagementToken.objects.create(
        name=name,
        prefix=new.prefix,
        secret_hash=new.secret_hash,
        user=user,
        team=team,
        expires_at=timezone.now() + timedelta(days=expires_days) if expires_days else None,
    )
    admin_action_record(
        actor=actor,
        action="management_token.create",
        obj=token,
        object_type="management_token",
        team_id=team.pk if team else None,
        after={
            "name": name,
            "user": user_email,
            "team": team_slug,
            "expires_at": token.expires_at.isoformat() if token.expires_at else None,
        },
    )
    return token, new.plaintext


@transaction.atomic
def management_token_revoke(*, actor: Actor, prefix: str) -> ManagementToken:
    token = ManagementToken.objects.filter(prefix=prefix).first()
    if token is None:
        raise AccountError(f"no management token with prefix {prefix!r}")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        admin_action_record(
            actor=actor,
            action="management_token.revoke",
            obj=token,
            object_type="management_token",
            team_id=token.team_id,
            after={"revoked_at": token.revoked_at.isoformat()},
        )
    return token


def management_token_touch(*, token: ManagementToken) -> None:
    """Coarse last-used time (at most one write a minute per token)."""
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
        ManagementToken.objects.filter(pk=token.pk).update(last_used_at=now)
