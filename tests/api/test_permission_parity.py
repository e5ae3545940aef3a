"""Every write x every role, made through the console, the management API with a token and
the management API with the console's session: the three must agree on whether the change
lands, and all must agree with the rules (accounts/policy.py).

The world is the console matrix's (tests/console/test_permissions.py): team home with alice
(member), bob (member), tina (its admin), eve (staff who is a member of home), dora
(deactivated); team rival with carl (member) and olga (its admin); sam (staff). Each
attempt runs in a savepoint that is rolled back, so every surface starts from the same rows.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from rest_framework.test import APIClient

from accounts.services import SYSTEM, management_token_issue
from tests.console.people import People
from tests.console.test_permissions import (
    _dora,
    _eve,
    _landed_alice_admin,
    _landed_alice_inactive,
    _landed_app_in_rival,
    _landed_app_renamed,
    _landed_app_windows,
    _landed_deployment,
    _landed_dora_active,
    _landed_key_revoked,
    _landed_limit,
    _landed_member_in_rival,
    _landed_rival_renamed,
    _landed_rotated,
    _landed_team,
    _landed_team_limit_cleared,
    names,
)
from tests.console.test_permissions import people as people

ROLES = ("anonymous", "member", "other_member", "team_admin", "other_team_admin", "staff")
SURFACES = ("console", "api_token", "api_session")


@dataclass(frozen=True)
class Write:
    name: str
    console: tuple[str, dict[str, Any]]  # POST path, form data
    api: tuple[str, str, dict[str, Any] | str | None]  # method, path, JSON (or TOML) body
    lands_for: frozenset[str]
    landed: Callable[[People], bool]


def _roles(*roles: str) -> frozenset[str]:
    return frozenset(roles)


def _landed_team_limit_lifted(people: People) -> bool:
    from quotas.models import Limit

    limit = Limit.objects.filter(team=people.home).first()
    return limit is not None and limit.requests_per_minute == 999_999


def _landed_eve_inactive(people: People) -> bool:
    return not _eve(people).user.is_active


def _landed_eve_admin(people: People) -> bool:
    return _eve(people).role == "admin"


def _landed_eve_limit(people: People) -> bool:
    from quotas.models import Limit

    limit = Limit.objects.filter(member=_eve(people)).first()
    return limit is not None and limit.requests_per_minute == 5


def _landed_tina_inactive(people: People) -> bool:
    user = people.users["team_admin"]
    user.refresh_from_db()
    return not user.is_active


def _landed_config(people: People) -> bool:
    from accounts.models import Team

    return Team.objects.filter(slug="from-config").exists()


def _landed_home_app_limit(people: People) -> bool:
    from quotas.models import Limit

    limit = Limit.objects.filter(application=people.home_app).first()
    return limit is not None and limit.requests_per_minute == 11


def _landed_alice_key_limit(people: People) -> bool:
    from quotas.models import Limit

    limit = Limit.objects.filter(api_key=people.keys["member"]).first()
    return limit is not None and limit.requests_per_minute == 13


def _landed_co_admin(people: People) -> bool:
    from accounts.models import Member

    return Member.objects.filter(
        user__email="co-admin@example.com", team=people.home, role="admin"
    ).exists()


def _landed_key_for_bob(people: People) -> bool:
    return people.users["member_peer"].member.api_keys.filter(name="for bob").exists()


TOML = "[[teams]]\nslug = 'from-config'\nname = 'From a file'\n"
APP = {
    "name": "Made",
    "default_priority": "interactive",
    "fallback": "any",
    "default_max_tokens": 1024,
}
WRITES = [
    Write(
        "lift team home's own limit",
        ("/limits/edit/", {"scope": "team", "name": "{home}", "requests_per_minute": 999999}),
        ("put", "/api/v1/limits/team/{home}/", {"requests_per_minute": 999999}),
        _roles("staff"),
        _landed_team_limit_lifted,
    ),
    Write(
        "clear team home's own limit",
        ("/limits/clear/", {"scope": "team", "name": "{home}"}),
        ("delete", "/api/v1/limits/team/{home}/", None),
        _roles("staff"),
        _landed_team_limit_cleared,
    ),
    Write(
        "set alice's limits",
        ("/limits/edit/", {"scope": "member", "name": "{alice}", "requests_per_minute": 9}),
        ("put", "/api/v1/limits/member/{alice}/", {"requests_per_minute": 9}),
        _roles("team_admin", "staff"),
        _landed_limit("member", 9),
    ),
    Write(
        "set carl's limits (team rival)",
        ("/limits/edit/", {"scope": "member", "name": "{carl}", "requests_per_minute": 7}),
        ("put", "/api/v1/limits/member/{carl}/", {"requests_per_minute": 7}),
        _roles("other_team_admin", "staff"),
        _landed_limit("other_member", 7),
    ),
    Write(
        "set eve's limits (staff, in team home)",
        ("/limits/edit/", {"scope": "member", "name": "{eve}", "requests_per_minute": 5}),
        ("put", "/api/v1/limits/member/{eve}/", {"requests_per_minute": 5}),
        _roles("staff"),
        _landed_eve_limit,
    ),
    Write(
        "deactivate eve (staff, in team home)",
        ("/members/{eve_id}/deactivate/", {}),
        ("patch", "/api/v1/members/{eve_id}/", {"active": False}),
        _roles("staff"),
        _landed_eve_inactive,
    ),
    Write(
        "make eve a team admin (staff, in team home)",
        ("/members/{eve_id}/", {"role": "admin"}),
        ("patch", "/api/v1/members/{eve_id}/", {"role": "admin"}),
        _roles("staff"),
        _landed_eve_admin,
    ),
    Write(
        "tina deactivates tina (team admin)",
        ("/members/{tina_id}/deactivate/", {}),
        ("patch", "/api/v1/members/{tina_id}/", {"active": False}),
        _roles("staff"),
        _landed_tina_inactive,
    ),
    Write(
        "make alice a team admin",
        ("/members/{alice_id}/", {"role": "admin"}),
        ("patch", "/api/v1/members/{alice_id}/", {"role": "admin"}),
        _roles("team_admin", "staff"),
        _landed_alice_admin,
    ),
    Write(
        "deactivate alice",
        ("/members/{alice_id}/deactivate/", {}),
        ("patch", "/api/v1/members/{alice_id}/", {"active": False}),
        _roles("team_admin", "staff"),
        _landed_alice_inactive,
    ),
    Write(
        "activate dora (home, deactivated)",
        ("/members/{dora_id}/activate/", {}),
        ("patch", "/api/v1/members/{dora_id}/", {"active": True}),
        _roles("team_admin", "staff"),
        _landed_dora_active,
    ),
    Write(
        "create a member in team rival",
        ("/members/new/", {"email": "newbie@example.com", "team": "{rival_id}", "role": "member"}),
        ("post", "/api/v1/members/", {"email": "newbie@example.com", "team": "{rival}"}),
        _roles("other_team_admin", "staff"),
        _landed_member_in_rival,
    ),
    Write(
        "rename team rival",
        ("/teams/{rival}/", {"name": "Renamed rival", "time_zone": "UTC"}),
        ("patch", "/api/v1/teams/{rival}/", {"name": "Renamed rival"}),
        _roles("other_team_admin", "staff"),
        _landed_rival_renamed,
    ),
    Write(
        "create a team",
        ("/teams/new/", {"slug": "made-by-test", "name": "Made", "time_zone": "UTC"}),
        ("post", "/api/v1/teams/", {"slug": "made-by-test", "name": "Made", "time_zone": "UTC"}),
        _roles("staff"),
        _landed_team,
    ),
    Write(
        "edit team rival's application",
        ("/applications/{rival_app}/", {**APP, "name": "Renamed by a test"}),
        ("patch", "/api/v1/applications/{rival_app}/", {"name": "Renamed by a test"}),
        _roles("other_team_admin", "staff"),
        _landed_app_renamed,
    ),
    Write(
        "create an application in team rival",
        ("/applications/new/", {**APP, "slug": "made-in-rival", "team": "{rival_id}"}),
        ("post", "/api/v1/applications/", {"slug": "made-in-rival", "team": "{rival}"}),
        _roles("other_team_admin", "staff"),
        _landed_app_in_rival,
    ),
    Write(
        "revoke bob's key (alice's team-mate)",
        ("/keys/{bob_key}/revoke/", {}),
        ("post", "/api/v1/keys/{bob_key}/revoke/", None),
        _roles("team_admin", "staff"),
        _landed_key_revoked("member_peer"),
    ),
    Write(
        "revoke alice's own key",
        ("/keys/{alice_key}/revoke/", {}),
        ("post", "/api/v1/keys/{alice_key}/revoke/", None),
        _roles("member", "team_admin", "staff"),
        _landed_key_revoked("member"),
    ),
    Write(
        "rotate bob's key",
        ("/keys/{bob_key}/rotate/", {"grace": "0"}),
        ("post", "/api/v1/keys/{bob_key}/rotate/", {"grace_minutes": 0}),
        _roles("team_admin", "staff"),
        _landed_rotated("member_peer"),
    ),
    Write(
        "create a key for bob",
        ("/keys/new/", {"application": "{home_app_id}", "member": "{bob_id}", "name": "for bob"}),
        (
            "post",
            "/api/v1/keys/",
            {"application": "{home_app}", "member": "{bob}", "name": "for bob"},
        ),
        _roles("team_admin", "staff"),
        _landed_key_for_bob,
    ),
    Write(
        "set team home's application's limits",
        (
            "/limits/edit/",
            {"scope": "application", "name": "{home_app}", "requests_per_minute": 11},
        ),
        ("put", "/api/v1/limits/application/{home_app}/", {"requests_per_minute": 11}),
        _roles("team_admin", "staff"),
        _landed_home_app_limit,
    ),
    Write(
        "set the limits of alice's key",
        ("/limits/edit/", {"scope": "key", "name": "{alice_key}", "requests_per_minute": 13}),
        ("put", "/api/v1/limits/key/{alice_key}/", {"requests_per_minute": 13}),
        _roles("team_admin", "staff"),
        _landed_alice_key_limit,
    ),
    Write(
        "add a second team admin to team home",
        (
            "/members/new/",
            {"email": "co-admin@example.com", "team": "{home_id}", "role": "admin"},
        ),
        (
            "post",
            "/api/v1/members/",
            {"email": "co-admin@example.com", "team": "{home}", "role": "admin"},
        ),
        _roles("team_admin", "staff"),
        _landed_co_admin,
    ),
    Write(
        "set the batch window of team home's application",
        (
            "/reports/weather/use/",
            {"application": "{home_app_id}", "start_hour": "1", "hours": "5", "zone": "UTC"},
        ),
        ("patch", "/api/v1/applications/{home_app}/", {"batch_windows": "01:00-06:00"}),
        _roles("team_admin", "staff"),
        _landed_app_windows("01:00-06:00"),
    ),
    Write(
        "apply a config file",
        ("/config/upload/", {"text": TOML, "apply": "1"}),
        ("post", "/api/v1/config/apply/", TOML),
        _roles("staff"),
        _landed_config,
    ),
    Write(
        "undrain a deployment",
        ("/deployments/{drained_dep}/undrain/", {}),
        ("post", "/api/v1/deployments/{drained_dep}/undrain/", None),
        _roles("staff"),
        _landed_deployment("drained_until", None, name="perm-drained"),
    ),
    Write(
        "drain a deployment",
        ("/deployments/{dep}/drain/", {"minutes": 5, "reason": "drill"}),
        ("post", "/api/v1/deployments/{dep}/drain/", {"minutes": 5, "reason": "drill"}),
        _roles("staff"),
        _landed_deployment("drained_until", ...),
    ),
    Write(
        "disable a deployment",
        ("/deployments/{dep}/disable/", {}),
        ("post", "/api/v1/deployments/{dep}/disable/", None),
        _roles("staff"),
        _landed_deployment("enabled", False),
    ),
]


def _fill(value: Any, fill: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**fill)
    if isinstance(value, dict):
        return {k: _fill(v, fill) for k, v in value.items()}
    return value


def _names(people: People) -> dict[str, str]:
    from accounts.models import Member

    return names(people) | {
        "eve": _eve(people).user.email,
        "tina_id": str(people.users["team_admin"].member.pk),
        "dora_email": _dora(people),
        "home_app": people.home_app.slug,
        "home_id": str(people.home.pk),
        "alice": people.email("member"),
        "bob": people.users["member_peer"].email,
        "carl": people.email("other_member"),
        "eve_id": str(Member.objects.get(user__email=_eve(people).user.email).pk),
    }


def _attempt(people: People, write: Write, surface: str, role: str) -> tuple[int, bool]:
    """The status the surface answered and whether the change landed; rolled back."""
    fill = _names(people)
    if surface == "console":
        client: Any = Client()
        if role != "anonymous":
            client.force_login(people.users[role])
    else:
        client = APIClient()
        if role != "anonymous":
            if surface == "api_token":
                _, token = management_token_issue(actor=SYSTEM, user_id=people.users[role].pk)
                client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
            else:
                client.force_login(people.users[role])
    with transaction.atomic():
        if surface == "console":
            path, data = write.console
            response = client.post(_fill(path, fill), _fill(data, fill))
        else:
            method, path, body = write.api
            if isinstance(body, str):  # a TOML file
                response = getattr(client, method)(
                    path, body.encode(), content_type="application/toml"
                )
            else:
                response = getattr(client, method)(
                    _fill(path, fill), _fill(body, fill), format="json"
                )
        landed = write.landed(people)
        transaction.set_rollback(True)
    return response.status_code, landed


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("write", WRITES, ids=lambda w: w.name)
def test_console_and_api_agree_on_every_write_for_every_role(
    people: People, write: Write, role: str
) -> None:
    outcomes = {surface: _attempt(people, write, surface, role) for surface in SURFACES}
    landed = {surface: got[1] for surface, got in outcomes.items()}
    wanted = role in write.lands_for
    assert set(landed.values()) == {wanted}, (
        f"{write.name} as {role}: wanted landed={wanted}, got {outcomes}"
    )
    for surface, (status, did_land) in outcomes.items():
        assert status < 500, (surface, status)
        if surface != "console" and not did_land:
            assert status in (400, 401, 403, 404), (write.name, role, surface, status)


@pytest.mark.parametrize("write", [w for w in WRITES if "tina" not in w.name], ids=lambda w: w.name)
def test_a_team_admin_token_made_by_the_command_has_exactly_the_team_admins_rights(
    people: People, write: Write
) -> None:
    """`manage.py issue_admin_token --team home` (a token of no user) acts as home's admin:
    the same writes land as for tina, the same are refused."""
    _, token = management_token_issue(actor=SYSTEM, team_slug=people.home.slug)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    fill = _names(people)
    method, path, body = write.api
    with transaction.atomic():
        if isinstance(body, str):
            response = getattr(client, method)(path, body.encode(), content_type="application/toml")
        else:
            response = getattr(client, method)(_fill(path, fill), _fill(body, fill), format="json")
        landed = write.landed(people)
        transaction.set_rollback(True)
    assert response.status_code < 500
    assert landed == ("team_admin" in write.lands_for), (write.name, response.status_code)
