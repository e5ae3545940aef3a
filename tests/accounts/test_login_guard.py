"""Password guessing (accounts/login_guard.py): the console's and the admin's login forms
are throttled per client address and per account; every failed login is a log line that
never holds the password; Django's password validators run wherever a password is set."""

import logging
import time

import django_ratelimit.core
import pytest
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.test import Client

from accounts.models import Member, Team

PASSWORD = "a-long-enough-Pass-7"
LOGINS = ["/login/", "/admin/login/"]


class _StillClock:
    """django-ratelimit counts in fixed windows whose edge falls anywhere in the minute
    (offset by a hash of the key); twenty logins take seconds, so a real clock could roll a
    window mid-test and start the count again. The clock stands still instead."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def time(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def fresh_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    caches["ratelimit"].clear()
    monkeypatch.setattr(django_ratelimit.core, "time", _StillClock())


@pytest.fixture
def user(db: None) -> object:
    team = Team.objects.create(slug="t", name="t")
    user = get_user_model().objects.create_user(
        "ann@t.test", email="ann@t.test", password=PASSWORD, is_staff=True
    )
    Member.objects.create(user=user, team=team)
    return user


def _login(client: Client, path: str, username: str, password: str) -> object:
    return client.post(path, {"username": username, "password": password})


@pytest.mark.parametrize("path", LOGINS)
def test_an_account_is_throttled_after_five_tries_a_minute(
    user: object, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client()
    with caplog.at_level(logging.WARNING, logger="sluice.auth"):
        for _ in range(5):
            assert _login(client, path, "ann@t.test", "wrong-guess-123").status_code == 200
        refused = _login(client, path, "ANN@t.test ", PASSWORD)  # the right one, too late
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 61
    assert b"Too many login attempts" in refused.content
    assert "_auth_user_id" not in client.session
    failed = [r.getMessage() for r in caplog.records if "login failed" in r.getMessage()]
    assert len(failed) == 5 and all("'ann@t.test'" in m for m in failed)
    assert any("login throttled" in r.getMessage() for r in caplog.records)
    assert not any("wrong-guess-123" in r.getMessage() for r in caplog.records)
    assert not any(PASSWORD in r.getMessage() for r in caplog.records)


def test_an_address_is_throttled_after_twenty_tries_a_minute_whatever_the_account(
    user: object,
) -> None:
    client = Client()
    for i in range(20):
        assert _login(client, "/login/", f"guess{i}@t.test", "x-wrong-1").status_code == 200
    assert _login(client, "/login/", "ann@t.test", PASSWORD).status_code == 429
    # Another address still logs in.
    other = Client(REMOTE_ADDR="10.0.0.9")
    assert _login(other, "/login/", "ann@t.test", PASSWORD).status_code == 302


def test_a_right_password_under_the_limits_logs_in(user: object) -> None:
    client = Client()
    _login(client, "/login/", "ann@t.test", "wrong-1-wrong")
    assert _login(client, "/login/", "ann@t.test", PASSWORD).status_code == 302


@pytest.mark.parametrize(
    ("password", "says"),
    [
        ("short7", "too short"),
        ("password123", "too common"),
        ("8473629105", "entirely numeric"),
        ("newbie-t-test", "too similar"),
    ],
)
def test_the_api_refuses_a_weak_password_for_a_new_member(
    user: object, password: str, says: str
) -> None:
    from rest_framework.test import APIClient

    from accounts.services import SYSTEM, management_token_issue

    _, token = management_token_issue(actor=SYSTEM, user_id=user.pk)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = {"email": "newbie@t.test", "team": "t", "password": password}
    response = client.post("/api/v1/members/", body, format="json")
    assert response.status_code == 400, response.content
    assert says in response.json()["error"]["message"]
    assert not get_user_model().objects.filter(email="newbie@t.test").exists()
    body["password"] = "a-good-Long-pass-9"
    assert client.post("/api/v1/members/", body, format="json").status_code == 201


def test_the_console_refuses_a_weak_password_for_a_new_member(user: object) -> None:
    client = Client()
    client.force_login(user)
    team = Team.objects.get(slug="t")
    body = {"email": "newbie@t.test", "team": team.pk, "role": "member", "password": "password1"}
    response = client.post("/members/new/", body)
    assert response.status_code == 200 and b"too common" in response.content
    assert not get_user_model().objects.filter(email="newbie@t.test").exists()
