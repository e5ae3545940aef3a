"""Limits, deployments, routes, config, usage and calls through /api/v1/, per role."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts.models import AdminAction
from quotas.models import Limit, UsageRollup
from quotas.rollups import daily_rollups_rebuild
from routing.models import Attempt, CallRecord, Deployment
from tests.support.api import ROLES, assert_error

pytestmark = pytest.mark.django_db
DENIED = {"anonymous": 401, "gateway_key": 401}


def expect(admin: int, team_admin: int, member: int, other: int) -> dict[str, int]:
    return {"admin": admin, "team_admin": team_admin, "member": member, "other": other} | DENIED


def check(response: Any, status: int) -> Any:
    if status >= 400:
        assert_error(response, status)
        return None
    assert response.status_code == status, (response.status_code, response.content[:400])
    return response


# --- limits ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_set_read_and_clear_a_member_limit(world: Any, client_as: Any, role: str) -> None:
    client = client_as(role)
    path = "/api/v1/limits/member/dev@acme.test/"
    body = {"requests_per_minute": 30, "cost_per_month": "12.5"}
    if check(client.put(path, body, format="json"), expect(200, 200, 403, 404)[role]):
        limit = Limit.objects.get(member=world.member)
        assert limit.requests_per_minute == 30 and str(limit.cost_per_month) == "12.5000"
        data = client.get(path).json()
        assert data["limits"]["requests_per_minute"] == 30
        assert data["usage"]["tokens_today"] == 0
        action = AdminAction.objects.filter(via="api").latest("id")
        assert action.object_type and action.after["requests_per_minute"] == 30
        check(client.delete(path), 204)
        assert not Limit.objects.filter(member=world.member).exists()


@pytest.mark.parametrize("role", ROLES)
def test_read_limits_in_scope(world: Any, client_as: Any, role: str) -> None:
    client_as("admin").put(
        "/api/v1/limits/member/dev@acme.test/", {"tokens_per_day": 1000}, format="json"
    )
    response = check(
        client_as(role).get("/api/v1/limits/member/dev@acme.test/"),
        expect(200, 200, 200, 404)[role],
    )
    if response:
        assert response.json()["limits"]["tokens_per_day"] == 1000
    listed = client_as(role).get("/api/v1/limits/")
    if role in DENIED:
        assert_error(listed, 401)
    else:
        names = {row["name"] for row in listed.json()}
        assert ("dev@acme.test" in names) == (role != "other")


def test_limits_carry_the_month_end_forecast_of_their_budgets(world: Any, client_as: Any) -> None:
    from decimal import Decimal

    Limit.objects.create(scope="member", member=world.member, cost_per_month=Decimal("1000"))
    Limit.objects.create(scope="team", team=world.other_team, tokens_per_month=10**6)
    noon = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    for days_ago in range(1, 11):  # $4 a day for the last ten days
        UsageRollup.objects.create(
            hour=noon - timedelta(days=days_ago),
            key_prefix=world.member_key_prefix,
            deployment="dep-a",
            member_id=world.member.pk,
            application_id=world.app.pk,
            team_id=world.team.pk,
            requests=1,
            cost=Decimal("4"),
        )
    data = client_as("member").get("/api/v1/limits/member/dev@acme.test/").json()
    cost = data["forecast"]["cost_per_month"]
    assert data["forecast"]["tokens_per_month"] is None  # no monthly token budget
    assert (cost["unit"], cost["basis"], cost["budget"]) == ("USD", "recent", 1000.0)
    assert cost["daily_rate"] == pytest.approx(4.0) and cost["runs_out_on"] is None
    assert cost["projected"] > cost["spent"] and cost["projected_share"] < 1
    listed = {r["name"]: r for r in client_as("other").get("/api/v1/limits/").json()}
    assert "dev@acme.test" not in listed  # another team's forecast is not shown
    tokens = listed["globex"]["forecast"]["tokens_per_month"]
    assert (tokens["unit"], tokens["basis"], tokens["projected"]) == (
        "tokens",
        "insufficient",
        None,
    )


def test_limit_bad_input(world: Any, client_as: Any) -> None:
    admin = client_as("admin")
    path = "/api/v1/limits/member/dev@acme.test/"
    for body in (
        {"requests_per_minute": -1},
        {"requests_per_minute": "lots"},
        {"requests_per_minute": 10**16},
        {"cost_per_month": "1.00001"},
        {"bogus": 1},
    ):
        assert_error(admin.put(path, body, format="json"), 400)
    assert_error(admin.put("/api/v1/limits/planet/x/", {}, format="json"), 404)
    assert_error(admin.put("/api/v1/limits/member/nobody@x.test/", {}, format="json"), 404)
    assert_error(admin.get("/api/v1/limits/?scope=planet"), 400)


# --- deployments and routes -----------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_read_deployments_routes_and_state(client_as: Any, role: str) -> None:
    client = client_as(role)
    status = expect(200, 200, 200, 200)[role]
    if check(client.get("/api/v1/deployments/"), status):
        state = client.get("/api/v1/deployments/dep-a/state").json()  # slash optional
        assert state["breaker"] == "closed" and state["in_flight"] == 0
        assert state["waiting"] == {"interactive": 0, "batch": 0}
        assert state["configured_limit"] == 8
        route = client.get("/api/v1/routes/fast/").json()
        assert route["chain"] == ["dep-a"]
    check(client.get("/api/v1/routes/"), status)
    check(client.get("/api/v1/deployments/nope/state/"), 404 if role not in DENIED else 401)


@pytest.mark.parametrize("role", ROLES)
def test_drain_and_undrain(client_as: Any, role: str) -> None:
    client = client_as(role)
    body = {"minutes": 10, "reason": "capacity drill"}
    status = expect(200, 403, 403, 403)[role]
    if check(client.post("/api/v1/deployments/dep-a/drain/", body, format="json"), status):
        d = Deployment.objects.get(name="dep-a")
        assert d.drained_until > timezone.now() + timedelta(minutes=9)
        assert d.drain_reason == "capacity drill"
        state = client.get("/api/v1/deployments/dep-a/state/").json()
        assert state["drained"] is True and state["drain_reason"] == "capacity drill"
        check(client.post("/api/v1/deployments/dep-a/undrain/"), 200)
        assert Deployment.objects.get(name="dep-a").drained_until is None
        actions = list(
            AdminAction.objects.filter(via="api").order_by("id").values_list("action", flat=True)
        )
        assert actions == ["deployment.drain", "deployment.undrain"]
    else:
        assert Deployment.objects.get(name="dep-a").drained_until is None


@pytest.mark.parametrize("role", ROLES)
def test_enable_and_disable(client_as: Any, role: str) -> None:
    client = client_as(role)
    status = expect(200, 403, 403, 403)[role]
    if check(client.post("/api/v1/deployments/dep-a/disable/"), status):
        assert Deployment.objects.get(name="dep-a").enabled is False
        assert client.post("/api/v1/deployments/dep-a/enable/").json()["enabled"] is True


def test_drain_bad_input(client_as: Any) -> None:
    admin = client_as("admin")
    for body in (
        {"minutes": 0},
        {"minutes": "soon"},
        {"minutes": 10**9},
        {},
        {"minutes": 1, "reason": "r" * 301},
    ):
        assert_error(admin.post("/api/v1/deployments/dep-a/drain/", body, format="json"), 400)
    assert_error(admin.post("/api/v1/deployments/nope/drain/", {"minutes": 1}, format="json"), 404)


# --- config as code -------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_config_export_dry_run_and_apply(client_as: Any, role: str) -> None:
    client = client_as(role)
    status = expect(200, 403, 403, 403)[role]
    exported = check(client.get("/api/v1/config/"), status)
    if not exported:
        check(client.post("/api/v1/config/apply/", "", content_type="application/toml"), status)
        return
    assert exported["Content-Type"].startswith("application/toml")
    text = exported.content.decode()
    assert '[[deployments]]\nname = "dep-a"' in text
    changed = text.replace('name = "Acme"', 'name = "Acme Corp"')
    assert changed != text
    dry = client.post("/api/v1/config/dry-run/", changed, content_type="application/toml").json()
    assert dry["applied"] is False
    assert [c["name"] for c in dry["changes"]] == ["acme"]
    assert dry["changes"][0]["fields"]["name"] == ["Acme", "Acme Corp"]
    assert client.get("/api/v1/teams/acme/").json()["name"] == "Acme"
    applied = client.post("/api/v1/config/apply/", changed, content_type="text/plain").json()
    assert applied["applied"] is True
    assert client.get("/api/v1/teams/acme/").json()["name"] == "Acme Corp"
    assert AdminAction.objects.filter(action="config.apply", via="api").count() == 1


def test_config_bad_files(client_as: Any) -> None:
    admin = client_as("admin")
    for text in (
        "not = [toml",
        '[[deployments]]\nname = "x"\nupstream = "nope"\nmodel = "m"\n',
        "",
    ):
        error = assert_error(
            admin.post("/api/v1/config/dry-run/", text, content_type="application/toml"), 400
        )
        assert error["message"]
    assert_error(admin.post("/api/v1/config/apply/", b"\xff\xfe", content_type="text/plain"), 400)
    assert_error(admin.post("/api/v1/config/apply/", {"a": 1}, format="json"), 415)


# --- usage and calls ------------------------------------------------------------------------


def _call(world: Any, member: Any, n: int, **extra: Any) -> CallRecord:
    call = CallRecord.objects.create(
        request_id=f"req-{member.pk}-{n}",
        created_at=timezone.now() - timedelta(minutes=n),
        member=member,
        member_email=member.user.email,
        application=world.app if member.team_id == world.team.pk else world.other_app,
        application_slug="x",
        endpoint="chat/completions",
        requested_model="fast",
        served_deployment="dep-a",
        outcome="success",
        status_code=200,
        attempt_count=1,
        **extra,
    )
    Attempt.objects.create(
        call=call,
        number=1,
        deployment="dep-a",
        started_at=call.created_at,
        duration_ms=12.0,
        status_code=200,
    )
    return call


@pytest.fixture
def calls(world: Any) -> None:
    for n in range(3):
        _call(world, world.member, n)
    _call(world, world.other, 0)
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    for member, app, team, prefix in (
        (world.member, world.app, world.team, world.member_key_prefix),
        (world.other, world.other_app, world.other_team, world.other_key_prefix),
    ):
        UsageRollup.objects.create(
            hour=hour,
            key_prefix=prefix,
            deployment="dep-a",
            member_id=member.pk,
            application_id=app.pk,
            team_id=team.pk,
            requests=3,
            tokens_in=30,
            tokens_out=60,
        )
    daily_rollups_rebuild()  # rows made by hand: the audit writer would add their days too


@pytest.mark.parametrize("role", ROLES)
def test_calls_in_scope_with_attempts(world: Any, calls: None, client_as: Any, role: str) -> None:
    client = client_as(role)
    listed = check(client.get("/api/v1/calls/"), expect(200, 200, 200, 200)[role])
    if not listed:
        return
    ids = [c["request_id"] for c in listed.json()["results"]]
    mine = [f"req-{world.member.pk}-{n}" for n in range(3)]
    theirs = [f"req-{world.other.pk}-0"]
    expected = {"admin": None, "team_admin": mine, "member": mine, "other": theirs}[role]
    if expected is not None:
        assert ids == expected  # newest first
    detail = client.get(f"/api/v1/calls/req-{world.member.pk}-0/")
    if role == "other":
        assert_error(detail, 404)
    else:
        assert detail.json()["attempts"][0]["deployment"] == "dep-a"


def test_calls_cursor_and_filters(world: Any, calls: None, client_as: Any) -> None:
    admin = client_as("admin")
    first = admin.get("/api/v1/calls/?limit=2&member=dev@acme.test").json()
    assert len(first["results"]) == 2 and first["next"]
    rest = admin.get(first["next"]).json()
    assert [c["request_id"] for c in rest["results"]] == [f"req-{world.member.pk}-2"]
    assert admin.get("/api/v1/calls/?outcome=success&model=fast").json()["results"]
    assert not admin.get("/api/v1/calls/?deployment=nope").json()["results"]
    assert_error(admin.get("/api/v1/calls/?outcome=bogus"), 400)
    assert_error(admin.get("/api/v1/calls/?since=yesterday"), 400)
    assert assert_error(admin.get("/api/v1/calls/?cursor=garbage"), 400)["param"] == "cursor"
    assert_error(admin.get("/api/v1/calls/?limit=0"), 400)
    assert_error(admin.get("/api/v1/calls/?member=nobody@x.test"), 400)
    assert_error(admin.get("/api/v1/calls/?bogus=1"), 400)
    slow = admin.get("/api/v1/calls/?min_latency_ms=0&stream=false&priority=interactive")
    assert slow.status_code == 200
    assert_error(admin.get("/api/v1/calls/no-such-call/"), 404)


@pytest.mark.parametrize("role", ROLES)
def test_usage_report_json_and_csv(world: Any, calls: None, client_as: Any, role: str) -> None:
    client = client_as(role)
    response = check(
        client.get("/api/v1/usage/?group_by=member&period=day"), expect(200, 200, 200, 200)[role]
    )
    if not response:
        return
    labels = {r["label"]: r["calls"] for r in response.json()["rows"]}
    expected = {
        "admin": {"dev@acme.test": 3, "dev@globex.test": 3},
        "team_admin": {"dev@acme.test": 3},
        "member": {"dev@acme.test": 3},
        "other": {"dev@globex.test": 3},
    }[role]
    assert labels == expected
    csv_response = client.get("/api/v1/usage/?group_by=member&period=day", HTTP_ACCEPT="text/csv")
    assert csv_response["Content-Type"].startswith("text/csv")
    lines = csv_response.content.decode().splitlines()
    assert lines[0].startswith("member,calls")
    assert lines[-1].startswith("Total,")
    assert client.get("/api/v1/usage/?format=csv").content.decode().startswith("team,")


def test_usage_bad_input(calls: None, client_as: Any) -> None:
    admin = client_as("admin")
    assert_error(admin.get("/api/v1/usage/?group_by=planet"), 400)
    assert_error(admin.get("/api/v1/usage/?period=custom"), 400)
    assert_error(admin.get("/api/v1/usage/?period=custom&since=2026-02-01&until=2026-01-01"), 400)
    assert_error(admin.get("/api/v1/usage/?team=nope"), 400)
    assert_error(admin.get("/api/v1/usage/?since=notadate&period=custom&until=2026-01-01"), 400)
    assert_error(client_as("member").get("/api/v1/usage/?team=globex"), 400)


# --- schema and docs ------------------------------------------------------------------------


def test_schema_and_docs_are_served_without_a_cdn(client: Any) -> None:
    schema = client.get("/api/v1/schema/?format=json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/deployments/{name}/state/" in paths
    assert "429" in paths["/api/v1/keys/"]["post"]["responses"]
    calls = paths["/api/v1/calls/"]["get"]["responses"]["200"]["content"]["application/json"]
    assert calls["schema"] == {"$ref": "#/components/schemas/CallPageOut"}  # a page, not a list
    for page in ("/api/v1/docs/", "/api/v1/redoc/"):
        html = client.get(page).content.decode()
        assert "/static/drf_spectacular_sidecar/" in html, page
        assert "https://" not in html and "//cdn" not in html, page
    asset = client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert asset.status_code == 200


def test_usage_csv_neutralises_formula_cells_like_the_consoles() -> None:
    """A member email, key name or deployment name is chosen by people: one that starts
    like a formula must reach the spreadsheet as text."""
    import csv
    import io

    from api.views_reports import CSVRenderer
    from reports.usage import COLUMNS

    row = {"label": '=HYPERLINK("http://evil")@x.test'} | {attr: 1 for attr, _ in COLUMNS}
    totals = {"label": "Total"} | {attr: 1 for attr, _ in COLUMNS}
    rows = [row, {**row, "label": "+cmd|' /C calc'!A0"}, {**row, "label": "@SUM(A1)"}, totals]
    text = CSVRenderer().render({"group_by": "member", "rows": rows[:-1], "totals": totals})
    labels = [line[0] for line in csv.reader(io.StringIO(text.decode()))][1:]
    assert labels == [
        '\'=HYPERLINK("http://evil")@x.test',
        "'+cmd|' /C calc'!A0",
        "'@SUM(A1)",
        "Total",
    ]


def test_calls_show_and_filter_protocols_what_was_degraded_and_the_agent(
    world: Any, calls: None, client_as: Any
) -> None:
    _call(
        world,
        world.member,
        9,
        client_protocol="anthropic",
        upstream_protocol="openai",
        degraded="thinking: sent as reasoning_effort=low\ncontext_management: not sent on",
        user_agent="claude-cli/2.1.332 (external, sdk-cli)",
    )
    admin = client_as("admin")
    found = admin.get("/api/v1/calls/?user_agent=claude-cli&client_protocol=anthropic").json()
    [call] = found["results"]
    assert (call["client_protocol"], call["upstream_protocol"]) == ("anthropic", "openai")
    assert call["degraded"] == [
        "thinking: sent as reasoning_effort=low",
        "context_management: not sent on",
    ]
    assert call["user_agent"].startswith("claude-cli/")
    assert not admin.get("/api/v1/calls/?user_agent=codex_cli_rs").json()["results"]
    plain = admin.get("/api/v1/calls/?client_protocol=openai").json()["results"]
    assert plain and all(c["degraded"] == [] for c in plain)
    agents = admin.get("/api/v1/calls/agents/").json()
    assert {
        "agent": "claude-cli",
        "route": "fast",
        "client_protocol": "anthropic",
        "upstream_protocol": "openai",
        "calls": 1,
        "failed": 0,
        "degraded": 1,
    } in agents
    member = client_as("member").get("/api/v1/calls/agents/?client_protocol=anthropic").json()
    assert [r["agent"] for r in member] == ["claude-cli"]
