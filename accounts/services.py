"""Writes for accounts: members, keys, teams, applications, and the admin actions log.

Every service that changes something takes the `actor` who asked (console user, API token,
or a command) and records one AdminAction in the same transaction.
"""

import getpass
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from accounts import policy, validators
from accounts.keys import MANAGEMENT_TOKEN_PREFIX, NewKey, key_generate
from accounts.models import (
    AdminAction,
    ApiKey,
    Application,
    ManagementToken,
    Member,
    Team,
)
from accounts.selectors import Viewer


class AccountError(Exception):
    """A request that names something that does not exist or cannot be done."""


def _checked(check: Callable[[Any], Any], value: Any, label: str) -> Any:
    """`value` through one of accounts/validators.py's rules, its error an AccountError."""
    try:
        return check(value)
    except validators.Invalid as exc:
        raise AccountError(exc.message(label)) from None


@dataclass(frozen=True)
class Actor:
    """Who made a change, and through what: written on the admin action."""

    user_id: int | None
    label: str
    via: str  # AdminAction.Via
    # Whose rights the change is checked against (accounts/policy.py); None for a command
    # run on the machine, which may do anything.
    viewer: Viewer | None = None

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
        return cls(user_id=viewer.user_id, label=viewer.label, via=via, viewer=viewer)


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


@dataclass
class Change:
    """The change `recorded_change` logs: the object (set it when the block creates one),
    its snapshot before (None for a new object), the team whose log it is in, and notes
    added to the snapshot after (why, or what replaced it)."""

    obj: Any
    before: dict[str, Any] | None
    team_id: int | None
    snapshot: Callable[[Any], dict[str, Any]]
    note: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """Whether the object's snapshot differs from the one before (so far)."""
        return self.snapshot(self.obj) != self.before


@contextmanager
def recorded_change(
    *,
    actor: Actor,
    action: str,
    snapshot: Callable[[Any], dict[str, Any]],
    obj: Any = None,
    team_id: int | None = None,
    object_type: str | None = None,
    only_if_changed: bool = False,
) -> Iterator[Change]:
    """Every change is logged this way: in one transaction, `obj`'s snapshot before, the
    block's change, the snapshot after and one AdminAction. A block that creates the
    object sets `change.obj` (and `change.team_id` if only then known). With
    `only_if_changed`, a change that leaves the snapshot as it was writes no action."""
    with transaction.atomic():
        change = Change(obj, None if obj is None else snapshot(obj), team_id, snapshot)
        yield change
        after = snapshot(change.obj) | change.note
        if only_if_changed and after == change.before:
            return
        admin_action_record(
            actor=actor,
            action=action,
            obj=change.obj,
            object_type=object_type,
            team_id=change.team_id,
            before=change.before,
            after=after,
        )


def _key_snapshot(key: ApiKey) -> dict[str, Any]:
    return snapshot_of(key, _KEY_FIELDS)


@transaction.atomic
def member_ensure(
    *, email: str, team: Team, role: str = Member.Role.MEMBER, actor: Actor = SYSTEM
) -> Member:
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
    if not created and member.team_id != team.id:
        member_team_move(actor=actor, member=member, team=team)
    if not created and member.role != role:
        member.role = role
        member.save(update_fields=["role"])
    return member


@transaction.atomic
def member_team_move(*, actor: Actor, member: Member, team: Team) -> Member:
    """Move a member to another team. Their keys belong to the old team's applications,
    which the old team's admin no longer sees them hold: every such key is revoked (their
    batches stop with it), and the member makes new keys in the new team."""
    if member.team_id == team.pk:
        return member
    policy.staff_check(actor=actor, what="move a member to another team")
    with recorded_change(
        actor=actor,
        action="member.move",
        obj=member,
        snapshot=_member_snapshot,
        team_id=member.team_id,  # the old team's log
    ):
        member.team = team
        member.save(update_fields=["team"])
        member_keys_outside_team_revoke(actor=actor, member=member)
    return member


