"""The console session (with CSRF) as API authentication, and the API's own throttle."""

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.middleware.csrf import _get_new_csrf_string
from rest_framework.test import APIClient

from api.throttles import CallerThrottle
from tests.api.conftest import assert_error

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
    from django.core.cache import cache

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
