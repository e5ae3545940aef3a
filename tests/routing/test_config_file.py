"""Configuration as code: the TOML file is checked whole, applied in one transaction,
idempotently; a bad file names the bad entry and changes nothing."""

import copy
import io
import json
import re
import tomllib
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts.models import ApiKey, Application, Member, Team
from quotas.models import Limit
from routing.catalog.config_file import (
    ApplyReport,
    ConfigError,
    apply_config,
    load_config,
    validate_config,
)
from routing.models import Deployment, Route, RouteDeployment, Upstream

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "config" / "demo.toml"
DEMO_RAW: dict[str, Any] = tomllib.loads(DEMO.read_text())
DEMO_COUNTS = {
    "upstreams": 3,
    "deployments": 5,
    "routes": 5,
    "teams": 1,
    "applications": 1,
    "members": 1,
    "limits": 1,
}
Raw = dict[str, Any]


@pytest.fixture(autouse=True)
def empty_tables() -> None:
    """Start every test from no configuration at all (inside the test transaction), even when
    an earlier session fixture committed the demo for the end-to-end tests."""
    Limit.objects.all().delete()
    ApiKey.objects.all().delete()
    Member.objects.all().delete()
    Application.objects.all().delete()
    Team.objects.all().delete()
    get_user_model().objects.all().delete()
    RouteDeployment.objects.all().delete()
    Route.objects.all().delete()
    Deployment.objects.all().delete()
    Upstream.objects.all().delete()


def demo() -> Raw:
    return copy.deepcopy(DEMO_RAW)


def to_toml(raw: Raw) -> str:
    """Enough TOML for these files: arrays of tables of scalars and lists of strings
    (JSON's strings, numbers, booleans and arrays are valid TOML); a section that is not a
    list of tables is written as a plain top-level value."""
    is_tables = {
        section: isinstance(entries, list) and all(isinstance(e, dict) for e in entries)
        for section, entries in raw.items()
    }
    lines = [f"{s} = {json.dumps(v)}" for s, v in raw.items() if not is_tables[s]]
    for section, entries in raw.items():
        if not is_tables[section]:
            continue
        for entry in entries:
            lines.append(f"[[{section}]]")
            lines += [f"{key} = {json.dumps(value)}" for key, value in entry.items()]
            lines.append("")
    return "\n".join(lines)


def write(tmp_path: Path, raw: Raw, name: str = "sluice.toml") -> Path:
    path = tmp_path / name
    path.write_text(to_toml(raw))
    return path


def snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every row the configuration touches."""
    through = Application.routes.through
    return {
        "upstreams": list(Upstream.objects.order_by("pk").values()),
        "deployments": list(Deployment.objects.order_by("pk").values()),
        "routes": list(Route.objects.order_by("pk").values()),
        "chain": list(RouteDeployment.objects.order_by("pk").values()),
        "teams": list(Team.objects.order_by("pk").values()),
        "applications": list(Application.objects.order_by("pk").values()),
        "application_routes": list(through.objects.order_by("pk").values()),
        "members": list(Member.objects.order_by("pk").values()),
        "users": list(get_user_model().objects.order_by("pk").values()),
        "limits": list(Limit.objects.order_by("pk").values()),
    }


def apply_raw(raw: Raw) -> ApplyReport:
    return apply_config(validate_config(raw))


def chain_of(route: str) -> list[str]:
    return list(
        RouteDeployment.objects.filter(route__name=route)
        .order_by("position")
        .values_list("deployment__name", flat=True)
    )


# --- applying the demo -----------------------------------------------------------------


def test_applying_demo_file_creates_every_object() -> None:
    report = apply_config(load_config(DEMO))

    assert dict(report.created) == DEMO_COUNTS
    assert not report.updated
    assert not report.unchanged
    assert report.changed is True

    upstream = Upstream.objects.get(name="simulator")
    assert (upstream.name, upstream.kind, upstream.base_url, upstream.api_key_env) == (
        "simulator",
        "openai",
        "http://127.0.0.1:9100/v1",
        "",
    )
    assert (upstream.connect_timeout, upstream.read_timeout) == (5.0, 60.0)

    deployments = {d.name: d for d in Deployment.objects.select_related("upstream")}
    assert set(deployments) == {"big", "medium", "small", "claude", "gpt-r"}
    big = deployments["big"]
    assert big.upstream.name == "simulator"
    assert (big.model, big.tier, big.max_concurrency, big.context_window, big.enabled) == (
        "big",
        "large",
        4,
        200_000,
        True,
    )
    assert big.input_price_per_million == Decimal("5")
    assert big.output_price_per_million == Decimal("15")
    small = deployments["small"]
    assert (small.max_concurrency, small.context_window) == (64, 32_000)
    assert small.input_price_per_million == Decimal("0.15")
    assert small.output_price_per_million == Decimal("0.6")
    assert deployments["medium"].max_concurrency == 16

    assert set(Route.objects.values_list("name", flat=True)) == {
        "smart",
        "fast",
        "mixed",
        "claude-agent",
        "codex-agent",
    }
    assert chain_of("smart") == ["big", "medium", "small"]
    assert chain_of("fast") == ["small"]
    assert chain_of("mixed") == ["claude", "big", "small"]
    assert chain_of("codex-agent") == ["gpt-r", "big", "small"]
    assert Deployment.objects.get(name="gpt-r").upstream.kind == "openai-responses"
    assert deployments["claude"].upstream.kind == "anthropic"
    assert list(
        RouteDeployment.objects.filter(route__name="smart")
        .order_by("position")
        .values_list("position", flat=True)
    ) == [0, 1, 2]

    team = Team.objects.get()
    assert (team.slug, team.name, team.time_zone) == ("demo", "Demo team", "UTC")
    app = Application.objects.get()
    assert (app.slug, app.name, app.team_id, app.default_priority) == (
        "demo",
        "Demo application",
        team.pk,
        "interactive",
    )
    assert set(app.routes.values_list("name", flat=True)) == {
        "smart",
        "fast",
        "mixed",
        "claude-agent",
        "codex-agent",
    }
    member = Member.objects.select_related("user").get()
    assert (member.user.email, member.team_id, member.role) == (
        "demo@example.com",
        team.pk,
        "member",
    )


def test_applying_demo_twice_changes_nothing_the_second_time() -> None:
    first = apply_config(load_config(DEMO))
    before = snapshot()
    second = apply_config(load_config(DEMO))

    assert first.changed is True
    assert not second.created
    assert not second.updated
    assert dict(second.unchanged) == DEMO_COUNTS
    assert second.changed is False
    assert snapshot() == before


def test_apply_config_command_reports_created_then_nothing(tmp_path: Path) -> None:
    out = io.StringIO()
    call_command("apply_config", str(DEMO), stdout=out)
    assert out.getvalue().strip() == (
        f"{DEMO}: created: 1 applications, 5 deployments, 1 limits, 1 members, 5 routes, 1 teams, "
        "3 upstreams; updated: nothing; unchanged: nothing"
    )
    before = snapshot()
    out = io.StringIO()
    call_command("apply_config", str(DEMO), stdout=out)
    assert "created: nothing; updated: nothing;" in out.getvalue()
    assert snapshot() == before


def test_defaults_fill_fields_the_file_leaves_out() -> None:
    raw: Raw = {
        "upstreams": [{"name": "u", "base_url": "https://api.example.com/v1"}],
        "deployments": [{"name": "d", "upstream": "u", "model": "m"}],
        "routes": [{"name": "r", "chain": ["d"]}],
        "teams": [{"slug": "t"}],
        "applications": [{"slug": "a", "team": "t"}],
        "members": [{"email": "x@example.com", "team": "t"}],
    }
    apply_raw(raw)
    u = Upstream.objects.get(name="u")
    assert (u.kind, u.api_key_env, u.connect_timeout, u.read_timeout) == ("openai", "", 5.0, 60.0)
    assert (u.forward_openai_headers, u.http2) == (False, False)
    d = Deployment.objects.get(name="d")
    assert (d.tier, d.max_concurrency, d.context_window, d.enabled) == (
        "standard",
        8,
        128_000,
        True,
    )
    assert d.input_price_per_million == 0
    team = Team.objects.get(slug="t")
    assert (team.name, team.time_zone) == ("t", "UTC")
    app = Application.objects.get(slug="a")
    assert (app.name, app.default_priority, app.routes.count()) == ("a", "interactive", 0)
    assert Member.objects.get(user__email="x@example.com").role == "member"


# --- changing one thing ----------------------------------------------------------------


def _set(section: str, index: int, field: str, value: Any) -> Callable[[Raw], None]:
    def change(raw: Raw) -> None:
        raw[section][index][field] = value

    return change


def test_an_upstreams_switches_survive_an_export_and_its_apply() -> None:
    """`http2` and `forward_openai_headers` are in the exported file, so applying it back
    changes nothing (an export without them would switch them off)."""
    from routing.catalog.config_export import config_diff, config_export

    raw = demo()
    raw["upstreams"][0] |= {"http2": True, "forward_openai_headers": True}
    apply_raw(raw)
    exported = config_export()
    assert "http2 = true" in exported
    assert "forward_openai_headers = true" in exported
    assert not config_diff(exported, apply=False).changed


@pytest.mark.parametrize(
    ("section", "change", "table", "column", "expected"),
    [
        (
            "upstreams",
            _set("upstreams", 0, "read_timeout", 120),
            "upstreams",
            "read_timeout",
            120.0,
        ),
        (
            "upstreams",
            _set("upstreams", 0, "base_url", "http://10.0.0.1:8000/v1"),
            "upstreams",
            "base_url",
            "http://10.0.0.1:8000/v1",
        ),
        (
            "deployments",
            _set("deployments", 1, "max_concurrency", 20),
            "deployments",
            "max_concurrency",
            20,
        ),
        (
            "deployments",
            _set("deployments", 2, "input_price_per_million", 0.2),
            "deployments",
            "input_price_per_million",
            Decimal("0.2"),
        ),
        ("deployments", _set("deployments", 0, "enabled", False), "deployments", "enabled", False),
        (
            "teams",
            _set("teams", 0, "time_zone", "Asia/Shanghai"),
            "teams",
            "time_zone",
            "Asia/Shanghai",
        ),
        (
            "applications",
            _set("applications", 0, "default_priority", "batch"),
            "applications",
            "default_priority",
            "batch",
        ),
        ("members", _set("members", 0, "role", "admin"), "members", "role", "admin"),
    ],
)
def test_changing_one_field_updates_only_that_object(
    section: str,
    change: Callable[[Raw], None],
    table: str,
    column: str,
    expected: Any,
) -> None:
    apply_raw(demo())
    before = snapshot()
    raw = demo()
    change(raw)

    report = apply_raw(raw)

    assert dict(report.updated) == {section: 1}
    assert not report.created
    after = snapshot()
    changed_tables = [name for name in before if before[name] != after[name]]
    assert changed_tables == [table]
    diffs = [
        {k for k in old if old[k] != new[k]}
        for old, new in zip(before[table], after[table], strict=True)
        if old != new
    ]
    assert diffs == [{column}]
    new_row = next(new for old, new in zip(before[table], after[table], strict=True) if old != new)
    assert new_row[column] == expected
    # Applying the changed file again is a no-op.
    again = apply_raw(raw)
    assert not again.changed
    assert snapshot() == after


def test_reordering_a_chain_updates_only_that_route() -> None:
    apply_raw(demo())
    fast_rows = list(RouteDeployment.objects.filter(route__name="fast").values())
    raw = demo()
    raw["routes"][0]["chain"] = ["small", "big", "medium"]

    report = apply_raw(raw)

    assert dict(report.updated) == {"routes": 1}
    assert not report.created
    assert chain_of("smart") == ["small", "big", "medium"]
    assert chain_of("fast") == ["small"]
    assert list(RouteDeployment.objects.filter(route__name="fast").values()) == fast_rows
    assert not apply_raw(raw).changed


def test_shortening_a_chain_removes_the_dropped_deployment() -> None:
    apply_raw(demo())
    raw = demo()
    raw["routes"][0]["chain"] = ["medium"]
    report = apply_raw(raw)
    assert dict(report.updated) == {"routes": 1}
    assert chain_of("smart") == ["medium"]
    assert Deployment.objects.filter(name="big").exists()  # only the link went


def test_changing_application_routes_updates_the_application() -> None:
    apply_raw(demo())
    raw = demo()
    raw["applications"][0]["routes"] = ["fast"]
    report = apply_raw(raw)
    assert dict(report.updated) == {"applications": 1}
    app = Application.objects.get(slug="demo")
    assert list(app.routes.values_list("name", flat=True)) == ["fast"]


def test_objects_the_file_does_not_mention_are_left_alone() -> None:
    apply_raw(demo())
    before = snapshot()
    raw: Raw = {
        "deployments": [{"name": "tiny", "upstream": "simulator", "model": "tiny"}],
        "routes": [{"name": "tiny", "chain": ["tiny", "small"]}],
    }
    report = apply_raw(raw)
    assert dict(report.created) == {"deployments": 1, "routes": 1}
    assert not report.updated
    after = snapshot()
    for table in ("upstreams", "teams", "applications", "members", "users"):
        assert after[table] == before[table]
    assert after["deployments"][: len(before["deployments"])] == before["deployments"]
    assert chain_of("smart") == ["big", "medium", "small"]
    assert chain_of("tiny") == ["tiny", "small"]


def test_references_may_name_objects_already_in_the_database() -> None:
    apply_raw(demo())
    raw: Raw = {"routes": [{"name": "cheap", "chain": ["small"]}]}
    assert dict(apply_raw(raw).created) == {"routes": 1}
    assert chain_of("cheap") == ["small"]


def test_price_with_more_decimals_than_stored_is_refused() -> None:
    # The database keeps 6 decimals; a finer price could never be applied idempotently.
    raw = demo()
    raw["deployments"][0]["input_price_per_million"] = 0.1234567
    with pytest.raises(ConfigError, match=r"deployments\[0\] \(big\): 'input_price_per_million'"):
        apply_raw(raw)


def test_price_with_six_decimals_applies_idempotently() -> None:
    raw = demo()
    raw["deployments"][0]["input_price_per_million"] = 0.123456
    apply_raw(raw)
    assert not apply_raw(raw).updated


# --- secrets ---------------------------------------------------------------------------


def test_api_key_env_stores_the_variable_name_never_the_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "sk-live-THIS-IS-THE-SECRET-0123456789"
    monkeypatch.setenv("SLUICE_UPSTREAM_SIMULATOR", secret)
    raw = demo()
    raw["upstreams"][0]["api_key_env"] = "SLUICE_UPSTREAM_SIMULATOR"
    apply_raw(raw)
    assert Upstream.objects.get(name="simulator").api_key_env == "SLUICE_UPSTREAM_SIMULATOR"
    assert secret not in repr(snapshot())


@pytest.mark.parametrize(
    "value",
    ["sk-proj-abc123", "OPENAI API KEY", "$OPENAI_API_KEY", "OPENAI-API-KEY", "key=value"],
)
def test_api_key_env_that_is_not_a_variable_name_is_refused(value: str) -> None:
    raw = demo()
    raw["upstreams"][0]["api_key_env"] = value
    with pytest.raises(
        ConfigError, match=r"upstreams\[0\] \(simulator\): 'api_key_env' is the NAME"
    ):
        validate_config(raw)
    assert snapshot() == snapshot_empty()


@pytest.mark.parametrize(
    "value", ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SLUICE_UPSTREAM_OPENAI", "SLUICE_UPSTREAM_x2"]
)
def test_api_key_env_variable_names_are_accepted(value: str) -> None:
    raw = demo()
    raw["upstreams"][0]["api_key_env"] = value
    assert validate_config(raw)["upstreams"][0]["api_key_env"] == value


@pytest.mark.parametrize(
    "value", ["DATABASE_URL", "SLUICE_SECRET_KEY", "REDIS_URL", "HOME", "_PRIVATE", "AWS_SECRET"]
)
def test_api_key_env_outside_the_allowed_names_is_refused(value: str) -> None:
    """Whoever applies config picks the host the key is sent to: Sluice's own secrets (and
    any variable not meant as an upstream key) must never be one."""
    raw = demo()
    raw["upstreams"][0]["api_key_env"] = value
    with pytest.raises(ConfigError, match=r"'api_key_env' .* is not allowed.*SLUICE_UPSTREAM_\*"):
        validate_config(raw)
    assert snapshot() == snapshot_empty()


def test_the_allowed_names_are_configurable_but_never_include_sluices_secrets(
    settings: Any,
) -> None:
    from routing.catalog.config_file import api_key_env_allowed

    settings.SLUICE_UPSTREAM_KEY_ENV = ["MY_KEY", "SLUICE_*", "DATABASE_*"]
    assert api_key_env_allowed("MY_KEY") and api_key_env_allowed("SLUICE_UPSTREAM_A")
    assert not api_key_env_allowed("OPENAI_API_KEY")
    assert not api_key_env_allowed("SLUICE_SECRET_KEY")
    assert not api_key_env_allowed("DATABASE_URL")


def test_an_upstream_naming_a_forbidden_variable_is_called_without_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A row edited past the config file (the Django admin) is checked where the key is
    read: the variable is never read, so never sent."""
    from routing.catalog.specs import _upstream_key

    monkeypatch.setenv("SLUICE_SECRET_KEY", "the-secret")
    monkeypatch.setenv("SLUICE_UPSTREAM_OK", "sk-upstream")
    assert _upstream_key("SLUICE_SECRET_KEY") is None
    assert _upstream_key("SLUICE_UPSTREAM_OK") == "sk-upstream"
    assert _upstream_key("") is None