def member_keys_outside_team_revoke(*, actor: Actor, member: Member) -> int:
    """Revoke the member's live keys on applications outside their (new) team; how many.
    Each is in the admin actions log of the team whose application it was."""
    now = timezone.now()
    revoked = 0
    live = ApiKey.objects.filter(member=member, revoked_at=None).exclude(
        application__team_id=member.team_id
    )
    for key in live.select_related("application"):
        _revoke(
            key,
            actor=actor,
            team_id=key.application.team_id,
            at=now,
            note={"reason": "member moved to another team"},
        )
        revoked += 1
    return revoked


def _revoke(
    key: ApiKey, *, actor: Actor, team_id: int, at: datetime, note: dict[str, Any] | None = None
) -> None:
    """Revoke `key` now, in the admin actions log of team `team_id`."""
    with recorded_change(
        actor=actor,
        action="key.revoke",
        obj=key,
        snapshot=_key_snapshot,
        object_type="key",
        team_id=team_id,
    ) as change:
        key.revoked_at = at
        key.save(update_fields=["revoked_at"])
        change.note = note or {}


_KEY_FIELDS = ("name", "member", "application", "expires_at", "revoked_at")
_MEMBER_FIELDS = ("email", "team", "role", "active")
_TEAM_FIELDS = ("slug", "name", "time_zone")
APPLICATION_FIELDS = (  # what update_application takes, and the API and admin log show
    "slug",
    "name",
    "team",
    "routes",
    "default_priority",
    "fallback",
    "default_max_tokens",
    "max_tokens_ceiling",
    "clamp_max_tokens",
    "max_n",
    "batch_windows",
    "cache_ttl_seconds",
)
MAX_KEY_DAYS = 3650
MAX_GRACE = timedelta(days=30)


def _team_snapshot(team: Team) -> dict[str, Any]:
    return snapshot_of(team, _TEAM_FIELDS)


def _application_snapshot(application: Application) -> dict[str, Any]:
    return snapshot_of(application, APPLICATION_FIELDS)


def _member_snapshot(member: Member) -> dict[str, Any]:
    return {
        "email": member.user.email,
        "team": member.team.slug,
        "role": member.role,
        "active": member.user.is_active,
    }


def key_create(
    *,
    actor: Actor,
    member: Member,
    application: Application,
    name: str = "",
    expires_at: datetime | None = None,
    action: str = "key.create",
) -> tuple[ApiKey, str]:
    """Create a key and return it with its plaintext, which exists only in this return value."""
    if application.team_id != member.team_id:
        raise AccountError(
            f"member {member.user.email} is in team {member.team.slug}, "
            f"application {application.slug} is not"
        )
    policy.key_change_check(actor=actor, member_id=member.pk, team_id=member.team_id)
    if not member.user.is_active:
        raise AccountError(f"member {member.user.email} is deactivated")
    if expires_at is not None and expires_at <= timezone.now():
        raise AccountError("the expiry must be in the future")
    _checked(validators.name_check, name, "the name")
    new: NewKey = key_generate()
    with recorded_change(
        actor=actor,
        action=action,
        snapshot=_key_snapshot,
        object_type="key",
        team_id=member.team_id,
    ) as change:
        change.obj = key = ApiKey.objects.create(
            member=member,
            application=application,
            name=name,
            prefix=new.prefix,
            secret_hash=new.secret_hash,
            expires_at=expires_at,
        )
    return key, new.plaintext


def key_issue(
    *,
    member_email: str,
    application_slug: str,
    name: str = "",
    expires_days: int | None = None,
    actor: Actor = SYSTEM,
) -> tuple[ApiKey, str]:
    """`key_create` by the member's email and the application's slug (commands, demo)."""
    member = Member.objects.select_related("team", "user").filter(user__email=member_email).first()
    if member is None:
        raise AccountError(f"no member with email {member_email!r}")
    application = Application.objects.filter(slug=application_slug).first()
    if application is None:
        raise AccountError(f"no application {application_slug!r}")
    if expires_days is not None and not 0 < expires_days <= MAX_KEY_DAYS:
        raise AccountError(f"expires-days must be a number of days from 1 to {MAX_KEY_DAYS}")
    expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
    return key_create(
        actor=actor, member=member, application=application, name=name, expires_at=expires_at
    )


