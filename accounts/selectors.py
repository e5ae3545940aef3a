"""Who may see what: the console and the management API decide roles here, once.

Admin (staff) sees everything; a team admin (Member.role == admin) their own team; a member
only their own keys, usage, limits and calls. Object lookups go through the `*_visible_to`
querysets, so an object out of scope is simply not found (404), never a 403 that reveals it.
Calls in scope: `routing.catalog.selectors.calls_visible_to` (routing sits above accounts).
"""

from dataclasses import dataclass, replace
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.keys import MANAGEMENT_TOKEN_PREFIX, key_matches, key_prefix_of
from accounts.models import (
    AdminAction,
    ApiKey,
    Application,
    ManagementToken,
    Member,
    SsoConfig,
    Team,
)


@dataclass(frozen=True)
class Viewer:
    user_id: int | None
    label: str  # shown in the top bar and written as an admin action's actor_label
    is_staff: bool
    member_id: int | None
    team_id: int | None  # the viewer's own team (None for a staff user without a member)
    team_admin_of: int | None  # team id when the viewer is that team's admin

    @property
    def is_authenticated(self) -> bool:
        return self.user_id is not None

    @property
    def role(self) -> str:
        """'admin', 'team_admin', 'member' or 'anonymous'."""
        if self.is_staff:
            return "admin"
        if self.team_admin_of is not None:
            return "team_admin"
        if self.member_id is not None:
            return "member"
        return "anonymous"

    @property
    def can_manage(self) -> bool:
        """May change teams' members, applications, limits and other people's keys."""
        return self.is_staff or self.team_admin_of is not None

    def manages_team(self, team_id: int | None) -> bool:
        return self.is_staff or (team_id is not None and team_id == self.team_admin_of)


ANONYMOUS = Viewer(None, "", False, None, None, None)


def viewer_for(user: AbstractBaseUser | AnonymousUser | None) -> Viewer:
    if user is None or not user.is_authenticated or not user.is_active:
        return ANONYMOUS
    member = Member.objects.filter(user_id=user.pk).only("id", "team_id", "role").first()
    return Viewer(
        user_id=user.pk,
        label=getattr(user, "email", "") or user.get_username(),
        is_staff=bool(getattr(user, "is_staff", False)),
        member_id=member.pk if member else None,
        team_id=member.team_id if member else None,
        team_admin_of=member.team_id if member and member.role == Member.Role.ADMIN else None,
    )


def teams_visible_to(viewer: Viewer) -> QuerySet[Team]:
    if viewer.is_staff:
        return Team.objects.all()
    if viewer.team_id is not None:
        return Team.objects.filter(pk=viewer.team_id)
    return Team.objects.none()


def members_visible_to(viewer: Viewer) -> QuerySet[Member]:
    qs = Member.objects.select_related("user", "team")
    if viewer.is_staff:
        return qs
    if viewer.team_admin_of is not None:
        return qs.filter(team_id=viewer.team_admin_of)
    if viewer.member_id is not None:
        return qs.filter(pk=viewer.member_id)
    return qs.none()


def applications_visible_to(viewer: Viewer) -> QuerySet[Application]:
    """A member sees the applications of their team (to pick one for a new key)."""
    qs = Application.objects.select_related("team")
    if viewer.is_staff:
        return qs
    if viewer.team_id is not None:
        return qs.filter(team_id=viewer.team_id)
    return qs.none()


def keys_visible_to(viewer: Viewer) -> QuerySet[ApiKey]:
    qs = ApiKey.objects.select_related("member__user", "application__team")
    if viewer.is_staff:
        return qs
    if viewer.team_admin_of is not None:
        return qs.filter(member__team_id=viewer.team_admin_of)
    if viewer.member_id is not None:
        return qs.filter(member_id=viewer.member_id)
    return qs.none()


KEY_STATES = ("active", "revoked", "expired")


