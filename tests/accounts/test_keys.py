"""API keys: the format, hashing, issuing and revoking them, and reading them back for auth."""

import io
import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.http.request import HttpHeaders
from django.utils import timezone

from accounts.authentication import Principal, _load, presented_key
from accounts.keys import KEY_PREFIX, key_generate, key_hash, key_matches, key_prefix_of
from accounts.models import ApiKey, Application, Member, PriorityClass, Team
from accounts.services import AccountError, key_issue, key_revoke, member_ensure
from routing.models import Route

KEY_RE = re.compile(r"^sk-sluice-([0-9a-f]{12})-([A-Za-z0-9_-]{43})$")
PUBLIC_ID = "0123456789ab"
SECRET_43 = "A" * 43


# --- keys.py: format and hashing -------------------------------------------------------


def test_generated_key_has_the_documented_format() -> None:
    new = key_generate()
    match = KEY_RE.match(new.plaintext)
    assert match is not None, new.plaintext
    assert new.prefix == f"sk-sluice-{match.group(1)}"
    assert new.plaintext.startswith(new.prefix + "-")


def test_generated_secret_is_token_urlsafe_32_so_43_characters() -> None:
    new = key_generate()
    secret = new.plaintext[len(new.prefix) + 1 :]
    assert len(secret) == 43  # 32 random bytes, base64url without padding


def test_generated_key_stores_only_the_sha256_of_the_whole_key() -> None:
    new = key_generate()
    assert re.fullmatch(r"[0-9a-f]{64}", new.secret_hash)
    assert new.secret_hash == key_hash(new.plaintext)
    secret = new.plaintext[len(new.prefix) + 1 :]
    assert secret not in new.secret_hash
    assert secret not in new.prefix


def test_two_generated_keys_differ_in_prefix_secret_and_hash() -> None:
    a, b = key_generate(), key_generate()
    assert a.prefix != b.prefix
    assert a.plaintext != b.plaintext
    assert a.plaintext[len(a.prefix) :] != b.plaintext[len(b.prefix) :]
    assert a.secret_hash != b.secret_hash