def key_revoke(*, prefix: str, actor: Actor = SYSTEM, note: dict[str, Any] | None = None) -> ApiKey:
    """Revoke a key now; every worker refuses it within SLUICE_KEY_CACHE_SECONDS. `note`
    (why) is added to the admin action."""
    key = (
        ApiKey.objects.select_related("member__user", "member__team").filter(prefix=prefix).first()
    )
    if key is None:
        raise AccountError(f"no key with prefix {prefix!r}")
    policy.key_change_check(actor=actor, member_id=key.member_id, team_id=key.member.team_id)
    if key.revoked_at is None:
        _revoke(key, actor=actor, team_id=key.member.team_id, at=timezone.now(), note=note)
    return key


def key_rotate(*, actor: Actor, key: ApiKey, grace: timedelta) -> tuple[ApiKey, str]:
    """A new key like `key` (same member, application, name and expiry) now; the old one
    keeps working for `grace` (0 to 30 days) and then expires, so clients can switch over."""
    policy.key_change_check(actor=actor, member_id=key.member_id, team_id=key.member.team_id)
    if key.revoked_at is not None:
        raise AccountError(f"key {key.prefix} is revoked; create a new key instead")
    now = timezone.now()
    if key.expires_at is not None and key.expires_at <= now:
        raise AccountError(f"key {key.prefix} has expired; create a new key instead")
    if not timedelta(0) <= grace <= MAX_GRACE:
        raise AccountError("the grace period must be between 0 and 30 days")
    with recorded_change(
        actor=actor,
        action="key.rotate",
        obj=key,
        snapshot=_key_snapshot,
        object_type="key",
        team_id=key.member.team_id,
    ) as change:
        new_key, plaintext = key_create(
            actor=actor,
            member=key.member,
            application=key.application,
            name=key.name,
            expires_at=key.expires_at,
            action="key.rotate.new",
        )
        ends = now + grace
        if key.expires_at is None or ends < key.expires_at:
            key.expires_at = ends
        if grace == timedelta(0):
            key.revoked_at = now
        key.save(update_fields=["expires_at", "revoked_at"])
        change.note = {"replaced_by": new_key.prefix}
    return new_key, plaintext


def member_create(
    *, actor: Actor, email: str, team: Team, role: str = Member.Role.MEMBER, password: str = ""
) -> Member:
    """A new member of `team`. With a password they can log in to the console at once;
    without one an admin sets it later (Django's password reset, or the admin)."""
    email = email.strip().lower()
    try:
        validators.email_check(email)
    except validators.Invalid:
        raise AccountError("enter a valid email address") from None
    _checked(validators.role_check, role, "role")
    policy.team_manage_check(actor=actor, team_id=team.pk)
    User = get_user_model()
    if User.objects.filter(username=email).exists() or User.objects.filter(email=email).exists():
        raise AccountError(f"a user with email {email} already exists")
    if password:
        try:
            validate_password(password, user=User(username=email, email=email))
        except ValidationError as exc:
            raise AccountError(" ".join(exc.messages)) from None
    with recorded_change(
        actor=actor, action="member.create", snapshot=_member_snapshot, team_id=team.pk
    ) as change:
        user = User.objects.create_user(username=email, email=email, password=password or None)
        change.obj = member = Member.objects.create(user=user, team=team, role=role)
    return member


def member_update(*, actor: Actor, member: Member, role: str) -> Member:
    _checked(validators.role_check, role, "role")
    _member_change_check(actor, member, "change the role of")
    if member.role == role:
        return member
    with recorded_change(
        actor=actor,
        action="member.update",
        obj=member,
        snapshot=_member_snapshot,
        team_id=member.team_id,
    ):
        member.role = role
        member.save(update_fields=["role"])
    return member


