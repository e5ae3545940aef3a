"""Writes for accounts: members and keys."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from accounts.keys import NewKey, key_generate
from accounts.models import ApiKey, Application, Member, Team


class AccountError(Exception):
    """A request that names something that does not exist or cannot be done."""


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
