"""Teams, members, applications, keys and the admin actions log through /api/v1/, for
every role: admin, team admin, member, another team's member, anonymous, a gateway key."""

from typing import Any

import pytest

from accounts.models import AdminAction, ApiKey
from tests.support.api import ROLES, assert_error

pytestmark = pytest.mark.django_db

# Unauthenticated callers get 401 everywhere; a gateway key is not a management token.
DENIED = {"anonymous": 401, "gateway_key": 401}


def expect(admin: int, team_admin: int, member: int, other: int) -> dict[str, int]:
    return {"admin": admin, "team_admin": team_admin, "member": member, "other": other} | DENIED


# (method, path, body, expected status per role). Objects are the world's (tests/support/api.py):
# team acme, application acme-app, member dev@acme.test and their key.
READS = [
    ("get", "/api/v1/teams/", None, expect(200, 200, 200, 200)),
    ("get", "/api/v1/teams/acme/", None, expect(200, 200, 200, 404)),
    ("get", "/api/v1/members/", None, expect(200, 200, 200, 200)),
    ("get", "/api/v1/applications/", None, expect(200, 200, 200, 200)),
    ("get", "/api/v1/applications/acme-app/", None, expect(200, 200, 200, 404)),
    ("get", "/api/v1/keys/", None, expect(200, 200, 200, 200)),
    ("get", "/api/v1/admin-actions/", None, expect(200, 200, 403, 403)),
]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("method", "path", "body", "expected"), READS)
def test_reads_per_role(
    client_as: Any, role: str, method: str, path: str, body: Any, expected: dict[str, int]
) -> None:
    response = getattr(client_as(role), method)(path, body, format="json")
    if expected[role] >= 400:
        assert_error(response, expected[role])
    else:
        assert response.status_code == expected[role], response.content


def test_member_detail_is_in_scope_only(world: Any, client_as: Any) -> None:
    path = f"/api/v1/members/{world.member.pk}/"
    for role, status in expect(200, 200, 200, 404).items():
        response = client_as(role).get(path)
        assert response.status_code == status, (role, response.content)


def test_key_detail_is_in_scope_only(world: Any, client_as: Any) -> None:
    path = f"/api/v1/keys/{world.member_key_prefix}/"
    for role, status in expect(200, 200, 200, 404).items():
        response = client_as(role).get(path)
        assert response.status_code == status, (role, response.content)
        if status == 200:
            assert "key" not in response.json() and "secret_hash" not in response.json()


def test_lists_are_scoped(world: Any, client_as: Any) -> None:
    def emails(role: str) -> set[str]:
        return {m["email"] for m in client_as(role).get("/api/v1/members/").json()["results"]}

    assert {"boss@acme.test", "dev@acme.test", "dev@globex.test"} <= emails("admin")
    assert emails("team_admin") == {"boss@acme.test", "dev@acme.test"}
    assert emails("member") == {"dev@acme.test"}
    keys = client_as("member").get("/api/v1/keys/").json()["results"]
    assert [k["prefix"] for k in keys] == [world.member_key_prefix]
    assert client_as("other").get("/api/v1/keys/").json()["results"][0]["prefix"] == (
        world.other_key_prefix
    )


def test_gateway_key_is_told_it_is_not_a_management_token(client_as: Any) -> None:
    error = assert_error(client_as("gateway_key").get("/api/v1/teams/"), 401)
    assert "gateway key" in error["message"]
    assert "sk-sluice-" in error["message"] and error["type"] == "authentication_error"


def test_revoked_token_is_refused(world: Any, client_as: Any) -> None:
    from accounts.services import SYSTEM, management_token_revoke

    prefix = world.tokens["admin"].split()[1][: len("sk-sluice-admin-") + 12]
    management_token_revoke(actor=SYSTEM, prefix=prefix)
    assert_error(client_as("admin").get("/api/v1/teams/"), 401)


# --- writes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_create_team_admin_only(client_as: Any, role: str) -> None:
    response = client_as(role).post("/api/v1/teams/", {"slug": f"t-{role}"}, format="json")
    status = {"admin": 201, "team_admin": 403, "member": 403, "other": 403} | DENIED
    if status[role] == 201:
        assert response.status_code == 201 and response.json()["slug"] == f"t-{role}"
        action = AdminAction.objects.get(action="team.create")
        assert action.via == "api" and action.actor_label.startswith("root@example.com")
    else:
        assert_error(response, status[role])