def member_set_active(*, actor: Actor, member: Member, active: bool) -> Member:
    """Deactivate (or reactivate) a member: they cannot log in, and their keys are refused
    within SLUICE_KEY_CACHE_SECONDS, like a revocation (accounts/authentication.py)."""
    _member_change_check(actor, member, "deactivate" if not active else "reactivate")
    user = member.user
    if user.is_active == active:
        return member
    with recorded_change(
        actor=actor,
        action="member.activate" if active else "member.deactivate",
        obj=member,
        snapshot=_member_snapshot,
        team_id=member.team_id,
    ):
        user.is_active = active
        user.save(update_fields=["is_active"])
    return member


def _member_change_check(actor: Actor, member: Member, what: str) -> None:
    policy.member_change_check(
        actor=actor,
        team_id=member.team_id,
        member_id=member.pk,
        member_is_staff=member.user.is_staff,
        what=what,
    )


def team_create(*, actor: Actor, slug: str, name: str, time_zone: str = "UTC") -> Team:
    policy.staff_check(actor=actor, what="create a team")
    _checked(validators.slug_check, slug, "the slug")
    if Team.objects.filter(slug=slug).exists():
        raise AccountError(f"a team {slug!r} already exists")
    _checked(validators.name_check, name, "the name")
    _checked(validators.time_zone_check, time_zone, "the time zone")
    with recorded_change(actor=actor, action="team.create", snapshot=_team_snapshot) as change:
        change.obj = team = Team.objects.create(slug=slug, name=name or slug, time_zone=time_zone)
        change.team_id = team.pk
    return team


def team_update(*, actor: Actor, team: Team, name: str, time_zone: str) -> Team:
    policy.team_manage_check(actor=actor, team_id=team.pk)
    _checked(validators.name_check, name, "the name")
    _checked(validators.time_zone_check, time_zone, "the time zone")
    with recorded_change(
        actor=actor,
        action="team.update",
        obj=team,
        snapshot=_team_snapshot,
        team_id=team.pk,
        only_if_changed=True,
    ) as change:
        team.name, team.time_zone = name or team.slug, time_zone
        if change.changed:
            team.save(update_fields=["name", "time_zone"])
    return team


def _application_values(values: dict[str, Any]) -> dict[str, Any]:
    clean = dict(values)
    unknown = set(clean) - set(APPLICATION_FIELDS)
    for name in (n for n in APPLICATION_FIELDS if n in clean):
        try:
            clean[name] = validators.application_value_check(name, clean[name])
        except validators.Invalid as exc:
            raise AccountError(exc.message(name.replace("_", " "))) from None
    if unknown:
        raise AccountError(f"unknown field(s): {', '.join(sorted(unknown))}")
    return clean


def _windows(value: Any) -> str:
    """The stored form of batch windows (accounts/windows.py), or a clear AccountError."""
    return str(_checked(validators.batch_windows_check, value, "batch windows"))


def application_create(
    *, actor: Actor, team: Team, slug: str, routes: list[Any] | None = None, **values: Any
) -> Application:
    """A new application of `team`; `routes` are routing.Route objects (or ids)."""
    policy.team_manage_check(actor=actor, team_id=team.pk)
    _checked(validators.slug_check, slug, "the slug")
    if Application.objects.filter(slug=slug).exists():
        raise AccountError(f"an application {slug!r} already exists")
    clean = _application_values(values)
    clean["name"] = clean.get("name") or slug
    with recorded_change(
        actor=actor, action="application.create", snapshot=_application_snapshot, team_id=team.pk
    ) as change:
        change.obj = app = Application.objects.create(team=team, slug=slug, **clean)
        app.routes.set(routes or [])
    return app


def application_update(
    *, actor: Actor, application: Application, routes: list[Any] | None = None, **values: Any
) -> Application:
    """Change an application's settings; `routes`, when given, replaces its routes."""
    policy.team_manage_check(actor=actor, team_id=application.team_id)
    clean = _application_values(values)
    clean.pop("slug", None)
    clean.pop("team", None)
    if "name" in clean and not clean["name"]:
        clean["name"] = application.slug
    with recorded_change(
        actor=actor,
        action="application.update",
        obj=application,
        snapshot=_application_snapshot,
        team_id=application.team_id,
        only_if_changed=True,
    ):
        for name, value in clean.items():
            setattr(application, name, value)
        application.save()
        if routes is not None:
            application.routes.set(routes)
    return application