def test_key_hash_is_hex_sha256_of_the_text() -> None:
    assert key_hash("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_prefix_of_a_generated_key_is_its_prefix() -> None:
    new = key_generate()
    assert key_prefix_of(new.plaintext) == new.prefix


@pytest.mark.parametrize(
    ("plaintext", "expected"),
    [
        (f"sk-sluice-{PUBLIC_ID}-{SECRET_43}", f"sk-sluice-{PUBLIC_ID}"),
        (f"sk-sluice-{PUBLIC_ID}-{'x' * 32}", f"sk-sluice-{PUBLIC_ID}"),  # shortest secret
        (f"sk-sluice-{PUBLIC_ID}-{'x' * 31}", None),  # secret too short
        (f"sk-sluice-{PUBLIC_ID}-", None),  # no secret
        (f"sk-sluice-{PUBLIC_ID}{SECRET_43}", None),  # no separator
        (f"sk-sluice-0123456789a-{SECRET_43}", None),  # public id 11 chars
        (f"sk-sluice-0123456789abc-{SECRET_43}", None),  # public id 13 chars
        (f"sk-other-{PUBLIC_ID}-{SECRET_43}", None),  # wrong scheme
        (f"SK-SLUICE-{PUBLIC_ID}-{SECRET_43}", None),  # prefix is case-sensitive
        (f"sk-{PUBLIC_ID}-{SECRET_43}", None),
        ("", None),
        ("sk-sluice-", None),
        ("Bearer sk-sluice-x", None),
    ],
)
def test_key_prefix_of_returns_prefix_only_for_well_formed_keys(
    plaintext: str, expected: str | None
) -> None:
    assert key_prefix_of(plaintext) == expected


def test_key_matches_its_own_hash_only() -> None:
    a, b = key_generate(), key_generate()
    assert key_matches(a.plaintext, a.secret_hash) is True
    assert key_matches(b.plaintext, b.secret_hash) is True
    assert key_matches(a.plaintext, b.secret_hash) is False
    assert key_matches(a.plaintext + "x", a.secret_hash) is False
    assert key_matches(a.plaintext[:-1], a.secret_hash) is False
    assert key_matches(a.plaintext, "") is False


def test_key_prefix_constant_is_the_public_scheme() -> None:
    assert KEY_PREFIX == "sk-sluice-"


# --- fixtures for the database tests ---------------------------------------------------


def _slug(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def team() -> Team:
    return Team.objects.create(slug=_slug("keys-team"), name="Keys team")


@pytest.fixture
def other_team() -> Team:
    return Team.objects.create(slug=_slug("keys-other"), name="Other team")


@pytest.fixture
def application(team: Team) -> Application:
    return Application.objects.create(team=team, slug=_slug("keys-app"), name="Keys app")


@pytest.fixture
def member(team: Team) -> Member:
    return member_ensure(email=f"{_slug('alice')}@example.com", team=team)


# --- services.py: member_ensure --------------------------------------------------------


@pytest.mark.django_db
def test_member_ensure_creates_user_and_member_in_team(team: Team) -> None:
    email = f"{_slug('new')}@example.com"
    member = member_ensure(email=email, team=team)
    member.refresh_from_db()
    assert member.user.username == email
    assert member.user.email == email
    assert member.team_id == team.pk
    assert member.role == Member.Role.MEMBER


@pytest.mark.django_db
def test_member_ensure_gives_no_password_that_logs_in(team: Team) -> None:
    member = member_ensure(email=f"{_slug('nopw')}@example.com", team=team)
    user = get_user_model().objects.get(pk=member.user_id)
    assert user.check_password("") is False
    assert user.check_password("password") is False


@pytest.mark.django_db
def test_member_ensure_creates_user_with_unusable_password(team: Team) -> None:
    member = member_ensure(email=f"{_slug('unusable')}@example.com", team=team)
    user = get_user_model().objects.get(pk=member.user_id)
    assert user.has_usable_password() is False


@pytest.mark.django_db
def test_member_ensure_twice_returns_the_same_member_without_duplicates(team: Team) -> None:
    email = f"{_slug('twice')}@example.com"
    first = member_ensure(email=email, team=team)
    second = member_ensure(email=email, team=team)
    assert first.pk == second.pk
    assert Member.objects.filter(user__email=email).count() == 1
    assert get_user_model().objects.filter(username=email).count() == 1


@pytest.mark.django_db
def test_member_ensure_moves_existing_member_to_new_team_and_role(
    team: Team, other_team: Team
) -> None:
    email = f"{_slug('mover')}@example.com"
    first = member_ensure(email=email, team=team)
    moved = member_ensure(email=email, team=other_team, role=Member.Role.ADMIN)
    assert moved.pk == first.pk
    moved.refresh_from_db()
    assert (moved.team_id, moved.role) == (other_team.pk, Member.Role.ADMIN)


# --- services.py: key_issue / key_revoke -----------------------------------------------


@pytest.mark.django_db
def test_key_issue_stores_prefix_and_hash_but_not_the_plaintext(
    member: Member, application: Application
) -> None:
    key, plaintext = key_issue(
        member_email=member.user.email, application_slug=application.slug, name="laptop"
    )
    stored = ApiKey.objects.get(pk=key.pk)
    assert KEY_RE.match(plaintext)
    assert stored.prefix == key_prefix_of(plaintext)
    assert stored.secret_hash == key_hash(plaintext)
    assert key_matches(plaintext, stored.secret_hash)
    assert (stored.member_id, stored.application_id, stored.name) == (
        member.pk,
        application.pk,
        "laptop",
    )
    assert stored.expires_at is None
    assert stored.revoked_at is None
    secret = plaintext[len(stored.prefix) + 1 :]
    for value in (stored.prefix, stored.secret_hash, stored.name):
        assert secret not in value


@pytest.mark.django_db
def test_key_issue_twice_gives_two_different_keys(member: Member, application: Application) -> None:
    k1, p1 = key_issue(member_email=member.user.email, application_slug=application.slug)
    k2, p2 = key_issue(member_email=member.user.email, application_slug=application.slug)
    assert p1 != p2
    assert k1.prefix != k2.prefix
    assert k1.secret_hash != k2.secret_hash


@pytest.mark.django_db
@pytest.mark.parametrize("days", [1, 30, 365])
def test_key_issue_expires_days_sets_expiry_that_many_days_ahead(
    member: Member, application: Application, days: int
) -> None:
    before = timezone.now()
    key, _ = key_issue(
        member_email=member.user.email, application_slug=application.slug, expires_days=days
    )
    after = timezone.now()
    expires_at = ApiKey.objects.get(pk=key.pk).expires_at
    assert expires_at is not None
    assert before + timedelta(days=days) <= expires_at <= after + timedelta(days=days)


@pytest.mark.django_db
@pytest.mark.parametrize("days", [0, -1])
def test_key_issue_rejects_non_positive_expires_days(
    member: Member, application: Application, days: int
) -> None:
    with pytest.raises(AccountError, match="expires-days"):
        key_issue(
            member_email=member.user.email, application_slug=application.slug, expires_days=days
        )
    assert not ApiKey.objects.filter(member=member).exists()


@pytest.mark.django_db
def test_key_issue_unknown_member_is_an_account_error(application: Application) -> None:
    with pytest.raises(AccountError, match=r"nobody@example\.com"):
        key_issue(member_email="nobody@example.com", application_slug=application.slug)
    assert not ApiKey.objects.filter(application=application).exists()


@pytest.mark.django_db
def test_key_issue_unknown_application_is_an_account_error(member: Member) -> None:
    with pytest.raises(AccountError, match="no-such-app"):
        key_issue(member_email=member.user.email, application_slug="no-such-app")
    assert not ApiKey.objects.filter(member=member).exists()


@pytest.mark.django_db
def test_key_issue_for_application_of_another_team_is_an_account_error(
    member: Member, other_team: Team
) -> None:
    foreign = Application.objects.create(team=other_team, slug=_slug("foreign"), name="Foreign")
    with pytest.raises(AccountError, match=foreign.slug):
        key_issue(member_email=member.user.email, application_slug=foreign.slug)
    assert not ApiKey.objects.filter(member=member).exists()


@pytest.mark.django_db
def test_key_revoke_sets_revoked_at(member: Member, application: Application) -> None:
    key, _ = key_issue(member_email=member.user.email, application_slug=application.slug)
    before = timezone.now()
    revoked = key_revoke(prefix=key.prefix)
    stored = ApiKey.objects.get(pk=key.pk)
    assert revoked.pk == key.pk
    assert stored.revoked_at is not None
    assert before <= stored.revoked_at <= timezone.now()


@pytest.mark.django_db
def test_key_revoke_twice_keeps_the_first_revocation_time(
    member: Member, application: Application
) -> None:
    key, _ = key_issue(member_email=member.user.email, application_slug=application.slug)
    first = key_revoke(prefix=key.prefix).revoked_at
    second = key_revoke(prefix=key.prefix).revoked_at
    assert first is not None
    assert second == first
    assert ApiKey.objects.get(pk=key.pk).revoked_at == first


@pytest.mark.django_db
def test_key_revoke_only_touches_the_named_key(member: Member, application: Application) -> None:
    a, _ = key_issue(member_email=member.user.email, application_slug=application.slug)
    b, _ = key_issue(member_email=member.user.email, application_slug=application.slug)
    key_revoke(prefix=a.prefix)
    assert ApiKey.objects.get(pk=b.pk).revoked_at is None


@pytest.mark.django_db
def test_key_revoke_unknown_prefix_is_an_account_error() -> None:
    with pytest.raises(AccountError, match="sk-sluice-000000000000"):
        key_revoke(prefix="sk-sluice-000000000000")


# --- management commands ---------------------------------------------------------------


@pytest.mark.django_db
def test_issue_key_command_prints_the_key_alone_on_the_last_stdout_line(
    member: Member, application: Application
) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "issue_key",
        "--member",
        member.user.email,
        "--application",
        application.slug,
        "--name",
        "ci",
        stdout=out,
        stderr=err,
    )
    last_line = out.getvalue().rstrip("\n").splitlines()[-1]
    assert KEY_RE.match(last_line), last_line
    stored = ApiKey.objects.get(member=member)
    assert stored.prefix == key_prefix_of(last_line)
    assert key_matches(last_line, stored.secret_hash)
    assert stored.name == "ci"
    secret = last_line[len(stored.prefix) + 1 :]
    assert secret not in err.getvalue()
    assert stored.prefix in err.getvalue()  # the public part names the key for the admin


@pytest.mark.django_db
def test_issue_key_command_expires_days_sets_expiry(
    member: Member, application: Application
) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "issue_key",
        "--member",
        member.user.email,
        "--application",
        application.slug,
        "--expires-days",
        "7",
        stdout=out,
        stderr=err,
    )
    stored = ApiKey.objects.get(member=member)
    assert stored.expires_at is not None
    assert abs(stored.expires_at - (timezone.now() + timedelta(days=7))) < timedelta(minutes=1)
    assert "never" not in err.getvalue()