@pytest.mark.parametrize("value", ["1PASSWORD", "9f3a7c0e5b2d4a8e", "KLÜCH"])
def test_api_key_env_must_be_a_portable_variable_name(value: str) -> None:
    raw = demo()
    raw["upstreams"][0]["api_key_env"] = value
    with pytest.raises(ConfigError, match="api_key_env"):
        validate_config(raw)


def snapshot_empty() -> dict[str, list[dict[str, Any]]]:
    return {name: [] for name in snapshot()}


# --- bad files -------------------------------------------------------------------------


def _del(section: str, index: int, field: str) -> Callable[[Raw], None]:
    def change(raw: Raw) -> None:
        del raw[section][index][field]

    return change


def _append(section: str, entry: dict[str, Any]) -> Callable[[Raw], None]:
    def change(raw: Raw) -> None:
        raw[section].append(entry)

    return change


def _replace_section(section: str, value: Any) -> Callable[[Raw], None]:
    def change(raw: Raw) -> None:
        raw[section] = value

    return change


BAD = [
    # unknown / missing fields, wrong types
    (
        "unknown-field",
        _set("deployments", 1, "color", "red"),
        "deployments[1] (medium): unknown field(s) color",
    ),
    (
        "wrong-type-str-for-int",
        _set("deployments", 1, "max_concurrency", "16"),
        "deployments[1] (medium): 'max_concurrency' must be int",
    ),
    (
        "wrong-type-bool-for-int",
        _set("deployments", 1, "max_concurrency", True),
        "deployments[1] (medium): 'max_concurrency' must be int",
    ),
    (
        "wrong-type-float-for-int",
        _set("deployments", 1, "context_window", 1.5),
        "deployments[1] (medium): 'context_window' must be int",
    ),
    (
        "wrong-type-str-for-bool",
        _set("deployments", 1, "enabled", "yes"),
        "deployments[1] (medium): 'enabled' must be bool",
    ),
    (
        "wrong-type-str-for-http2",
        _set("upstreams", 0, "http2", "yes"),
        "upstreams[0] (simulator): 'http2' must be bool",
    ),
    (
        "wrong-type-chain",
        _set("routes", 1, "chain", "small"),
        "routes[1] (fast): 'chain' must be list",
    ),
    ("wrong-type-name", _set("deployments", 1, "name", 7), "deployments[1]: 'name' must be str"),
    (
        "missing-required",
        _del("deployments", 1, "model"),
        "deployments[1] (medium): missing required field 'model'",
    ),
    (
        "missing-key-field",
        _del("deployments", 1, "name"),
        "deployments[1]: missing required field 'name'",
    ),
    (
        "empty-required",
        _set("deployments", 1, "model", " "),
        "deployments[1] (medium): 'model' must not be empty",
    ),
    # values
    (
        "zero-concurrency",
        _set("deployments", 1, "max_concurrency", 0),
        "deployments[1] (medium): 'max_concurrency' must be between 1 and 100000",
    ),
    (
        "negative-price",
        _set("deployments", 2, "output_price_per_million", -1),
        "deployments[2] (small): 'output_price_per_million' must be between 0 and 1000000",
    ),
    (
        "whole-reserve",
        _set("deployments", 1, "interactive_reserve", 1),
        "deployments[1] (medium): 'interactive_reserve' must be a share between 0 and 0.99",
    ),
    (
        "bad-base-url-scheme",
        _set("upstreams", 0, "base_url", "ftp://example.com/v1"),
        "upstreams[0] (simulator): 'base_url' must be an http(s) URL",
    ),
    (
        "bad-base-url-no-scheme",
        _set("upstreams", 0, "base_url", "127.0.0.1:9100/v1"),
        "upstreams[0] (simulator): 'base_url' must be an http(s) URL",
    ),
    (
        "bad-base-url-no-host",
        _set("upstreams", 0, "base_url", "http:///v1"),
        "upstreams[0] (simulator): 'base_url' must be an http(s) URL",
    ),
    ("bad-kind", _set("upstreams", 0, "kind", "cohere"), "upstreams[0] (simulator): 'kind'"),
    (
        "zero-timeout",
        _set("upstreams", 0, "connect_timeout", 0),
        "upstreams[0] (simulator): timeouts must be between 0 and 3600 seconds",
    ),
    (
        "bad-time-zone",
        _set("teams", 0, "time_zone", "Mars/Olympus_Mons"),
        "teams[0] (demo): unknown time zone 'Mars/Olympus_Mons'",
    ),
    (
        "bad-time-zone-path",
        _set("teams", 0, "time_zone", "../etc/passwd"),
        "teams[0] (demo): unknown time zone",
    ),
    (
        "bad-priority",
        _set("applications", 0, "default_priority", "urgent"),
        "applications[0] (demo): 'default_priority' must be one of",
    ),
    (
        "bad-role",
        _set("members", 0, "role", "owner"),
        "members[0] (demo@example.com): 'role' must be one of",
    ),
    (
        "bad-email",
        _set("members", 0, "email", "demo.example.com"),
        "members[0] (demo.example.com): 'email' must be an email address",
    ),
    (
        "empty-chain",
        _set("routes", 1, "chain", []),
        "routes[1] (fast): 'chain' must name at least one deployment",
    ),
    (
        "chain-twice",
        _set("routes", 0, "chain", ["big", "small", "big"]),
        "routes[0] (smart): a name appears twice",
    ),
    (
        "chain-not-names",
        _set("routes", 0, "chain", ["big", 3]),
        "routes[0] (smart): lists must hold names",
    ),
    # references
    (
        "route-names-missing-deployment",
        _set("routes", 0, "chain", ["big", "huge"]),
        "routes[0] (smart): unknown deployment 'huge'",
    ),
    (
        "deployment-names-missing-upstream",
        _set("deployments", 2, "upstream", "nowhere"),
        "deployments[2] (small): unknown upstream 'nowhere'",
    ),
    (
        "application-names-missing-route",
        _set("applications", 0, "routes", ["smart", "slow"]),
        "applications[0] (demo): unknown route 'slow'",
    ),
    (
        "application-names-missing-team",
        _set("applications", 0, "team", "ghost"),
        "applications[0] (demo): unknown team 'ghost'",
    ),
    (
        "member-names-missing-team",
        _set("members", 0, "team", "ghost"),
        "members[0] (demo@example.com): unknown team 'ghost'",
    ),
    # duplicates
    (
        "duplicate-deployment",
        _append("deployments", {"name": "medium", "upstream": "simulator", "model": "m2"}),
        "deployments[5] (medium): defined twice",
    ),
    (
        "duplicate-member",
        _append("members", {"email": "demo@example.com", "team": "demo"}),
        "members[1] (demo@example.com): defined twice",
    ),
    # shape
    ("unknown-section", _replace_section("widgets", [{"name": "w"}]), "unknown section(s) widgets"),
    ("entry-not-a-table", _replace_section("routes", ["smart"]), "routes[0] must be a table"),
]
BAD_IDS = [case[0] for case in BAD]


