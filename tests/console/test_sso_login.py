"""Console sign-in through a real OpenID provider (npm oidc-provider on loopback) with
plain HTTP: the code flow with PKCE, state and nonce, groups deciding team and role on every
sign-in, and each way the answer can be refused (a tampered state, an expired or replayed
code, an ID token for another audience, groups mapped to nothing) ending on a page that
says why. The browser does the same in test_sso_browser.py."""

import time
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from tests.console.sso import CODE_TTL_SECONDS, SsoWorld, account, sso_section


def _user(email: str) -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(email=email).select_related("member__team").first()


def _sso_actions(email: str) -> list[Any]:
    from accounts.models import AdminAction

    return list(AdminAction.objects.filter(via="sso", object_repr=email).order_by("id"))


def test_the_authorize_request_carries_pkce_state_and_nonce(sso_world: SsoWorld) -> None:
    with httpx.Client() as client:
        query = parse_qs(urlsplit(sso_world.start(client)).query)
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) >= 43
    assert query["state"][0] and query["nonce"][0]
    assert query["response_type"] == ["code"]
    assert set(query["scope"][0].split()) >= {"openid", "email", "groups"}


def test_a_first_sign_in_creates_the_member_of_the_mapped_team_and_lands_on_their_keys(
    sso_world: SsoWorld, committed_db: None
) -> None:
    sso_world.provider.set_account("ann", account("ann", "sluice-eng", "unrelated"))
    with sso_world.signed_in("ann") as (client, answer):
        assert answer.status_code == 302
        assert answer.headers["location"] == "/keys/"
        keys = client.get(f"{sso_world.gateway.url}/keys/")
        assert keys.status_code == 200
        assert "ann@sso.example.com" in keys.text
    user = _user("ann@sso.example.com")
    assert (user.member.team.slug, user.member.role, user.is_staff) == ("sso-eng", "member", False)
    assert not user.has_usable_password()
    assert user.sso_identity.groups == ["sluice-eng", "unrelated"]
    actions = _sso_actions("ann@sso.example.com")
    assert [a.action for a in actions] == ["member.create", "member.sso_update"]
    assert actions[1].after["team"] == "sso-eng" and actions[1].after["groups"] == ["sluice-eng"]
    assert actions[0].actor_label == f"single sign-on ({sso_world.provider.issuer})"


def test_a_group_change_at_the_provider_changes_the_role_at_the_next_sign_in(
    sso_world: SsoWorld, committed_db: None
) -> None:
    provider = sso_world.provider
    provider.set_account("ben", account("ben", "sluice-eng"))
    sso_world.sign_in("ben")
    provider.set_groups("ben", ["sluice-eng", "sluice-eng-admins", "sluice-ops"])
    with sso_world.signed_in("ben") as (client, answer):
        assert answer.status_code == 302
        members = client.get(f"{sso_world.gateway.url}/members/")
        assert members.status_code == 200  # a team admin's page; a member gets 403
    user = _user("ben@sso.example.com")
    assert (user.member.role, user.is_staff) == ("admin", True)
    change = _sso_actions("ben@sso.example.com")[-1]
    assert change.before["role"] == "member" and change.after["role"] == "admin"
    assert change.before["staff"] is False and change.after["staff"] is True

    # Admin groups gone: back to a member at the next sign-in, one more action.
    provider.set_groups("ben", ["sluice-eng"])
    sso_world.sign_in("ben")
    user = _user("ben@sso.example.com")
    assert (user.member.role, user.is_staff) == ("member", False)
    assert _sso_actions("ben@sso.example.com")[-1].after["role"] == "member"

    # Signing in again with the same groups changes nothing and records nothing.
    count = len(_sso_actions("ben@sso.example.com"))
    sso_world.sign_in("ben")
    assert len(_sso_actions("ben@sso.example.com")) == count