@pytest.mark.django_db
@pytest.mark.parametrize("which", ["member", "application"])
def test_issue_key_command_unknown_names_raise_command_error_and_print_no_key(
    member: Member, application: Application, which: str
) -> None:
    args = {"member": member.user.email, "application": application.slug}
    args[which] = "missing@example.com" if which == "member" else "missing-app"
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="missing"):
        call_command(
            "issue_key",
            "--member",
            args["member"],
            "--application",
            args["application"],
            stdout=out,
            stderr=err,
        )
    assert "sk-sluice-" not in out.getvalue()
    assert not ApiKey.objects.filter(member=member).exists()


@pytest.mark.django_db
def test_revoke_key_command_revokes_and_reports_the_prefix(
    member: Member, application: Application
) -> None:
    key, _ = key_issue(member_email=member.user.email, application_slug=application.slug)
    out = io.StringIO()
    call_command("revoke_key", key.prefix, stdout=out, stderr=io.StringIO())
    stored = ApiKey.objects.get(pk=key.pk)
    assert stored.revoked_at is not None
    assert f"Revoked {key.prefix} at {stored.revoked_at.isoformat()}" in out.getvalue()


@pytest.mark.django_db
def test_revoke_key_command_unknown_prefix_raises_command_error() -> None:
    with pytest.raises(CommandError, match="sk-sluice-ffffffffffff"):
        call_command(
            "revoke_key", "sk-sluice-ffffffffffff", stdout=io.StringIO(), stderr=io.StringIO()
        )


