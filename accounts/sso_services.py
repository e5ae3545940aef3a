"""Writes of single sign-on: the `[sso]` config, what one sign-in changes, and the sweep of
members who stopped signing in (docs/sso.md).

The provider is the source of truth for everyone who signs in through it: each sign-in
sets their team, their role and staff from their groups (accounts/sso_rules.py), and every
change is an AdminAction by the actor "single sign-on". Keys are not touched by a sign-in;
a member whose groups grant nothing is deactivated (their keys are refused while they
are), and `sso_sweep` revokes the keys of members who have not signed in for a while.
Either comes back in at a sign-in with mapped groups; a member an admin deactivated does
not.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.db import transaction
from django.utils import timezone

from accounts.models import AdminAction, ApiKey, Member, SsoConfig, SsoIdentity, Team
from accounts.services import Actor, key_revoke, member_team_move, recorded_change
from accounts.sso_rules import Grant, GroupRule, grant_for


class SignInRefused(Exception):
    """A sign-in the provider vouched for that Sluice still refuses; `title` and `detail`
    are shown on the refusal page (never a token or a secret)."""

    def __init__(self, title: str, detail: str, *, status: int = 403) -> None:
        super().__init__(f"{title}: {detail}")
        self.title, self.detail, self.status = title, detail, status


@dataclass(frozen=True)
class ProviderAccount:
    """Who the provider says signed in: from the validated ID token (and userinfo)."""

    issuer: str
    subject: str
    email: str
    email_verified: bool
    groups: tuple[str, ...]


def sso_actor(config: SsoConfig) -> Actor:
    return Actor(user_id=None, label=f"single sign-on ({config.issuer})", via=AdminAction.Via.SSO)


@transaction.atomic
def sso_config_apply(fields: dict[str, Any]) -> str:
    """Store the checked `[sso]` table (accounts/sso_section.py): "created", "updated" or
    "unchanged"."""
    current = SsoConfig.objects.filter(pk=1).first()
    if current is None:
        SsoConfig.objects.create(pk=1, **fields)
        return "created"
    if all(getattr(current, k) == v for k, v in fields.items()):
        return "unchanged"
    for k, v in fields.items():
        setattr(current, k, v)
    current.save()
    return "updated"


def _snapshot(user: AbstractUser) -> dict[str, Any]:
    member = Member.objects.filter(user=user).select_related("team").first()
    return {
        "email": user.email,
        "team": member.team.slug if member else None,
        "role": member.role if member else None,
        "staff": user.is_staff,
        "active": user.is_active,
    }


def _team_of(member: Member | None) -> int | None:
    return member.team_id if member else None


def _linked_user(account: ProviderAccount, config: SsoConfig) -> AbstractUser | None:
    """The user this provider account signs in as: by its identity, else (first sign-in)
    an existing user with its email when the provider says the email is verified."""
    identity = (
        SsoIdentity.objects.filter(issuer=account.issuer, subject=account.subject)
        .select_related("user")
        .first()
    )
    if identity is not None:
        return identity.user
    User = get_user_model()
    existing = User.objects.filter(username__iexact=account.email).first() or (
        User.objects.filter(email__iexact=account.email).first()
    )
    if existing is None:
        return None
    if existing.get_username().lower() in config.break_glass:
        raise SignInRefused(
            "This is a break-glass account",
            f"{account.email} signs in with its password, never through the provider.",
        )
    if SsoIdentity.objects.filter(user=existing).exists():
        raise SignInRefused(
            "This account belongs to another provider identity",
            f"{account.email} is already linked to another account at the provider.",
        )
    if not account.email_verified:
        raise SignInRefused(
            "Email not verified",
            f"An account with the email {account.email} exists, and the provider does not "
            "say the address is verified, so it is not linked. Ask an admin.",
        )
    return existing


def _sso_deactivate(user: AbstractUser, actor: Actor, reason: str) -> None:
    """Deactivate `user` (their keys are refused from then on) and take staff away, as
    single sign-on did it: a later sign-in with mapped groups lets them back in."""
    with recorded_change(
        actor=actor,
        action="member.deactivate",
        obj=user,
        snapshot=_snapshot,
        object_type="member",
        team_id=_team_of(Member.objects.filter(user=user).first()),
    ) as change:
        if user.is_active:  # one an admin deactivated stays theirs to let back in
            SsoIdentity.objects.filter(user=user).update(deactivated_by_sso=True)
        user.is_active = False
        user.is_staff = False
        user.save(update_fields=["is_active", "is_staff"])
        change.note = {"reason": reason}


def _no_access(account: ProviderAccount) -> SignInRefused:
    groups = ", ".join(account.groups) or "none"
    return SignInRefused(
        "Your groups give no access to Sluice",
        f"The provider says you are in: {groups}. None of these is mapped to a team or to "
        "admin. Ask your Sluice admin to add your group.",
    )


def _apply_grant(user: AbstractUser, grant: Grant, team: Team | None, actor: Actor) -> None:
    """Team, role, staff and active state as the grant says, one action per change."""
    member = Member.objects.filter(user=user).select_related("team").first()
    if member is not None and team is not None and member.team_id != team.pk:
        member_team_move(actor=actor, member=member, team=team)  # revokes other teams' keys
    with recorded_change(
        actor=actor,
        action="member.sso_update",
        obj=user,
        snapshot=_snapshot,
        object_type="member",
        team_id=team.pk if team else _team_of(member),
        only_if_changed=True,
    ) as change:
        if member is None and team is not None:
            Member.objects.create(user=user, team=team, role=grant.role)
        elif member is not None:
            # Staff without a team grant keep their team, never its admin role.
            role = grant.role if team is not None else Member.Role.MEMBER
            if member.role != role:
                member.role = role
                member.save(update_fields=["role"])
        if user.is_staff != grant.staff or not user.is_active:
            user.is_staff, user.is_active = grant.staff, True
            user.save(update_fields=["is_staff", "is_active"])
        if change.changed:  # the groups that decided it, on an action that is written
            change.note = {"groups": list(grant.matched)}


def sso_sign_in(*, account: ProviderAccount, config: SsoConfig) -> AbstractUser:
    """The user `account` signs in as, created or brought in line with their groups; or
    SignInRefused (after deactivating a known user whose groups grant nothing)."""
    actor = sso_actor(config)
    rules = [GroupRule(**r) for r in config.group_rules]
    grant = grant_for(list(account.groups), rules)
    with transaction.atomic():
        user = _linked_user(account, config)
        if grant is None and user is not None and (user.is_active or user.is_staff):
            _sso_deactivate(user, actor, "no group of theirs is mapped to Sluice")
    if grant is None:  # refused once the deactivation is committed
        raise _no_access(account)
    team = None
    if grant.team is not None:
        team = Team.objects.filter(slug=grant.team).first()
        if team is None:
            raise SignInRefused(
                "Your team is not set up",
                f"Your group maps to team {grant.team}, which does not exist in Sluice. "
                "Ask your Sluice admin.",
            )
    if user is not None and not user.is_active and not _deactivated_by_sso(user):
        raise SignInRefused(
            "Your account is deactivated",
            "An admin deactivated your Sluice account. Ask them to reactivate it.",
        )
    with transaction.atomic():
        if user is None:
            user = _user_create(account, actor, team)
        _apply_grant(user, grant, team, actor)
        SsoIdentity.objects.update_or_create(
            user=user,
            defaults={
                "issuer": account.issuer,
                "subject": account.subject,
                "groups": list(account.groups),
                "last_login_at": timezone.now(),
                "deactivated_by_sso": False,
            },
        )
    return user


def _deactivated_by_sso(user: AbstractUser) -> bool:
    return SsoIdentity.objects.filter(user=user, deactivated_by_sso=True).exists()


def _user_create(account: ProviderAccount, actor: Actor, team: Team | None) -> AbstractUser:
    """A user for a first sign-in: named by their email, no password (the provider is how
    they sign in)."""
    User = get_user_model()
    with recorded_change(
        actor=actor,
        action="member.create",
        snapshot=_snapshot,
        object_type="member",
        team_id=team.pk if team else None,
    ) as change:
        email = account.email.lower()
        change.obj = user = User.objects.create_user(username=email, email=email, password=None)
        change.note = {"subject": account.subject}
    return user


@dataclass(frozen=True)
class Swept:
    email: str
    last_login_at: datetime
    keys_revoked: int


def sso_sweep(*, idle_days: int, apply: bool, actor: Actor) -> list[Swept]:
    """Members who signed in through the provider and have not for `idle_days`: with
    `apply`, each is deactivated and their live keys revoked (one action each)."""
    cutoff = timezone.now() - timedelta(days=idle_days)
    idle = SsoIdentity.objects.filter(last_login_at__lt=cutoff, user__is_active=True)
    swept = []
    for identity in idle.select_related("user").order_by("last_login_at"):
        user = identity.user
        live = ApiKey.objects.filter(member__user=user, revoked_at=None)
        count = _deprovision(user, live, actor, idle_days) if apply else live.count()
        swept.append(Swept(user.email, identity.last_login_at, count))
    return swept


@transaction.atomic
def _deprovision(user: AbstractUser, live: Any, actor: Actor, idle_days: int) -> int:
    reason = f"no sign-in through the provider for {idle_days} days"
    revoked = 0
    for prefix in live.values_list("prefix", flat=True):
        key_revoke(prefix=prefix, actor=actor, note={"reason": reason})
        revoked += 1
    _sso_deactivate(user, actor, reason)
    return revoked