@pytest.mark.parametrize(("label", "change", "message"), BAD, ids=BAD_IDS)
def test_bad_entry_raises_config_error_naming_it(
    label: str, change: Callable[[Raw], None], message: str
) -> None:
    raw = demo()
    change(raw)
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    assert message in str(info.value)
    assert snapshot() == snapshot_empty()


@pytest.mark.parametrize(("label", "change", "message"), BAD, ids=BAD_IDS)
def test_bad_file_changes_nothing_even_after_valid_entries(
    tmp_path: Path, label: str, change: Callable[[Raw], None], message: str
) -> None:
    apply_raw(demo())
    before = snapshot()
    raw = demo()
    # Valid changes and additions that come before the bad entry in the file.
    raw["upstreams"][0]["read_timeout"] = 99
    raw["upstreams"].append({"name": "extra", "base_url": "https://extra.example.com/v1"})
    raw["deployments"][0]["max_concurrency"] = 2
    raw["routes"][0]["chain"] = ["small", "medium", "big"]
    raw["teams"].append({"slug": "second", "name": "Second"})
    change(raw)
    path = write(tmp_path, raw)

    with pytest.raises(CommandError) as info:
        call_command("apply_config", str(path), stdout=io.StringIO())

    assert message in str(info.value)
    assert str(path) in str(info.value)
    assert snapshot() == before