# --- authentication.py: presented_key --------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"authorization": "Bearer sk-sluice-abc"}, "sk-sluice-abc"),
        ({"authorization": "bearer sk-sluice-abc"}, "sk-sluice-abc"),
        ({"authorization": "BEARER sk-sluice-abc"}, "sk-sluice-abc"),
        ({"authorization": "BeArEr   sk-sluice-abc  "}, "sk-sluice-abc"),
        ({"x-api-key": "sk-sluice-xyz"}, "sk-sluice-xyz"),
        ({"x-api-key": "  sk-sluice-xyz  "}, "sk-sluice-xyz"),
        # Bearer wins over x-api-key.
        ({"authorization": "Bearer sk-a", "x-api-key": "sk-b"}, "sk-a"),
        # A non-Bearer Authorization falls back to x-api-key.
        ({"authorization": "Basic dXNlcjpwdw==", "x-api-key": "sk-b"}, "sk-b"),
        ({"authorization": "Basic dXNlcjpwdw=="}, None),
        ({"authorization": "Bearer "}, None),
        ({"authorization": "Bearer    "}, None),
        ({"authorization": "Bearer"}, None),
        ({"x-api-key": ""}, None),
        ({"x-api-key": "   "}, None),
        ({}, None),
    ],
)
def test_presented_key_reads_bearer_then_x_api_key(
    headers: dict[str, str], expected: str | None
) -> None:
    assert presented_key(headers) == expected


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ({"HTTP_AUTHORIZATION": "Bearer sk-sluice-from-django"}, "sk-sluice-from-django"),
        ({"HTTP_X_API_KEY": "sk-sluice-from-x"}, "sk-sluice-from-x"),
        ({}, None),
    ],
)
def test_presented_key_works_with_django_request_headers(
    meta: dict[str, str], expected: str | None
) -> None:
    assert presented_key(HttpHeaders(meta)) == expected