def test_a_move_to_another_team_by_group_revokes_the_old_teams_keys(
    sso_world: SsoWorld, committed_db: None
) -> None:
    from accounts.models import Application, Team
    from accounts.services import key_issue

    provider = sso_world.provider
    provider.set_account("cat", account("cat", "sluice-eng"))
    sso_world.sign_in("cat")
    Application.objects.get_or_create(
        slug="sso-eng-app", defaults={"name": "x", "team": Team.objects.get(slug="sso-eng")}
    )
    key, _ = key_issue(member_email="cat@sso.example.com", application_slug="sso-eng-app")
    provider.set_groups("cat", ["sluice-research"])
    sso_world.sign_in("cat")
    user = _user("cat@sso.example.com")
    assert user.member.team.slug == "sso-research"
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_groups_mapped_to_nothing_are_refused_with_a_page_and_deactivate_a_known_member(
    sso_world: SsoWorld, committed_db: None
) -> None:
    provider = sso_world.provider
    provider.set_account("dan", account("dan", "marketing"))
    answer = sso_world.sign_in("dan")
    assert answer.status_code == 403
    assert "Your groups give no access to Sluice" in answer.text
    assert "marketing" in answer.text
    assert _user("dan@sso.example.com") is None  # nobody is created

    provider.set_account("eve", account("eve", "sluice-eng"))
    with sso_world.signed_in("eve") as (client, _):
        provider.set_groups("eve", [])
        refused = sso_world.sign_in("eve")
        assert refused.status_code == 403
        # Her earlier session is over too: a deactivated user is nobody.
        assert client.get(f"{sso_world.gateway.url}/keys/").status_code == 302
    user = _user("eve@sso.example.com")
    assert not user.is_active
    assert _sso_actions("eve@sso.example.com")[-1].action == "member.deactivate"

    provider.set_groups("eve", ["sluice-eng"])  # back in the group: back in
    assert sso_world.sign_in("eve").status_code == 302
    assert _user("eve@sso.example.com").is_active


def test_a_tampered_state_is_refused(sso_world: SsoWorld, committed_db: None) -> None:
    sso_world.provider.set_account("fay", account("fay", "sluice-eng"))
    with httpx.Client() as client:
        callback = sso_world.callback_for(client, "fay")
        parts = urlsplit(callback)
        query = parse_qs(parts.query)
        query["state"] = ["forged" + query["state"][0][6:]]
        answer = client.get(parts._replace(query=urlencode(query, doseq=True)).geturl())
    assert answer.status_code == 400
    assert "does not belong to a sign-in started here (state)" in answer.text
    assert _user("fay@sso.example.com") is None


def test_an_expired_code_and_a_replayed_code_are_refused(
    sso_world: SsoWorld, committed_db: None
) -> None:
    sso_world.provider.set_account("gus", account("gus", "sluice-eng"))
    with httpx.Client() as client:
        callback = sso_world.callback_for(client, "gus")
        time.sleep(CODE_TTL_SECONDS + 1.5)
        answer = client.get(callback)
    assert answer.status_code == 400
    assert "refused the one-time code (invalid_grant)" in answer.text
    assert _user("gus@sso.example.com") is None

    with httpx.Client() as client:
        callback = sso_world.callback_for(client, "gus")
        state = parse_qs(urlsplit(callback).query)["state"][0]
        assert client.get(callback).status_code == 302
        # The same code again, with a fresh sign-in's state: the provider refuses it.
        again = parse_qs(urlsplit(sso_world.callback_for(client, "gus")).query)["state"][0]
        replay = callback.replace(state, again)
        assert client.get(replay).status_code == 400


def test_an_id_token_for_another_audience_is_refused(
    sso_world: SsoWorld, committed_db: None
) -> None:
    from accounts.sso_services import sso_config_apply

    other = sso_world.wrong_audience
    other.set_account("hal", account("hal", "sluice-eng"))
    sso_config_apply(_fields(sso_section(other)))
    try:
        answer = sso_world.sign_in("hal")
    finally:
        sso_config_apply(_fields(sso_section(sso_world.provider)))
    assert answer.status_code == 400
    assert "The ID token failed its checks" in answer.text
    assert "&#x27;aud&#x27;" in answer.text  # the claim that failed, named
    assert _user("hal@sso.example.com") is None


def test_an_unverified_email_does_not_take_over_a_password_account(
    sso_world: SsoWorld, committed_db: None
) -> None:
    from accounts.models import Team
    from accounts.services import member_ensure

    member_ensure(email="ida@sso.example.com", team=Team.objects.get(slug="sso-research"))
    sso_world.provider.set_account("ida", account("ida", "sluice-eng", verified=False))
    answer = sso_world.sign_in("ida")
    assert answer.status_code == 403
    assert "Email not verified" in answer.text
    assert _user("ida@sso.example.com").member.team.slug == "sso-research"


@pytest.mark.parametrize("path", ["https://evil.example/", "//evil.example/x"])
def test_the_landing_page_is_never_another_site(
    sso_world: SsoWorld, committed_db: None, path: str
) -> None:
    sso_world.provider.set_account("jo", account("jo", "sluice-eng"))
    with httpx.Client() as client:
        callback = drive_login_from(sso_world, client, "jo", path)
        answer = client.get(callback)
    assert answer.status_code == 302
    assert answer.headers["location"] == "/"


def drive_login_from(world: SsoWorld, client: httpx.Client, login: str, next_path: str) -> str:
    from tests.support.oidc_provider import drive_login

    return drive_login(client, world.start(client, next_path), login)


def _fields(section: dict[str, Any]) -> dict[str, Any]:
    from accounts.sso_section import sso_section_check

    return sso_section_check(section)
