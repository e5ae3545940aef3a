"""Single sign-on without a provider: what groups grant (accounts/sso_rules.py), the
config file's [sso] table and its refusals, password login kept to the break-glass
accounts, and `manage.py sso_sweep` for members who left. The flow through a real provider
is tests/console/test_sso_login.py (HTTP) and test_sso_browser.py (Chromium)."""

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from accounts.models import AdminAction, ApiKey, Application, Member, SsoConfig, SsoIdentity, Team
from accounts.services import key_issue, member_ensure
from accounts.sso_rules import GroupRule, RuleError, grant_for, groups_of, rules_from
from accounts.sso_section import sso_section_check
from accounts.sso_services import ProviderAccount, SignInRefused, sso_sign_in
from routing.catalog.config_file import ConfigError, validate_config

RULES = [
    GroupRule("eng", team="eng"),
    GroupRule("eng-leads", team="eng", role="admin"),
    GroupRule("research", team="research", role="admin"),
    GroupRule("ops", staff=True),
]
SECTION = {
    "issuer": "https://idp.example.com/realms/acme/",
    "client_id": "sluice",
    "client_secret_env": "SLUICE_OIDC_CLIENT_SECRET",
    "groups": [{"group": "eng", "team": "eng"}],
}
PASSWORD = "a-long-enough-Pass-7"


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        (["eng"], ("eng", "member", False)),
        (["eng", "eng-leads"], ("eng", "admin", False)),
        # One team a member: the first rule in file order decides; research's admin role
        # is not carried over to eng.
        (["research", "eng"], ("eng", "member", False)),
        (["ops"], (None, "member", True)),
        (["ops", "eng-leads"], ("eng", "admin", True)),
    ],
)
def test_groups_grant_the_first_rules_team_and_the_best_role_in_it(
    groups: list[str], expected: tuple[Any, ...]
) -> None:
    grant = grant_for(groups, RULES)
    assert grant is not None
    assert (grant.team, grant.role, grant.staff) == expected


def test_groups_no_rule_names_grant_nothing() -> None:
    assert grant_for(["marketing", "all-staff"], RULES) is None
    assert grant_for([], RULES) is None
    grant = grant_for(["research", "eng"], RULES)
    assert grant is not None and grant.ignored == ("research",)


@pytest.mark.parametrize(
    ("claims", "path", "groups"),
    [
        ({"groups": ["a", "b"]}, "groups", ["a", "b"]),
        ({"groups": "a"}, "groups", ["a"]),
        ({"realm_access": {"roles": ["x", 3]}}, "realm_access.roles", ["x"]),
        ({"groups": {"a": 1}}, "groups", []),
        ({}, "groups", []),
    ],
)
def test_the_groups_claim_is_read_by_name_or_dotted_path(
    claims: dict[str, Any], path: str, groups: list[str]
) -> None:
    assert groups_of(claims, path) == groups


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"group": "x"}, "grants nothing"),
        ({"group": "", "team": "t"}, "group must be a non-empty string"),
        ({"group": "x", "team": "t", "role": "owner"}, "role must be one of member, admin"),
        ({"group": "x", "staff": "yes"}, "staff must be true or false"),
        ({"group": "x", "team": "t", "colour": "red"}, "unknown field(s) colour"),
    ],
)
def test_a_bad_group_rule_is_named(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(RuleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rules_from([entry])


def test_the_sso_table_is_checked_and_normalised() -> None:
    fields = sso_section_check(SECTION | {"scopes": ["openid", "email", "groups"]})
    assert fields["issuer"] == "https://idp.example.com/realms/acme"  # no trailing slash
    assert fields["scopes"] == "openid email groups"
    assert fields["password_login"] == "on"
    assert fields["group_rules"] == [
        {"group": "eng", "team": "eng", "role": "member", "staff": False}
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"client_secret_env": "SLUICE_SECRET_KEY"}, "must name the environment variable"),
        ({"client_secret_env": "s3cr3t value!"}, "must name the environment variable"),
        ({"issuer": "ftp://idp.example.com"}, "sso.issuer must be an http"),
        ({"scopes": "email profile"}, 'must include "openid"'),
        ({"password_login": "off"}, 'must be "on" or "break-glass"'),
        ({"password_login": "break-glass"}, "needs at least one break_glass account"),
        ({"client_secret": "abc"}, "unknown field"),
        ({"groups": [{"group": "eng", "team": "nowhere"}]}, "unknown team 'nowhere'"),
    ],
)
def test_a_bad_sso_table_is_refused_by_the_config_file_check(
    db: None, change: dict[str, Any], message: str
) -> None:
    Team.objects.create(slug="eng", name="eng")
    with pytest.raises(ConfigError, match=message):
        validate_config({"sso": SECTION | change})


@pytest.fixture
def sso(db: None) -> SsoConfig:
    for slug in ("eng", "research"):
        Team.objects.create(slug=slug, name=slug)
    fields = sso_section_check(
        SECTION
        | {
            "password_login": "break-glass",
            "break_glass": ["Root@Example.com"],
            "groups": [{"group": "eng", "team": "eng"}, {"group": "ops", "staff": True}],
        }
    )
    return SsoConfig.objects.create(pk=1, **fields)


