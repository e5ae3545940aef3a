"""One rule, every entry point: the console, the management API, config import and the
services accept and refuse the same values (slugs, names, time zones, an application's
settings, limit values), list the same keys for a state, and find a limit's member by
email whatever its case. A test here fails when one entry point drifts from the others."""

import contextlib
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import MAX_CACHE_TTL_SECONDS, ApiKey, Application, Member, Team
from accounts.selectors import KEY_STATES, keys_in_state
from accounts.services import (
    SYSTEM,
    AccountError,
    application_create,
    key_issue,
    key_revoke,
    management_token_issue,
    member_ensure,
    team_create,
)
from quotas.models import Limit
from quotas.services import LimitError, limit_set
from routing.catalog.config_file import ConfigError, apply_config, validate_config
from tests.console.people import People, make_people

pytestmark = pytest.mark.django_db
SURFACES = ("console", "api", "config", "service")


@pytest.fixture
def people() -> People:
    return make_people(tag="r")


def _console(people: People, role: str = "staff") -> Client:
    client = Client()
    client.force_login(people.users[role])
    return client


def _api(people: People, role: str = "staff") -> APIClient:
    _, plaintext = management_token_issue(actor=SYSTEM, user_email=people.email(role))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def _config(raw: dict[str, Any]) -> bool:
    try:
        apply_config(validate_config(raw))
    except ConfigError:
        return False
    return True


# --- teams ----------------------------------------------------------------------------

TEAM_CASES = [  # (what differs from a good team, accepted)
    ({"slug": "bad slug!"}, False),
    ({"slug": "s" * 51}, False),
    ({"slug": "s" * 50}, True),
    ({"time_zone": "Mars/Olympus_Mons"}, False),
    ({"time_zone": "Europe/Berlin"}, True),
    ({"name": "n" * 201}, False),
    ({"name": "n" * 200}, True),
]


def _team_lands(people: People, surface: str, values: dict[str, Any]) -> bool:
    if surface == "console":
        _console(people).post("/teams/new/", values)
    elif surface == "api":
        _api(people).post("/api/v1/teams/", values, format="json")
    elif surface == "config":
        _config({"teams": [values]})
    else:
        with contextlib.suppress(AccountError):
            team_create(actor=SYSTEM, **values)
    return Team.objects.filter(slug=values["slug"]).exists()


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(("change", "accepted"), TEAM_CASES)
def test_every_entry_point_takes_the_same_teams(people, surface, change, accepted):
    values = {"slug": f"t-{surface}", "name": "A team", "time_zone": "UTC"} | change
    assert _team_lands(people, surface, values) is accepted


# --- applications -----------------------------------------------------------------------

APPLICATION_CASES = [  # (field, value, accepted)
    ("slug", "bad slug!", False),
    ("slug", "a" * 51, False),
    ("default_max_tokens", 0, False),
    ("default_max_tokens", 10_000_000, True),
    ("default_max_tokens", 10_000_001, False),
    ("max_tokens_ceiling", 10_000_001, False),
    ("max_n", 10_000, True),
    ("max_n", 10_001, False),
    ("cache_ttl_seconds", MAX_CACHE_TTL_SECONDS, True),
    ("cache_ttl_seconds", MAX_CACHE_TTL_SECONDS + 1, False),
    ("default_priority", "urgent", False),
    ("fallback", "sideways", False),
    ("batch_windows", "25:00-26:00", False),
    ("batch_windows", "00:00-06:00", True),
    ("name", "n" * 201, False),
]


def _application_lands(people: People, surface: str, values: dict[str, Any]) -> bool:
    slug, team = values["slug"], people.home
    if surface == "console":
        form = {
            "team": team.pk,
            "name": "An app",
            "default_priority": "interactive",
            "fallback": "any",
            "default_max_tokens": 1024,
            "clamp_max_tokens": "on",
        } | values
        _console(people).post("/applications/new/", form)
    elif surface == "api":
        _api(people).post("/api/v1/applications/", {"team": team.slug} | values, format="json")
    elif surface == "config":
        _config({"applications": [{"team": team.slug} | values]})
    else:
        rest = {k: v for k, v in values.items() if k != "slug"}
        with contextlib.suppress(AccountError):
            application_create(actor=SYSTEM, team=team, slug=slug, **rest)
    return Application.objects.filter(slug=slug).exists()


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(("field", "value", "accepted"), APPLICATION_CASES)
def test_every_entry_point_takes_the_same_application_settings(
    people, surface, field, value, accepted
):
    values = {"slug": f"app-{surface}", field: value}
    assert _application_lands(people, surface, values) is accepted


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("slug", "bad slug!", "must be 1-50 letters, digits, '-' or '_'"),
        ("max_n", 10_001, "must be between 1 and 10000"),
        ("cache_ttl_seconds", -1, f"must be between 0 and {MAX_CACHE_TTL_SECONDS}"),
        ("default_priority", "urgent", "must be one of interactive, batch"),
    ],
)
def test_config_import_and_the_services_state_the_same_rule(people, field, value, rule):
    values = {"slug": "same-rule", field: value}
    with pytest.raises(ConfigError, match=f"'{field}' {rule}"):
        validate_config({"applications": [{"team": people.home.slug} | values]})
    rest = {k: v for k, v in values.items() if k != "slug"}
    label = "the slug" if field == "slug" else field.replace("_", " ")
    with pytest.raises(AccountError, match=f"^{label} {rule}$"):
        application_create(actor=SYSTEM, team=people.home, slug=values["slug"], **rest)


def test_batch_windows_that_are_not_text_are_a_clear_error_in_the_service(people):
    with pytest.raises(AccountError, match="batch windows must hold strings"):
        application_create(actor=SYSTEM, team=people.home, slug="w", batch_windows=[1])