def keys_in_state(
    qs: QuerySet[ApiKey], state: str, *, now: datetime | None = None
) -> QuerySet[ApiKey]:
    """The keys of `qs` in one state. Active: not revoked and not past its expiry; revoked:
    revoked, whatever its expiry; expired: past its expiry without being revoked. The
    console's key list and the API's `?state=` both filter here."""
    now = now or timezone.now()
    if state == "active":
        return qs.filter(revoked_at=None).filter(Q(expires_at=None) | Q(expires_at__gt=now))
    if state == "revoked":
        return qs.exclude(revoked_at=None)
    if state == "expired":
        return qs.filter(revoked_at=None, expires_at__lte=now)
    raise ValueError(f"state must be one of {', '.join(KEY_STATES)}")


def member_by_email(qs: QuerySet[Member], email: str) -> Member | None:
    """The member of `qs` with this email, ignoring case and surrounding spaces (addresses
    are stored as given by config files, lowercased by the console and the API); an exact
    match wins over one that differs only in case."""
    email = email.strip()
    if not email:
        return None
    found = list(qs.filter(user__email__iexact=email).order_by("pk")[:20])
    return next((m for m in found if m.user.email == email), found[0] if found else None)


def admin_actions_visible_to(viewer: Viewer) -> QuerySet[AdminAction]:
    """Staff read the whole log; a team admin the actions on their team's objects; members
    none of it."""
    if viewer.is_staff:
        return AdminAction.objects.all()
    if viewer.team_admin_of is not None:
        return AdminAction.objects.filter(team_id=viewer.team_admin_of)
    return AdminAction.objects.none()


def management_token_find(plaintext: str) -> ManagementToken | None:
    """The live (not revoked, not expired, its user active) management token this
    plaintext is, or None. A gateway key (`sk-sluice-…`) never matches."""
    prefix = key_prefix_of(plaintext, MANAGEMENT_TOKEN_PREFIX)
    if prefix is None:
        return None
    token = ManagementToken.objects.select_related("user").filter(prefix=prefix).first()
    if token is None or not key_matches(plaintext, token.secret_hash):
        return None
    if token.revoked_at is not None:
        return None
    if token.expires_at is not None and token.expires_at <= timezone.now():
        return None
    if token.user is not None and not token.user.is_active:
        return None
    return token


def viewer_for_token(token: ManagementToken) -> Viewer:
    """A token acts with its user's roles narrowed to its team; a token without a user is
    an admin of everything (global) or of its team."""
    label = f"token {token.prefix}"
    if token.user is None:
        if token.team_id is None:
            return Viewer(None, label, True, None, None, None)
        return Viewer(None, label, False, None, token.team_id, token.team_id)
    viewer = viewer_for(token.user)
    label = f"{viewer.label} ({label})"
    if token.team_id is None:
        return replace(viewer, label=label)
    if viewer.is_staff or viewer.team_admin_of == token.team_id:
        return Viewer(viewer.user_id, label, False, viewer.member_id, token.team_id, token.team_id)
    if viewer.team_id == token.team_id:
        return replace(viewer, label=label)
    return replace(ANONYMOUS, label=label)  # the user has no role in that team


def management_tokens_visible_to(viewer: Viewer) -> QuerySet[ManagementToken]:
    """Staff: every management token; anyone else: their own."""
    qs = ManagementToken.objects.select_related("user", "team")
    if viewer.is_staff:
        return qs
    if viewer.user_id is not None:
        return qs.filter(user_id=viewer.user_id)
    return qs.none()


def sso_config() -> SsoConfig | None:
    """The provider the console signs in with, when one is configured and enabled."""
    return SsoConfig.objects.filter(pk=1, enabled=True).first()


def password_login_allowed(username: str) -> bool:
    """Whether `username` may sign in with a password: everyone, unless single sign-on
    turned password login off for all but its break-glass accounts."""
    config = sso_config()
    if config is None or config.password_login == SsoConfig.PasswordLogin.ON:
        return True
    return username.strip().lower() in config.break_glass