def _user(email: str, *, staff: bool = False) -> Any:
    user = get_user_model().objects.create_user(
        email, email=email, password=PASSWORD, is_staff=staff
    )
    Member.objects.create(user=user, team=Team.objects.get(slug="eng"))
    return user


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_with_break_glass_only_its_accounts_log_in_with_a_password(
    sso: SsoConfig, path: str
) -> None:
    caches["ratelimit"].clear()
    _user("root@example.com", staff=True)
    _user("ann@example.com", staff=True)
    refused = Client().post(path, {"username": "ann@example.com", "password": PASSWORD})
    assert refused.status_code == 200 and "_auth_user_id" not in refused.client.session
    allowed = Client().post(path, {"username": "root@example.com", "password": PASSWORD})
    assert allowed.status_code == 302


def test_the_login_page_offers_the_provider_and_folds_the_password_form(sso: SsoConfig) -> None:
    page = Client().get("/login/?next=/keys/").content.decode()
    assert 'data-testid="sso-login"' in page and "/sso/login/?next=/keys/" in page
    assert "Break-glass sign-in" in page
    SsoConfig.objects.filter(pk=1).update(password_login="on")
    page = Client().get("/login/").content.decode()
    assert "Break-glass" not in page and "or with your password" in page
    SsoConfig.objects.all().delete()
    page = Client().get("/login/").content.decode()
    assert "sso-login" not in page
    assert Client().get("/sso/login/").status_code == 404
    assert Client().get("/sso/callback/?code=x&state=y").status_code == 404


def _account(email: str, *groups: str, verified: bool = True) -> ProviderAccount:
    return ProviderAccount(
        issuer=SsoConfig.objects.get().issuer,
        subject=email.split("@")[0],
        email=email,
        email_verified=verified,
        groups=groups,
    )


def test_a_break_glass_account_is_never_taken_over_by_the_provider(sso: SsoConfig) -> None:
    _user("root@example.com", staff=True)
    with pytest.raises(SignInRefused, match="break-glass account"):
        sso_sign_in(account=_account("root@example.com", "eng"), config=sso)
    assert not SsoIdentity.objects.exists()


def test_a_verified_email_links_an_existing_password_account(sso: SsoConfig) -> None:
    user = _user("kim@example.com", staff=True)
    assert sso_sign_in(account=_account("kim@example.com", "eng"), config=sso) == user
    user.refresh_from_db()
    assert not user.is_staff  # the provider's groups decide, for everyone signing in through it
    assert user.sso_identity.subject == "kim"
    action = AdminAction.objects.filter(via="sso").get()
    assert (action.before["staff"], action.after["staff"]) == (True, False)


def test_the_sweep_lists_then_deprovisions_members_who_stopped_signing_in(
    sso: SsoConfig,
) -> None:
    Application.objects.create(slug="eng-app", name="x", team=Team.objects.get(slug="eng"))
    for name, days in (("old", 45), ("new", 2)):
        email = f"{name}@example.com"
        sso_sign_in(account=_account(email, "eng"), config=sso)
        key_issue(member_email=email, application_slug="eng-app")
        SsoIdentity.objects.filter(user__email=email).update(
            last_login_at=timezone.now() - timedelta(days=days)
        )
    member_ensure(email="pw@example.com", team=Team.objects.get(slug="eng"))  # no SSO: kept

    out = StringIO()
    call_command("sso_sweep", "--idle-days", "30", stdout=out)
    assert "would deactivate old@example.com" in out.getvalue()
    assert "new@" not in out.getvalue() and "pw@" not in out.getvalue()
    assert ApiKey.objects.filter(revoked_at=None).count() == 2

    out = StringIO()
    call_command("sso_sweep", "--idle-days", "30", "--apply", stdout=out)
    assert "deactivated old@example.com" in out.getvalue() and "1 key(s) revoked" in out.getvalue()
    old = get_user_model().objects.get(email="old@example.com")
    assert not old.is_active
    assert not ApiKey.objects.filter(member__user=old, revoked_at=None).exists()
    assert ApiKey.objects.filter(member__user__email="new@example.com", revoked_at=None).exists()
    actions = AdminAction.objects.filter(actor_label__contains="sso_sweep")
    assert sorted(a.action for a in actions) == ["key.revoke", "member.deactivate"]
    assert all("30 days" in a.after["reason"] for a in actions)

    out = StringIO()
    call_command("sso_sweep", "--idle-days", "30", "--apply", stdout=out)
    assert "nobody has been away for 30 days" in out.getvalue()


def test_a_member_an_admin_deactivated_is_not_let_back_in_by_a_sign_in(sso: SsoConfig) -> None:
    from accounts.services import SYSTEM, member_set_active

    user = sso_sign_in(account=_account("liv@example.com", "eng"), config=sso)
    member_set_active(actor=SYSTEM, member=user.member, active=False)
    with pytest.raises(SignInRefused, match="deactivated"):
        sso_sign_in(account=_account("liv@example.com", "eng"), config=sso)
    user.refresh_from_db()
    assert not user.is_active

    # Deactivated by single sign-on itself (its groups were gone): back in with them.
    other = sso_sign_in(account=_account("max@example.com", "eng"), config=sso)
    with pytest.raises(SignInRefused, match="no access"):
        sso_sign_in(account=_account("max@example.com", "marketing"), config=sso)
    assert sso_sign_in(account=_account("max@example.com", "eng"), config=sso) == other
    other.refresh_from_db()
    assert other.is_active
