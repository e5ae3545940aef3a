"""Management tokens: format, storage, scope, revocation, the command that issues them."""

import io
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from accounts.keys import key_hash
from accounts.models import AdminAction, ManagementToken, Member, Team
from accounts.selectors import management_token_find, viewer_for_token
from accounts.services import (
    SYSTEM,
    AccountError,
    key_issue,
    management_token_issue,
    management_token_revoke,
    member_ensure,
)

TOKEN_RE = re.compile(r"^sk-sluice-admin-([0-9a-f]{12})-([A-Za-z0-9_-]{43})$")
pytestmark = pytest.mark.django_db


@pytest.fixture
def team() -> Team:
    return Team.objects.create(slug="t1", name="T1")


def test_token_has_its_own_prefix_and_only_its_hash_is_stored() -> None:
    token, plaintext = management_token_issue(actor=SYSTEM, name="ci")
    assert TOKEN_RE.match(plaintext), plaintext
    assert plaintext.startswith(token.prefix + "-")
    assert token.secret_hash == key_hash(plaintext)
    stored = ManagementToken.objects.get(pk=token.pk)
    assert plaintext not in {stored.prefix, stored.secret_hash, stored.name}
    assert management_token_find(plaintext) == token


def test_global_token_without_user_is_an_admin(team: Team) -> None:
    token, _ = management_token_issue(actor=SYSTEM)
    viewer = viewer_for_token(token)
    assert viewer.is_staff and viewer.role == "admin"


def test_team_token_without_user_is_that_teams_admin(team: Team) -> None:
    token, _ = management_token_issue(actor=SYSTEM, team_slug="t1")
    viewer = viewer_for_token(token)
    assert not viewer.is_staff
    assert viewer.team_admin_of == team.pk and viewer.role == "team_admin"


def test_user_token_acts_with_the_users_role(team: Team) -> None:
    member = member_ensure(email="m@example.com", team=team)
    token, _ = management_token_issue(actor=SYSTEM, user_email="m@example.com")
    viewer = viewer_for_token(token)
    assert viewer.role == "member" and viewer.member_id == member.pk


def test_team_scope_narrows_a_staff_users_token_to_team_admin(team: Team) -> None:
    get_user_model().objects.create_user("boss", email="boss@example.com", is_staff=True)
    token, _ = management_token_issue(actor=SYSTEM, user_email="boss@example.com", team_slug="t1")
    viewer = viewer_for_token(token)
    assert viewer.role == "team_admin" and viewer.team_admin_of == team.pk


def test_team_scope_of_another_team_gives_a_member_no_role(team: Team) -> None:
    Team.objects.create(slug="t2", name="T2")
    member_ensure(email="m@example.com", team=team, role=Member.Role.ADMIN)
    token, _ = management_token_issue(actor=SYSTEM, user_email="m@example.com", team_slug="t2")
    assert viewer_for_token(token).role == "anonymous"


def test_revoked_expired_or_wrong_tokens_are_not_found(team: Team) -> None:
    token, plaintext = management_token_issue(actor=SYSTEM)
    assert management_token_find(plaintext[:-1] + ("A" if plaintext[-1] != "A" else "B")) is None
    management_token_revoke(actor=SYSTEM, prefix=token.prefix)
    assert management_token_find(plaintext) is None
    token2, plaintext2 = management_token_issue(actor=SYSTEM, expires_days=1)
    ManagementToken.objects.filter(pk=token2.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert management_token_find(plaintext2) is None


def test_a_gateway_key_is_not_a_management_token(team: Team) -> None:
    from accounts.models import Application

    Application.objects.create(team=team, slug="app", name="App")
    member_ensure(email="m@example.com", team=team)
    _, gateway_key = key_issue(member_email="m@example.com", application_slug="app")
    assert management_token_find(gateway_key) is None


def test_issue_and_revoke_are_in_the_admin_actions_log(team: Team) -> None:
    token, plaintext = management_token_issue(actor=SYSTEM, team_slug="t1")
    management_token_revoke(actor=SYSTEM, prefix=token.prefix)
    actions = list(AdminAction.objects.filter(object_type="management_token").order_by("id"))
    assert [a.action for a in actions] == ["management_token.create", "management_token.revoke"]
    assert all(a.team_id == team.pk for a in actions)
    assert all(plaintext not in str(a.before) + str(a.after) for a in actions)


def test_issue_checks_its_input(team: Team) -> None:
    with pytest.raises(AccountError, match="no team"):
        management_token_issue(actor=SYSTEM, team_slug="nope")
    with pytest.raises(AccountError, match="no active user"):
        management_token_issue(actor=SYSTEM, user_email="ghost@example.com")
    with pytest.raises(AccountError, match="positive"):
        management_token_issue(actor=SYSTEM, expires_days=0)


def test_command_prints_the_token_alone_on_its_last_line(team: Team) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command("issue_admin_token", "--team", "t1", "--name", "bot", stdout=out, stderr=err)
    last = out.getvalue().strip().splitlines()[-1]
    assert TOKEN_RE.match(last)
    token = management_token_find(last)
    assert token is not None and token.team == team and token.name == "bot"
    assert last not in err.getvalue()
    action = AdminAction.objects.get(action="management_token.create")
    assert action.via == "command"


def test_command_refuses_an_unknown_team() -> None:
    with pytest.raises(CommandError, match="no team"):
        call_command("issue_admin_token", "--team", "nope", stdout=io.StringIO())


def test_admin_lists_and_revokes_tokens_through_the_service(team: Team, client: object) -> None:
    get_user_model().objects.create_superuser("root", email="root@example.com", password="pw")
    token, _ = management_token_issue(actor=SYSTEM, name="bot")
    client.login(username="root", password="pw")  # type: ignore[attr-defined]
    page = client.get("/admin/accounts/managementtoken/")  # type: ignore[attr-defined]
    assert page.status_code == 200 and token.prefix in page.content.decode()
    client.post(  # type: ignore[attr-defined]
        "/admin/accounts/managementtoken/",
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    token.refresh_from_db()
    assert token.revoked_at is not None
    action = AdminAction.objects.get(action="management_token.revoke")
    assert action.via == "console" and action.actor_label == "root@example.com"


@pytest.mark.parametrize("email", ["shared@example.com", ""])
def test_a_token_made_from_the_session_is_bound_to_that_user_not_to_its_email(
    team: Team, email: str
) -> None:
    """Emails are not unique in Django's user table (and may be blank): the token must act
    as the user who is logged in, never as an older account that shares the email."""
    from rest_framework.test import APIClient

    User = get_user_model()
    User.objects.create_user("root-account", email=email, is_staff=True)
    member = member_ensure(email="dev@t1.test", team=team)
    member.user.email = email
    member.user.save(update_fields=["email"])
    client = APIClient()
    client.force_login(member.user)
    response = client.post("/api/v1/tokens/", {"name": "mine"}, format="json")
    assert response.status_code == 201, response.content
    token = ManagementToken.objects.get(prefix=response.json()["prefix"])
    assert token.user_id == member.user.pk
    assert not viewer_for_token(token).is_staff


def test_a_command_naming_an_email_two_users_share_is_refused() -> None:
    User = get_user_model()
    for name in ("a", "b"):
        User.objects.create_user(name, email="twice@example.com")
    with pytest.raises(AccountError, match="more than one user"):
        management_token_issue(actor=SYSTEM, user_email="twice@example.com")
    with pytest.raises(AccountError, match="no active user"):
        management_token_issue(actor=SYSTEM, user_email="  ")
