"""The console session (with CSRF) as API authentication, and the API's own throttle."""

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.middleware.csrf import _get_new_csrf_string
from rest_framework.test import APIClient

from api.throttles import CallerThrottle
from tests.support.api import assert_error

pytestmark = pytest.mark.django_db


def test_console_session_reads_and_needs_csrf_to_write(world: Any) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world.team_admin.user)
    teams = client.get("/api/v1/teams/")
    assert teams.status_code == 200 and [t["slug"] for t in teams.json()["results"]] == ["acme"]
    error = assert_error(client.patch("/api/v1/teams/acme/", {"name": "X"}, format="json"), 403)
    assert "CSRF" in error["message"]
    # What the console's pages do: the csrftoken cookie, echoed in X-CSRFToken.
    client.cookies["csrftoken"] = token_value = _get_new_csrf_string()
    response = client.patch(
        "/api/v1/teams/acme/", {"name": "X"}, format="json", HTTP_X_CSRFTOKEN=token_value
    )
    assert response.status_code == 200 and response.json()["name"] == "X"


def test_a_logged_in_user_without_a_role_is_refused(db: None) -> None:
    user = get_user_model().objects.create_user("nobody", email="nobody@example.com")
    client = APIClient()
    client.force_login(user)
    assert_error(client.get("/api/v1/teams/"), 403)


def test_throttle_answers_429_with_retry_after(
    client_as: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.core.cache import caches

    cache = caches["api"]
    cache.clear()
    monkeypatch.setattr(CallerThrottle, "THROTTLE_RATES", {"caller": "3/min"})
    member = client_as("member")
    for _ in range(3):
        assert member.get("/api/v1/keys/").status_code == 200
    response = member.get("/api/v1/keys/")
    error = assert_error(response, 429)
    assert error["type"] == "rate_limit_error" and 1 <= int(response["Retry-After"]) <= 60
    # Counted per caller: another token is not slowed by this one.
    assert client_as("admin").get("/api/v1/keys/").status_code == 200
    cache.clear()


def test_throttle_counts_in_the_api_cache(world: Any, client_as: Any) -> None:
    from django.conf import settings
    from django.core.cache import caches

    client_as("member").get("/api/v1/keys/")
    prefix = world.tokens["member"].split()[1][: len("sk-sluice-admin-") + 12]
    assert caches["api"].get(f"api-throttle:token:{prefix}")  # the request's timestamp
    backend = settings.CACHES["api"]["BACKEND"]
    assert ("Redis" in backend) == bool(settings.REDIS_URL)


# --- management tokens through the API ------------------------------------------------------


def test_a_console_user_makes_a_token_that_acts_with_their_role(world: Any) -> None:
    session = APIClient()
    session.force_login(world.member.user)
    made = session.post("/api/v1/tokens/", {"name": "laptop", "expires_days": 30}, format="json")
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["token"].startswith(body["prefix"] + "-") and body["user"] == "dev@acme.test"
    assert "token" not in session.get(f"/api/v1/tokens/{body['prefix']}/").json()
    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    keys = bearer.get("/api/v1/keys/").json()["results"]
    assert [k["prefix"] for k in keys] == [world.member_key_prefix]  # a member's view
    assert_error(bearer.post("/api/v1/teams/", {"slug": "x"}, format="json"), 403)
    # Tokens do not make tokens.
    assert_error(bearer.post("/api/v1/tokens/", {}, format="json"), 403)
    revoked = session.post(f"/api/v1/tokens/{body['prefix']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert_error(bearer.get("/api/v1/keys/"), 401)


def test_tokens_are_seen_and_revoked_by_their_owner_or_an_admin(world: Any, client_as: Any) -> None:
    member_tokens = client_as("member").get("/api/v1/tokens/").json()["results"]
    assert [t["user"] for t in member_tokens] == ["dev@acme.test"]
    prefix = member_tokens[0]["prefix"]
    assert_error(client_as("other").post(f"/api/v1/tokens/{prefix}/revoke/"), 404)
    assert_error(client_as("team_admin").post(f"/api/v1/tokens/{prefix}/revoke/"), 404)
    assert len(client_as("admin").get("/api/v1/tokens/").json()["results"]) == 4
    assert client_as("admin").post(f"/api/v1/tokens/{prefix}/revoke/").status_code == 200
    assert_error(client_as("member").get("/api/v1/tokens/"), 401)
    assert_error(client_as("anonymous").get("/api/v1/tokens/"), 401)
    assert_error(client_as("gateway_key").get("/api/v1/tokens/"), 401)


def test_token_create_bad_input(world: Any) -> None:
    session = APIClient()
    session.force_login(world.team_admin.user)
    for body in ({"team": "globex"}, {"expires_days": 0}, {"name": "n" * 201}, {"x": 1}):
        assert_error(session.post("/api/v1/tokens/", body, format="json"), 400)
    made = session.post("/api/v1/tokens/", {"team": "acme"}, format="json")
    assert made.status_code == 201 and made.json()["team"] == "acme"