@pytest.mark.parametrize("role", ROLES)
def test_update_team(client_as: Any, role: str) -> None:
    response = client_as(role).patch("/api/v1/teams/acme/", {"name": "ACME"}, format="json")
    status = expect(200, 200, 403, 404)[role]
    if status == 200:
        assert response.json()["name"] == "ACME"
    else:
        assert_error(response, status)


@pytest.mark.parametrize("role", ROLES)
def test_create_member(client_as: Any, role: str) -> None:
    body = {"email": f"new-{role}@acme.test", "team": "acme", "role": "member"}
    response = client_as(role).post("/api/v1/members/", body, format="json")
    # Another team's member may not manage: 403 before the team is even looked up.
    status = expect(201, 201, 403, 403)[role]
    if status == 201:
        assert response.json()["email"] == f"new-{role}@acme.test"
        assert AdminAction.objects.filter(action="member.create", via="api").count() == 1
    else:
        assert_error(response, status)


def test_team_admin_cannot_create_a_member_in_another_team(client_as: Any) -> None:
    body = {"email": "x@globex.test", "team": "globex"}
    error = assert_error(client_as("team_admin").post("/api/v1/members/", body, format="json"), 400)
    assert error["param"] == "team"


@pytest.mark.parametrize("role", ROLES)
def test_update_member_role_and_deactivate(world: Any, client_as: Any, role: str) -> None:
    path = f"/api/v1/members/{world.member.pk}/"
    response = client_as(role).patch(path, {"role": "admin", "active": False}, format="json")
    status = expect(200, 200, 403, 404)[role]
    if status == 200:
        assert response.json()["role"] == "admin" and response.json()["active"] is False
        actions = set(AdminAction.objects.values_list("action", flat=True))
        assert {"member.update", "member.deactivate"} <= actions
    else:
        assert_error(response, status)


@pytest.mark.parametrize("role", ROLES)
def test_create_application(client_as: Any, role: str) -> None:
    body = {"team": "acme", "slug": f"app-{role}", "routes": ["fast"], "max_n": 2}
    response = client_as(role).post("/api/v1/applications/", body, format="json")
    status = expect(201, 201, 403, 403)[role]
    if status == 201:
        assert response.json()["routes"] == ["fast"] and response.json()["max_n"] == 2
    else:
        assert_error(response, status)


@pytest.mark.parametrize("role", ROLES)
def test_update_application_routes(client_as: Any, role: str) -> None:
    response = client_as(role).patch(
        "/api/v1/applications/acme-app/", {"routes": [], "fallback": "none"}, format="json"
    )
    status = expect(200, 200, 403, 404)[role]
    if status == 200:
        assert response.json()["routes"] == [] and response.json()["fallback"] == "none"
    else:
        assert_error(response, status)


@pytest.mark.parametrize(
    ("windows", "status", "stored"),
    [("22:00-06:00,01:00-02:00", 200, "22:00-06:00, 01:00-02:00"), ("25:00-26:00", 400, "")],
)
def test_update_application_batch_windows(
    client_as: Any, windows: str, status: int, stored: str
) -> None:
    response = client_as("admin").patch(
        "/api/v1/applications/acme-app/", {"batch_windows": windows}, format="json"
    )
    if status == 200:
        assert response.status_code == 200
        assert response.json()["batch_windows"] == stored
    else:
        assert_error(response, status)


@pytest.mark.parametrize("role", ROLES)
def test_issue_key(world: Any, client_as: Any, role: str) -> None:
    body = {"application": "acme-app", "member": "dev@acme.test", "name": "ci"}
    response = client_as(role).post("/api/v1/keys/", body, format="json")
    # Another team's member cannot see dev@acme.test: 400 naming the member field.
    status = expect(201, 201, 201, 400)[role]
    if status == 201:
        data = response.json()
        assert data["key"].startswith(data["prefix"] + "-") and data["state"] == "active"
        key = ApiKey.objects.get(prefix=data["prefix"])
        assert data["key"] not in key.secret_hash
        # Shown once: reading it back never gives the key again.
        again = client_as(role).get(f"/api/v1/keys/{data['prefix']}/").json()
        assert "key" not in again
    else:
        error = assert_error(response, status)
        assert status != 400 or error["param"] == "member"


