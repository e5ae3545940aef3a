"""An application's `cache_ttl_seconds` set where admins set it: the console's application
form (team admin of its team, not a member or another team's admin) and the management API."""

from pathlib import Path

import pytest
from django.test import Client

from accounts.models import Application
from routing.catalog.config_file import apply_config, load_config
from tests.console.people import People, make_people
from tests.support.api import assert_error

pytestmark = pytest.mark.django_db
DEMO = Path(__file__).resolve().parents[2] / "config" / "demo.toml"


@pytest.fixture
def people() -> People:
    apply_config(load_config(DEMO))
    return make_people(tag="c")


def _form(people: People, ttl: str) -> dict:
    app = people.home_app
    return {
        "name": app.name,
        "routes": list(app.routes.values_list("pk", flat=True)),
        "default_priority": app.default_priority,
        "fallback": app.fallback,
        "default_max_tokens": app.default_max_tokens,
        "clamp_max_tokens": "on",
        "cache_ttl_seconds": ttl,
    }


@pytest.mark.parametrize(
    ("role", "status"),
    [("team_admin", 302), ("staff", 302), ("member", 403), ("other_team_admin", 404)],
)
def test_the_console_form_sets_the_cache_for_those_who_manage_the_application(people, role, status):
    client = Client()
    client.force_login(people.users[role])
    url = f"/applications/{people.home_app.slug}/"
    response = client.post(url, _form(people, "120"))
    assert response.status_code == status
    expected = 120 if status == 302 else 0
    assert Application.objects.get(pk=people.home_app.pk).cache_ttl_seconds == expected


def test_the_console_form_shows_the_setting_and_refuses_a_bad_value(people):
    client = Client()
    client.force_login(people.users["team_admin"])
    url = f"/applications/{people.home_app.slug}/"
    assert b'name="cache_ttl_seconds"' in client.get(url).content
    response = client.post(url, _form(people, str(8 * 24 * 3600)))
    assert response.status_code == 200 and b"cache_ttl_seconds" in response.content
    assert Application.objects.get(pk=people.home_app.pk).cache_ttl_seconds == 0
    client.post(url, _form(people, ""))  # blank is off
    assert Application.objects.get(pk=people.home_app.pk).cache_ttl_seconds == 0


@pytest.mark.parametrize(("role", "status"), [("admin", 200), ("member", 403)])
def test_the_management_api_reads_and_sets_the_cache(client_as, role, status):
    client = client_as(role)
    response = client.patch(
        "/api/v1/applications/acme-app/", {"cache_ttl_seconds": 600}, format="json"
    )
    if status != 200:
        assert_error(response, status)
        return
    assert response.status_code == 200 and response.json()["cache_ttl_seconds"] == 600
    assert Application.objects.get(slug="acme-app").cache_ttl_seconds == 600
    bad = client.patch("/api/v1/applications/acme-app/", {"cache_ttl_seconds": -1}, format="json")
    assert bad.status_code == 400