def test_bad_entry_is_reported_even_when_it_is_the_last_in_an_empty_database(
    tmp_path: Path,
) -> None:
    raw = demo()
    raw["members"].append({"email": "late@example.com", "team": "demo", "role": "boss"})
    with pytest.raises(ConfigError, match=r"members\[1\] \(late@example.com\): 'role'"):
        load_config(write(tmp_path, raw))
    with pytest.raises(CommandError):
        call_command("apply_config", str(write(tmp_path, raw)), stdout=io.StringIO())
    assert snapshot() == snapshot_empty()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[upstreams]\nname = 'x'\n", "is not valid TOML"),
        ("[[upstreams]]\nname = \n", "is not valid TOML"),
        ("[[upstreams]]\nname = 'a'\nname = 'b'\n", "is not valid TOML"),
        ("upstreams = 3\n", "upstreams must be an array of tables"),
        ("[upstreams]\nname = 'x'\n", "upstreams must be an array of tables"),
        ("[[widgets]]\nname = 'x'\n", "unknown section(s) widgets"),
        ("title = 'sluice'\n", "unknown section(s) title"),
    ],
)
def test_unreadable_file_raises_config_error_and_command_error(
    tmp_path: Path, text: str, message: str
) -> None:
    apply_raw(demo())
    before = snapshot()
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert message in str(info.value)
    with pytest.raises(CommandError, match=r"bad\.toml"):
        call_command("apply_config", str(path), stdout=io.StringIO())
    assert snapshot() == before