def test_member_cannot_issue_a_key_for_another_member(world: Any, client_as: Any) -> None:
    body = {"application": "acme-app", "member": "boss@acme.test"}
    error = assert_error(client_as("member").post("/api/v1/keys/", body, format="json"), 400)
    assert error["param"] == "member"  # out of the member's scope: not even found


def test_member_issues_their_own_key_by_default(world: Any, client_as: Any) -> None:
    response = client_as("member").post("/api/v1/keys/", {"application": "acme-app"}, "json")
    assert response.status_code == 201 and response.json()["member"] == "dev@acme.test"


@pytest.mark.parametrize("role", ROLES)
def test_revoke_key(world: Any, client_as: Any, role: str) -> None:
    response = client_as(role).post(f"/api/v1/keys/{world.member_key_prefix}/revoke/")
    status = expect(200, 200, 200, 404)[role]
    if status == 200:
        assert response.json()["state"] == "revoked"
        action = AdminAction.objects.get(action="key.revoke")
        assert action.via == "api" and action.object_repr == world.member_key_prefix
    else:
        assert_error(response, status)
        assert ApiKey.objects.get(prefix=world.member_key_prefix).revoked_at is None


@pytest.mark.parametrize("role", ROLES)
def test_rotate_key(world: Any, client_as: Any, role: str) -> None:
    path = f"/api/v1/keys/{world.member_key_prefix}/rotate/"
    response = client_as(role).post(path, {"grace_minutes": 30}, format="json")
    status = expect(201, 201, 201, 404)[role]
    if status == 201:
        new = response.json()
        assert new["prefix"] != world.member_key_prefix and new["key"].startswith(new["prefix"])
        old = ApiKey.objects.get(prefix=world.member_key_prefix)
        assert old.revoked_at is None and old.expires_at is not None  # the grace period
    else:
        assert_error(response, status)


def test_key_filters(world: Any, client_as: Any) -> None:
    admin = client_as("admin")
    admin.post(f"/api/v1/keys/{world.member_key_prefix}/revoke/")

    def prefixes(query: str) -> set[str]:
        return {k["prefix"] for k in admin.get(f"/api/v1/keys/?{query}").json()["results"]}

    assert prefixes("state=revoked") == {world.member_key_prefix}
    assert prefixes("state=active") == {world.other_key_prefix}
    assert prefixes("member=dev@globex.test") == {world.other_key_prefix}
    assert prefixes("application=acme-app") == {world.member_key_prefix}
    assert_error(admin.get("/api/v1/keys/?state=bogus"), 400)


# --- bad input ------------------------------------------------------------------------------

BAD = [
    ("post", "/api/v1/teams/", {"slug": {"a": 1}}, 400),
    ("post", "/api/v1/teams/", {"slug": None}, 400),
    ("post", "/api/v1/teams/", {"slug": "x", "colour": "red"}, 400),
    ("post", "/api/v1/teams/", {"slug": "x" * 51}, 400),
    ("post", "/api/v1/teams/", {"slug": "x", "time_zone": "Mars/Olympus"}, 400),
    ("post", "/api/v1/teams/", {"slug": "acme"}, 400),
    ("post", "/api/v1/teams/", ["not", "an", "object"], 400),
    ("patch", "/api/v1/teams/nope/", {"name": "x"}, 404),
    ("post", "/api/v1/members/", {"email": "not-an-email", "team": "acme"}, 400),
    ("post", "/api/v1/members/", {"email": "a@b.test", "team": "nope"}, 400),
    ("post", "/api/v1/members/", {"email": "a@b.test", "team": "acme", "role": "king"}, 400),
    ("patch", "/api/v1/members/999999/", {"role": "admin"}, 404),
    ("patch", "/api/v1/members/not-a-number/", {"role": "admin"}, 404),
    ("post", "/api/v1/applications/", {"team": "acme", "slug": "z", "routes": ["nope"]}, 400),
    ("post", "/api/v1/applications/", {"team": "acme", "slug": "z", "max_n": "many"}, 400),
    ("post", "/api/v1/applications/", {"team": "acme", "slug": "z", "max_n": 0}, 400),
    ("post", "/api/v1/applications/", {"team": "acme", "slug": "z", "name": "n" * 201}, 400),
    ("patch", "/api/v1/applications/nope/", {"name": "x"}, 404),
    ("post", "/api/v1/keys/", {"application": "nope"}, 400),
    ("post", "/api/v1/keys/", {"application": "acme-app", "expires_days": -1}, 400),
    ("post", "/api/v1/keys/", {"application": "acme-app", "expires_days": "soon"}, 400),
    ("post", "/api/v1/keys/sk-sluice-000000000000/revoke/", None, 404),
    ("post", "/api/v1/keys/sk-sluice-000000000000/rotate/", {}, 404),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), BAD)