def application_batch_windows_set(
    *, actor: Actor, application: Application, windows: str
) -> Application:
    """When the application's batches may run (the Batch API's windows, in its team's time
    zone): "00:00-06:00, ...", "any", or "" to follow the team. Setting the windows it
    already has records nothing."""
    policy.team_manage_check(actor=actor, team_id=application.team_id)
    clean = _windows(windows)
    with recorded_change(
        actor=actor,
        action="application.batch_windows",
        obj=application,
        snapshot=lambda app: snapshot_of(app, ("batch_windows",)),
        team_id=application.team_id,
        only_if_changed=True,
    ):
        if clean != application.batch_windows:
            application.batch_windows = clean
            application.save(update_fields=["batch_windows"])
    return application


# --- management tokens (the /api/v1/ API) -----------------------------------------------


@transaction.atomic
def management_token_issue(
    *,
    actor: Actor,
    name: str = "",
    user_id: int | None = None,
    user_email: str | None = None,
    team_slug: str | None = None,
    expires_days: int | None = None,
) -> tuple[ManagementToken, str]:
    """Create a management token and return it with its plaintext, which exists only in
    this return value. With a user (by id; by email only from a command, and only an email
    exactly one active user has) it acts with that user's roles (narrowed to the team if
    one is given); without one it is an admin token, global or of its team."""
    user = None
    users = get_user_model().objects.filter(is_active=True)
    if user_id is not None:
        user = users.filter(pk=user_id).first()
        if user is None:
            raise AccountError(f"no active user with id {user_id}")
    elif user_email is not None:
        found = list(users.filter(email=user_email)[:2]) if user_email.strip() else []
        if len(found) != 1:
            raise AccountError(
                f"no active user with email {user_email!r}"
                if not found
                else f"more than one user has email {user_email!r}; name the user by id"
            )
        user = found[0]
    team = None
    if team_slug is not None:
        team = Team.objects.filter(slug=team_slug).first()
        if team is None:
            raise AccountError(f"no team {team_slug!r}")
    if expires_days is not None and expires_days <= 0:
        raise AccountError("expires-days must be a positive number of days")
    new: NewKey = key_generate(MANAGEMENT_TOKEN_PREFIX)
    with recorded_change(
        actor=actor,
        action="management_token.create",
        snapshot=_token_snapshot,
        object_type="management_token",
        team_id=team.pk if team else None,
    ) as change:
        change.obj = token = ManagementToken.objects.create(
            name=name,
            prefix=new.prefix,
            secret_hash=new.secret_hash,
            user=user,
            team=team,
            expires_at=timezone.now() + timedelta(days=expires_days) if expires_days else None,
        )
    return token, new.plaintext


def _token_snapshot(token: ManagementToken) -> dict[str, Any]:
    """Who the token acts as and until when; never its secret."""
    return {
        "name": token.name,
        "user": token.user.email if token.user else None,
        "user_id": token.user_id,
        "team": token.team.slug if token.team else None,
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
    }


@transaction.atomic
def management_token_revoke(*, actor: Actor, prefix: str) -> ManagementToken:
    token = ManagementToken.objects.filter(prefix=prefix).first()
    if token is None:
        raise AccountError(f"no management token with prefix {prefix!r}")
    if token.revoked_at is None:
        with recorded_change(
            actor=actor,
            action="management_token.revoke",
            obj=token,
            snapshot=lambda t: snapshot_of(t, ("revoked_at",)),
            object_type="management_token",
            team_id=token.team_id,
        ):
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
    return token


def management_token_touch(*, token: ManagementToken) -> None:
    """Coarse last-used time (at most one write a minute per token)."""
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
        ManagementToken.objects.filter(pk=token.pk).update(last_used_at=now)
