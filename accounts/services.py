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

from accounts.keys import NewKey, key_generate
from accounts.models import AdminAction, ApiKey, Application, Member, Team
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