def test_bad_input_is_answered_in_the_error_shape(
    client_as: Any, method: str, path: str, body: Any, status: int
) -> None:
    response = getattr(client_as("admin"), method)(path, body, format="json")
    assert_error(response, status)


def test_malformed_json_and_wrong_content_type(client_as: Any) -> None:
    admin = client_as("admin")
    assert_error(admin.post("/api/v1/teams/", "{oops", content_type="application/json"), 400)
    assert_error(admin.post("/api/v1/teams/", "slug=x", content_type="text/plain"), 415)


def test_unknown_field_names_the_field(client_as: Any) -> None:
    error = assert_error(
        client_as("admin").post("/api/v1/teams/", {"slug": "x", "colour": 1}, format="json"), 400
    )
    assert error["param"] == "colour" and "colour" in error["fields"]


def test_rotate_with_a_revoked_key_is_a_clear_400(world: Any, client_as: Any) -> None:
    admin = client_as("admin")
    admin.post(f"/api/v1/keys/{world.member_key_prefix}/revoke/")
    path = f"/api/v1/keys/{world.member_key_prefix}/rotate/"
    error = assert_error(admin.post(path, {}, format="json"), 400)
    assert "revoked" in error["message"]


def test_a_command_issued_admin_token_acts_and_is_named_in_the_log(world: Any) -> None:
    from rest_framework.test import APIClient

    from accounts.services import SYSTEM, management_token_issue

    token, plaintext = management_token_issue(actor=SYSTEM, name="bot")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    assert client.post("/api/v1/teams/", {"slug": "bots"}, format="json").status_code == 201
    action = AdminAction.objects.get(action="team.create")
    assert action.actor_id is None and action.actor_label == f"token {token.prefix}"
    _, team_plaintext = management_token_issue(actor=SYSTEM, team_slug="acme")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {team_plaintext}")
    assert client.get("/api/v1/teams/").json()["count"] == 1
    assert_error(client.post("/api/v1/teams/", {"slug": "more"}, format="json"), 403)
    assert_error(client.get("/api/v1/teams/globex/"), 404)
    assert client.patch("/api/v1/teams/acme/", {"name": "A"}, format="json").status_code == 200


def test_options_and_unknown_paths_answer_in_the_error_shape(client_as: Any) -> None:
    admin = client_as("admin")
    refused = admin.options("/api/v1/keys/")
    assert_error(refused, 405)
    assert "OPTIONS" not in refused["Allow"] and "POST" in refused["Allow"]
    assert_error(admin.options("/api/v1/config/"), 405)
    assert_error(admin.get("/api/v1/nothing-here/"), 404)
    assert_error(admin.get("/api/v1/admin-actions/1.5e-11/"), 404)
    assert_error(client_as("anonymous").get("/api/v1/nope"), 404)


@pytest.mark.parametrize("role", ROLES)
def test_admin_action_detail_per_role(world: Any, client_as: Any, role: str) -> None:
    client_as("admin").patch("/api/v1/teams/acme/", {"name": "Acme 2"}, format="json")
    client_as("admin").patch("/api/v1/teams/globex/", {"name": "Globex 2"}, format="json")
    acme = AdminAction.objects.get(action="team.update", object_repr="acme")
    globex = AdminAction.objects.get(action="team.update", object_repr="globex")
    statuses = expect(200, 200, 403, 403)[role], expect(200, 404, 403, 403)[role]
    for action, status in zip((acme, globex), statuses, strict=True):
        response = client_as(role).get(f"/api/v1/admin-actions/{action.pk}/")
        if status == 200:
            assert response.json()["after"]["name"].endswith(" 2")
        else:
            assert_error(response, status)