def test_missing_file_raises_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(missing)
    with pytest.raises(CommandError, match=r"nope\.toml"):
        call_command("apply_config", str(missing), stdout=io.StringIO())


def test_empty_file_is_valid_and_changes_nothing(tmp_path: Path) -> None:
    apply_raw(demo())
    before = snapshot()
    path = tmp_path / "empty.toml"
    path.write_text("# nothing here\n")
    report = apply_config(load_config(path))
    assert not report.changed
    assert not report.unchanged
    assert snapshot() == before


def test_failure_during_apply_rolls_back_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """The file is applied in one transaction: a write that fails late undoes the earlier ones."""
    import routing.catalog.config_file

    def broken_member_ensure(**kwargs: Any) -> Member:
        raise RuntimeError("database blip")

    monkeypatch.setattr(routing.catalog.config_file, "member_ensure", broken_member_ensure)
    config = validate_config(demo())
    with pytest.raises(RuntimeError, match="database blip"):
        apply_config(config)
    assert snapshot() == snapshot_empty()


def test_integer_too_large_for_the_database_is_a_config_error() -> None:
    raw = demo()
    raw["deployments"][1]["max_concurrency"] = 2**63
    with pytest.raises(ConfigError, match=r"deployments\[1\] \(medium\)"):
        apply_config(validate_config(raw))


def test_limits_in_the_file_replace_a_targets_limits() -> None:
    raw = demo()
    apply_raw(raw)
    limit = Limit.objects.get(scope="member")
    assert (limit.requests_per_minute, limit.max_concurrency) == (600, 16)
    raw["limits"][0] = {"scope": "member", "name": "demo@example.com", "tokens_per_minute": 9}
    assert apply_raw(raw).updated["limits"] == 1
    limit.refresh_from_db()
    assert (limit.requests_per_minute, limit.tokens_per_minute) == (None, 9)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"scope": "galaxy", "name": "demo"}, "'scope' must be one of"),
        ({"scope": "team", "name": "nope"}, "limits[0] (nope): unknown team 'nope'"),
        ({"scope": "key", "name": "sk-sluice-000000000000"}, "unknown key"),
        ({"scope": "team", "name": "demo", "requests_per_minute": -1}, "between 0 and"),
        ({"scope": "team", "name": "demo", "cost_per_month": 1.23456}, "at most 4 decimals"),
    ],
)
def test_bad_limit_entries_are_refused(entry: dict, message: str) -> None:
    raw = demo()
    raw["limits"] = [entry]
    with pytest.raises(ConfigError, match=re.escape(message)):
        apply_raw(raw)
