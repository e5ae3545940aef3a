"""A small world for the management API tests: two teams, one of each role, an API client
per role; and the documented error shape."""

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from accounts.models import Application, Member, Team
from accounts.services import SYSTEM, key_issue, management_token_issue, member_ensure
from routing.models import Deployment, Route, RouteDeployment, Upstream

ROLES = ("admin", "team_admin", "member", "other", "anonymous", "gateway_key")


@dataclass
class World:
    team: Team
    other_team: Team
    app: Application
    other_app: Application
    team_admin: Member
    member: Member
    other: Member
    member_key_prefix: str
    other_key_prefix: str
    tokens: dict[str, str]  # role -> Authorization header value


def make_world() -> World:
    team = Team.objects.create(slug="acme", name="Acme")
    other_team = Team.objects.create(slug="globex", name="Globex")
    upstream = Upstream.objects.create(name="up", base_url="http://127.0.0.1:9/v1")
    deployment = Deployment.objects.create(name="dep-a", upstream=upstream, model="m")
    route = Route.objects.create(name="fast")
    RouteDeployment.objects.create(route=route, deployment=deployment, position=0)
    app = Application.objects.create(team=team, slug="acme-app", name="Acme app")
    app.routes.set([route])
    other_app = Application.objects.create(team=other_team, slug="globex-app", name="Globex app")
    get_user_model().objects.create_user("root", email="root@example.com", is_staff=True)
    team_admin = member_ensure(email="boss@acme.test", team=team, role=Member.Role.ADMIN)
    member = member_ensure(email="dev@acme.test", team=team)
    other = member_ensure(email="dev@globex.test", team=other_team)
    member_key, gateway_plaintext = key_issue(
        member_email="dev@acme.test", application_slug="acme-app", name="laptop"
    )
    other_key, _ = key_issue(member_email="dev@globex.test", application_slug="globex-app")
    tokens = {"anonymous": "", "gateway_key": f"Bearer {gateway_plaintext}"}
    for role, email in (
        ("admin", "root@example.com"),
        ("team_admin", "boss@acme.test"),
        ("member", "dev@acme.test"),
        ("other", "dev@globex.test"),
    ):
        _, plaintext = management_token_issue(actor=SYSTEM, user_email=email)
        tokens[role] = f"Bearer {plaintext}"
    return World(
        team,
        other_team,
        app,
        other_app,
        team_admin,
        member,
        other,
        member_key.prefix,
        other_key.prefix,
        tokens,
    )


def api_client(world: World, role: str) -> APIClient:
    """An API client sending the role's credentials (none for `anonymous`)."""
    client = APIClient()
    if world.tokens[role]:
        client.credentials(HTTP_AUTHORIZATION=world.tokens[role])
    return client


def assert_error(response: object, status: int) -> dict:
    """The documented error shape, with the expected status."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"message", "type", "code", "param"} <= set(error), error
    assert isinstance(error["message"], str) and error["message"]
    return error