# --- limits -------------------------------------------------------------------------------

LIMIT_CASES = [  # (field, value, accepted)
    ("requests_per_minute", 2**31 - 1, True),  # a 32-bit column, also on PostgreSQL
    ("requests_per_minute", 2**31, False),
    ("max_concurrency", 2**31, False),
    ("tokens_per_day", 10**15, True),
    ("tokens_per_day", 10**15 + 1, False),
    ("cost_per_month", "9999999999.9999", True),  # the most the column holds
    ("cost_per_month", "10000000000", False),
    ("cost_per_month", "1.23456", False),
]


def _limit_lands(people: People, surface: str, field: str, value: Any) -> bool:
    app = people.home_app
    if surface == "console":
        data = {"scope": "application", "name": app.slug, field: value}
        _console(people).post("/limits/edit/", data)
    elif surface == "api":
        path = f"/api/v1/limits/application/{app.slug}/"
        _api(people).put(path, {field: value}, format="json")
    elif surface == "config":
        number = float(value) if field == "cost_per_month" else value
        entry = {"scope": "application", "name": app.slug, field: number}
        _config({"limits": [entry]})
    else:
        with contextlib.suppress(LimitError):
            limit_set(scope="application", name=app.slug, actor=SYSTEM, **{field: value})
    limit = Limit.objects.filter(application=app).first()
    return limit is not None and Decimal(str(getattr(limit, field))) == Decimal(str(value))


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(("field", "value", "accepted"), LIMIT_CASES)
def test_every_entry_point_takes_the_same_limit_values(people, surface, field, value, accepted):
    assert _limit_lands(people, surface, field, value) is accepted


# --- key states ---------------------------------------------------------------------------


def _keys_in_every_state(people: People) -> None:
    email = people.email("member")
    slug = people.home_app.slug
    _later, _ = key_issue(member_email=email, application_slug=slug, expires_days=3)
    revoked, _ = key_issue(member_email=email, application_slug=slug)
    key_revoke(prefix=revoked.prefix)
    expired, _ = key_issue(member_email=email, application_slug=slug)
    both, _ = key_issue(member_email=email, application_slug=slug)
    key_revoke(prefix=both.prefix)
    past = timezone.now() - timedelta(minutes=1)
    ApiKey.objects.filter(pk__in=[expired.pk, both.pk]).update(expires_at=past)


@pytest.mark.parametrize("state", KEY_STATES)
def test_the_console_and_the_api_list_the_same_keys_for_a_state(people, state):
    _keys_in_every_state(people)
    expected = set(keys_in_state(ApiKey.objects.all(), state).values_list("prefix", flat=True))
    assert expected  # every state has a key
    page = _console(people).get("/keys/", {"state": state}).content.decode()
    in_console = {p for p in ApiKey.objects.values_list("prefix", flat=True) if p in page}
    body = _api(people).get("/api/v1/keys/", {"state": state}).json()
    in_api = {k["prefix"] for k in body["results"]}
    assert in_console == in_api == expected


def test_key_states_split_keys_as_documented(people):
    _keys_in_every_state(people)
    keys = ApiKey.objects.all()
    states = {s: set(keys_in_state(keys, s).values_list("pk", flat=True)) for s in KEY_STATES}
    assert not states["active"] & states["revoked"]
    assert not states["active"] & states["expired"]
    assert not states["revoked"] & states["expired"]  # revoked wins over expired
    assert set().union(*states.values()) == set(keys.values_list("pk", flat=True))


# --- a limit's member, by email ---------------------------------------------------------


@pytest.fixture
def ann(people: People) -> Member:
    return member_ensure(email="ann@x.test", team=people.home)


@pytest.mark.parametrize("role", ["staff", "team_admin"])
def test_the_console_finds_a_limits_member_whatever_the_case_of_the_email(people, ann, role):
    client = _console(people, role)
    target = {"scope": "member", "name": "ANN@x.test"}
    assert client.get("/limits/edit/", target).status_code == 200
    response = client.post("/limits/edit/", target | {"requests_per_minute": "7"})
    assert response.status_code == 302
    assert Limit.objects.get(member=ann).requests_per_minute == 7
    assert client.post("/limits/clear/", target).status_code == 302
    assert not Limit.objects.filter(member=ann).exists()


@pytest.mark.parametrize("role", ["staff", "team_admin"])
def test_the_api_finds_a_limits_member_whatever_the_case_of_the_email(people, ann, role):
    client = _api(people, role)
    path = "/api/v1/limits/member/ANN@x.test/"
    assert client.put(path, {"requests_per_minute": 7}, format="json").status_code == 200
    assert Limit.objects.get(member=ann).requests_per_minute == 7
    assert client.get(path).json()["name"] == "ann@x.test"
    assert client.delete(path).status_code == 204


def test_config_import_and_the_service_find_a_limits_member_whatever_the_case(people, ann):
    apply_config(validate_config({"limits": [{"scope": "member", "name": "Ann@X.test"}]}))
    limit_set(scope="member", name="ANN@X.TEST", requests_per_minute=5)
    assert Limit.objects.get(member=ann).requests_per_minute == 5


def test_a_member_out_of_scope_stays_out_of_scope_whatever_the_case(people, ann):
    rival = people.users["other_team_admin"]
    path = f"/api/v1/limits/member/{rival.email.upper()}/"
    assert _api(people, "team_admin").put(path, {"requests_per_minute": 1}).status_code == 404
    target = {"scope": "member", "name": "ANN@X.TEST"}
    assert _console(people, "other_team_admin").get("/limits/edit/", target).status_code == 404