# --- authentication.py: _load ----------------------------------------------------------


@pytest.mark.django_db
def test_load_returns_principal_with_allowed_routes_and_default_priority(
    member: Member, team: Team
) -> None:
    app = Application.objects.create(
        team=team,
        slug=_slug("auth-app"),
        name="Auth app",
        default_priority=PriorityClass.BATCH,
    )
    allowed_a = Route.objects.create(name=_slug("route-a"))
    allowed_b = Route.objects.create(name=_slug("route-b"))
    Route.objects.create(name=_slug("route-not-allowed"))
    app.routes.set([allowed_a, allowed_b])
    key, _ = key_issue(member_email=member.user.email, application_slug=app.slug, expires_days=3)

    principal = _load(key.prefix)

    assert isinstance(principal, Principal)
    assert principal.allowed_routes == frozenset({allowed_a.name, allowed_b.name})
    assert principal.default_priority == "batch"
    assert principal.key_id == key.pk
    assert principal.prefix == key.prefix
    assert principal.secret_hash == key.secret_hash
    assert principal.member_id == member.pk
    assert principal.member_email == member.user.email
    assert principal.team_id == team.pk
    assert principal.application_id == app.pk
    assert principal.application_slug == app.slug
    assert principal.expires_at == ApiKey.objects.get(pk=key.pk).expires_at
    assert principal.revoked is False


@pytest.mark.django_db
def test_load_of_application_without_routes_allows_none(
    member: Member, application: Application
) -> None:
    key, _ = key_issue(member_email=member.user.email, application_slug=application.slug)
    principal = _load(key.prefix)
    assert principal is not None
    assert principal.allowed_routes == frozenset()
    assert principal.default_priority == "interactive"


@pytest.mark.django_db
def test_load_reports_a_revoked_key_as_revoked(member: Member, application: Application) -> None:
    key, _ = key_issue(member_email=member.user.email, application_slug=application.slug)
    key_revoke(prefix=key.prefix)
    principal = _load(key.prefix)
    assert principal is not None
    assert principal.revoked is True


@pytest.mark.django_db
def test_load_marks_the_key_as_used(member: Member, application: Application) -> None:
    key, _ = key_issue(member_email=member.user.email, application_slug=application.slug)
    assert ApiKey.objects.get(pk=key.pk).last_used_at is None
    _load(key.prefix)
    last_used = ApiKey.objects.get(pk=key.pk).last_used_at
    assert last_used is not None
    assert timezone.now() - last_used < timedelta(minutes=1)


@pytest.mark.django_db
@pytest.mark.parametrize("prefix", ["sk-sluice-000000000000", "", "sk-sluice-"])
def test_load_of_unknown_prefix_is_none(prefix: str) -> None:
    assert _load(prefix) is None
