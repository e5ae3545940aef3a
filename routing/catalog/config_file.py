"""Configuration as code: a TOML file applied to the database, idempotently.

Sections are arrays of tables: `upstreams`, `deployments`, `routes`, `teams`,
`applications`, `members`; and one table, `[sso]`, the console's OpenID provider
(accounts/sso_section.py, docs/sso.md). The whole file is checked before anything is
written, and it is applied in one transaction, so a bad file changes nothing. Objects the
file does not mention are left as they are. Upstream secrets are referenced by environment
variable name (`api_key_env`), never written in the file or the database.
"""

import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import models, transaction

from accounts import validators
from accounts.models import (
    ApiKey,
    Application,
    Fallback,
    Member,
    PriorityClass,
    Team,
)
from accounts.services import member_ensure
from accounts.sso_rules import RuleError
from accounts.sso_section import sso_section_check
from accounts.sso_services import sso_config_apply
from core.refresh import CATALOG, KEYS, LIMITS, invalidate
from quotas.models import Limit, Scope
from quotas.services import limit_target
from quotas.validators import LIMIT_FIELDS, limit_value_check
from routing.models import Deployment, Route, RouteDeployment, Upstream


class ConfigError(Exception):
    """The file is not acceptable; the message names the bad entry."""


@dataclass
class ApplyReport:
    created: Counter[str] = field(default_factory=Counter)
    updated: Counter[str] = field(default_factory=Counter)
    unchanged: Counter[str] = field(default_factory=Counter)

    def add(self, kind: str, state: str) -> None:
        getattr(self, state)[kind] += 1

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated)

    def summary(self) -> str:
        def fmt(counter: Counter[str]) -> str:
            return ", ".join(f"{n} {kind}" for kind, n in sorted(counter.items())) or "nothing"

        return (
            f"created: {fmt(self.created)}; updated: {fmt(self.updated)}; "
            f"unchanged: {fmt(self.unchanged)}"
        )


# section -> field -> (accepted types, required, default)
_Field = tuple[tuple[type, ...], bool, Any]
_NUM = (int, float)
_SCHEMA: dict[str, dict[str, _Field]] = {
    "upstreams": {
        "name": ((str,), True, None),
        "kind": ((str,), False, Upstream.Kind.OPENAI),
        "base_url": ((str,), True, None),
        "api_key_env": ((str,), False, ""),
        "connect_timeout": (_NUM, False, 5.0),
        "read_timeout": (_NUM, False, 60.0),
        "forward_openai_headers": ((bool,), False, False),
        "http2": ((bool,), False, False),
    },
    "deployments": {
        "name": ((str,), True, None),
        "upstream": ((str,), True, None),
        "model": ((str,), True, None),
        "tier": ((str,), False, "standard"),
        "max_concurrency": ((int,), False, 8),
        "context_window": ((int,), False, 128_000),
        "input_price_per_million": (_NUM, False, 0),
        "output_price_per_million": (_NUM, False, 0),
        "enabled": ((bool,), False, True),
        "breaker_threshold": ((int,), False, 3),
        "breaker_cooldown": (_NUM, False, 300.0),
        "retry_budget": (_NUM, False, 0.1),
        "interactive_reserve": (_NUM, False, 0.2),
    },
    "routes": {
        "name": ((str,), True, None),
        "chain": ((list,), True, None),
        "timeout_seconds": (_NUM, False, 60.0),
        "max_attempts": ((int,), False, 5),
        "backoff_base": (_NUM, False, 1.0),
        "backoff_cap": (_NUM, False, 30.0),
        "retry_after_cap": (_NUM, False, 30.0),
        "translation": ((str,), False, "degrade"),
    },
    "teams": {
        "slug": ((str,), True, None),
        "name": ((str,), False, None),
        "time_zone": ((str,), False, "UTC"),
        "batch_windows": ((str, list), False, ""),
    },
    "applications": {
        "slug": ((str,), True, None),
        "name": ((str,), False, None),
        "team": ((str,), True, None),
        "routes": ((list,), False, []),
        "default_priority": ((str,), False, PriorityClass.INTERACTIVE),
        "fallback": ((str,), False, Fallback.ANY),
        "default_max_tokens": ((int,), False, 1024),
        "max_tokens_ceiling": ((int,), False, None),
        "clamp_max_tokens": ((bool,), False, True),
        "max_n": ((int,), False, None),
        "batch_windows": ((str, list), False, ""),
        "cache_ttl_seconds": ((int,), False, 0),
    },
    "limits": {
        "scope": ((str,), True, None),
        "name": ((str,), True, None),
        "requests_per_minute": ((int,), False, None),
        "tokens_per_minute": ((int,), False, None),
        "max_concurrency": ((int,), False, None),
        "tokens_per_day": ((int,), False, None),
        "tokens_per_month": ((int,), False, None),
        "cost_per_month": (_NUM, False, None),
    },
    "members": {
        "email": ((str,), True, None),
        "team": ((str,), True, None),
        "role": ((str,), False, Member.Role.MEMBER),
    },
}
_KEY_FIELD = {
    "upstreams": "name",
    "deployments": "name",
    "routes": "name",
    "teams": "slug",
    "applications": "slug",
    "members": "email",
    "limits": "name",
}


_SLUG_KEYED = {"upstreams", "deployments", "teams", "applications"}


def api_key_env_allowed(name: str) -> bool:
    """Whether `name` may hold an upstream key: it matches SLUICE_UPSTREAM_KEY_ENV (names,
    or prefixes ending in `*`; default `SLUICE_UPSTREAM_*,OPENAI_API_KEY,ANTHROPIC_API_KEY`)
    and is none of Sluice's own secrets. Anyone who may apply config chooses where the key
    is sent, so this keeps them from sending DATABASE_URL or SLUICE_SECRET_KEY upstream."""
    if not validators.ENV_NAME.fullmatch(name) or name in validators.OWN_SECRETS:
        return False
    for allowed in settings.SLUICE_UPSTREAM_KEY_ENV:
        if name == allowed or (allowed.endswith("*") and name.startswith(allowed[:-1])):
            return True
    return False


_PRICE_STEP = Decimal("0.000001")  # the database keeps 6 decimals


def load_config(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    try:
        raw = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    return validate_config(raw)


def validate_config(raw: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    unknown = set(raw) - set(_SCHEMA) - {"sso"}
    if unknown:
        raise ConfigError(
            f"unknown section(s) {', '.join(sorted(unknown))}; expected {', '.join(_SCHEMA)} or sso"
        )
    config: dict[str, list[dict[str, Any]]] = {"sso": []}
    if "sso" in raw:
        try:
            config["sso"] = [sso_section_check(raw["sso"])]
        except RuleError as exc:
            raise ConfigError(str(exc)) from None
    for section, fields in _SCHEMA.items():
        entries = raw.get(section, [])
        if not isinstance(entries, list):
            raise ConfigError(f"{section} must be an array of tables ([[{section}]])")
        seen: set[str] = set()
        config[section] = []
        for i, entry in enumerate(entries):
            clean = _check_entry(section, i, entry, fields)
            key = clean[_KEY_FIELD[section]]
            if section == "limits":
                key = f"{clean['scope']} {key}"  # one name may have limits in two scopes
                key = key.lower() if clean["scope"] == "member" else key
            if key in seen:
                raise ConfigError(f"{section}[{i}] ({key}): defined twice")
            seen.add(key)
            config[section].append(clean)
    _check_references(config)
    return config


def _check_entry(section: str, i: int, entry: Any, fields: dict[str, _Field]) -> dict[str, Any]:
    where = f"{section}[{i}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a table")
    key = entry.get(_KEY_FIELD[section])
    if isinstance(key, str):
        where = f"{where} ({key})"
    extra = set(entry) - set(fields)
    if extra:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(extra))}")
    clean: dict[str, Any] = {}
    for name, (types, required, default) in fields.items():
        if name not in entry:
            if required:
                raise ConfigError(f"{where}: missing required field '{name}'")
            clean[name] = default
            continue
        value = entry[name]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            expected = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"{where}: '{name}' must be {expected}, not {value!r}")
        if isinstance(value, str) and required and not value.strip():
            raise ConfigError(f"{where}: '{name}' must not be empty")
        clean[name] = value
    _check_values(where, section, clean)
    return clean


def _check_values(where: str, section: str, e: dict[str, Any]) -> None:
    def fail(message: str) -> None:
        raise ConfigError(f"{where}: {message}")

    def check(name: str, rule: Callable[[Any], Any]) -> Any:
        """A rule shared with the services (accounts/validators.py, quotas/validators.py)."""
        try:
            return rule(e[name])
        except validators.Invalid as exc:
            fail(exc.message(f"'{name}'"))

    key = e[_KEY_FIELD[section]]
    if section in _SLUG_KEYED:
        check(_KEY_FIELD[section], validators.slug_check)
    if len(key) > 150:
        fail(f"'{_KEY_FIELD[section]}' must be at most 150 characters")
    if section == "upstreams":
        url = urlsplit(e["base_url"])
        if url.scheme not in ("http", "https") or not url.netloc:
            fail(f"'base_url' must be an http(s) URL, not {e['base_url']!r}")
        if e["kind"] not in Upstream.Kind.values:
            fail(f"'kind' must be one of {', '.join(Upstream.Kind.values)}")
        if not all(0 < e[t] <= 3600 for t in ("connect_timeout", "read_timeout")):
            fail("timeouts must be between 0 and 3600 seconds")
        if e["api_key_env"] and not validators.ENV_NAME.fullmatch(e["api_key_env"]):
            fail("'api_key_env' is the NAME of an environment variable, e.g. OPENAI_API_KEY")
        if e["api_key_env"] and not api_key_env_allowed(e["api_key_env"]):
            fail(
                f"'api_key_env' {e['api_key_env']!r} is not allowed: name a variable that "
                f"matches SLUICE_UPSTREAM_KEY_ENV ({', '.join(settings.SLUICE_UPSTREAM_KEY_ENV)})"
            )
    elif section == "deployments":
        if not 1 <= e["max_concurrency"] <= 100_000:
            fail("'max_concurrency' must be between 1 and 100000")
        if not 1 <= e["context_window"] <= 100_000_000:
            fail("'context_window' must be between 1 and 100000000 tokens")
        if not 0 <= e["breaker_threshold"] <= 1000:
            fail("'breaker_threshold' must be between 0 (breaker off) and 1000")
        if not 0 < e["breaker_cooldown"] <= 86_400:
            fail("'breaker_cooldown' must be between 0 and 86400 seconds")
        if not 0 <= e["retry_budget"] <= 1:
            fail("'retry_budget' must be a share between 0 and 1")
        if not 0 <= e["interactive_reserve"] <= 0.99:
            fail("'interactive_reserve' must be a share between 0 and 0.99")
        for price in ("input_price_per_million", "output_price_per_million"):
            value = Decimal(str(e[price]))
            if not 0 <= value <= 1_000_000 or value != value.quantize(_PRICE_STEP):
                fail(f"'{price}' must be between 0 and 1000000 with at most 6 decimals")
    elif section in ("routes", "applications"):
        items = e["chain"] if section == "routes" else e["routes"]
        if not all(isinstance(x, str) for x in items):
            fail("lists must hold names (strings)")
        if len(set(items)) != len(items):
            fail("a name appears twice in the list")
        if section == "routes":
            if not items:
                fail("'chain' must name at least one deployment")
            if not 0 < e["timeout_seconds"] <= 3600:
                fail("'timeout_seconds' must be between 0 and 3600")
            if not 1 <= e["max_attempts"] <= 20:
                fail("'max_attempts' must be between 1 and 20")
            if not 0 <= e["backoff_base"] <= e["backoff_cap"] <= 600:
                fail("backoff must satisfy 0 <= backoff_base <= backoff_cap <= 600")
            if not 0 <= e["retry_after_cap"] <= 600:
                fail("'retry_after_cap' must be between 0 and 600 seconds")
            if e["translation"] not in Route.Translation.values:
                fail(f"'translation' must be one of {', '.join(Route.Translation.values)}")
        if section == "applications":
            for name in (
                "default_priority",
                "fallback",
                "default_max_tokens",
                "max_tokens_ceiling",
                "max_n",
                "cache_ttl_seconds",
            ):
                check(name, partial(validators.application_value_check, name))
    if section in ("teams", "applications"):
        e["batch_windows"] = check("batch_windows", validators.batch_windows_check)
        if e["name"] is not None:
            check("name", validators.name_check)
    if section == "teams":
        check("time_zone", validators.time_zone_check)
    elif section == "limits":
        check("scope", partial(validators.choice_check, choices=list(Scope.values)))
        for name in LIMIT_FIELDS:
            check(name, partial(limit_value_check, name))
    elif section == "members":
        check("email", validators.email_check)
        check("role", validators.role_check)


def _check_references(config: dict[str, list[dict[str, Any]]]) -> None:
    def known(section: str, model: type[models.Model], field_name: str) -> set[str]:
        in_file = {e[_KEY_FIELD[section]] for e in config[section]}
        in_db = set(model.objects.values_list(field_name, flat=True))
        return in_file | in_db

    upstreams = known("upstreams", Upstream, "name")
    deployments = known("deployments", Deployment, "name")
    routes = known("routes", Route, "name")
    teams = known("teams", Team, "slug")
    checks = [
        ("deployments", "upstream", upstreams, "upstream"),
        ("routes", "chain", deployments, "deployment"),
        ("applications", "routes", routes, "route"),
        ("applications", "team", teams, "team"),
        ("members", "team", teams, "team"),
    ]
    members = {e["email"] for e in config["members"]} | set(
        Member.objects.values_list("user__email", flat=True)
    )
    apps = {e["slug"] for e in config["applications"]} | set(
        Application.objects.values_list("slug", flat=True)
    )
    limit_targets = {
        "team": teams,
        "application": apps,
        # A member is found by email ignoring case, as everywhere (quotas.selectors).
        "member": {email.lower() for email in members},
        "key": set(ApiKey.objects.values_list("prefix", flat=True)),
    }
    for i, e in enumerate(config["limits"]):
        name = e["name"].lower() if e["scope"] == "member" else e["name"]
        if name not in limit_targets[e["scope"]]:
            raise ConfigError(f"limits[{i}] ({e['name']}): unknown {e['scope']} {e['name']!r}")
    for sso in config["sso"]:
        for i, rule in enumerate(sso["group_rules"]):
            if rule["team"] is not None and rule["team"] not in teams:
                raise ConfigError(
                    f"sso.groups[{i}] ({rule['group']}): unknown team {rule['team']!r}"
                )
    for section, field_name, names, kind in checks:
        for i, e in enumerate(config[section]):
            values = e[field_name] if isinstance(e[field_name], list) else [e[field_name]]
            for value in values:
                if value not in names:
                    key = e[_KEY_FIELD[section]]
                    raise ConfigError(f"{section}[{i}] ({key}): unknown {kind} {value!r}")


def _sync(
    model: type[models.Model], lookup: dict[str, Any], values: dict[str, Any]
) -> tuple[Any, str]:
    """Create or update one object, saving only what differs; says which it did."""
    obj = model.objects.filter(**lookup).first()
    if obj is None:
        return model.objects.create(**lookup, **values), "created"
    changed = [name for name, value in values.items() if _differs(getattr(obj, name), value)]
    if not changed:
        return obj, "unchanged"
    for name in changed:
        setattr(obj, name, values[name])
    obj.save(update_fields=changed)
    return obj, "updated"


def _differs(current: Any, wanted: Any) -> bool:
    if current is None or wanted is None:
        return current is not wanted
    if isinstance(current, Decimal):
        return current != Decimal(str(wanted))
    if isinstance(current, models.Model):
        return current.pk != wanted.pk
    return current != wanted


@transaction.atomic
def apply_config(config: dict[str, list[dict[str, Any]]]) -> ApplyReport:
    report = ApplyReport()
    for e in config["upstreams"]:
        values = {
            k: e[k] for k in ("kind", "base_url", "api_key_env", "forward_openai_headers", "http2")
        }
        values |= {
            "connect_timeout": float(e["connect_timeout"]),
            "read_timeout": float(e["read_timeout"]),
        }
        report.add("upstreams", _sync(Upstream, {"name": e["name"]}, values)[1])
    for e in config["deployments"]:
        values = {k: v for k, v in e.items() if k not in ("name", "upstream")}
        values["upstream"] = Upstream.objects.get(name=e["upstream"])
        for price in ("input_price_per_million", "output_price_per_million"):
            values[price] = Decimal(str(values[price]))
        report.add("deployments", _sync(Deployment, {"name": e["name"]}, values)[1])
    for e in config["routes"]:
        values = {k: v for k, v in e.items() if k not in ("name", "chain")}
        route, state = _sync(Route, {"name": e["name"]}, values)
        wanted = [Deployment.objects.get(name=n).pk for n in e["chain"]]
        current = list(route.chain.order_by("position").values_list("deployment_id", flat=True))
        if current != wanted:
            route.chain.all().delete()
            RouteDeployment.objects.bulk_create(
                RouteDeployment(route=route, deployment_id=pk, position=i)
                for i, pk in enumerate(wanted)
            )
            state = "updated" if state == "unchanged" else state
        report.add("routes", state)
    for e in config["teams"]:
        values = {
            "name": e["name"] or e["slug"],
            "time_zone": e["time_zone"],
            "batch_windows": e["batch_windows"],
        }
        report.add("teams", _sync(Team, {"slug": e["slug"]}, values)[1])
    for e in config["applications"]:
        app, state = _sync(
            Application,
            {"slug": e["slug"]},
            {
                "name": e["name"] or e["slug"],
                "team": Team.objects.get(slug=e["team"]),
                "default_priority": e["default_priority"],
                "fallback": e["fallback"],
                **{
                    k: e[k]
                    for k in (
                        "default_max_tokens",
                        "max_tokens_ceiling",
                        "clamp_max_tokens",
                        "max_n",
                        "batch_windows",
                        "cache_ttl_seconds",
                    )
                },
            },
        )
        wanted_routes = set(Route.objects.filter(name__in=e["routes"]).values_list("pk", flat=True))
        if set(app.routes.values_list("pk", flat=True)) != wanted_routes:
            app.routes.set(wanted_routes)
            state = "updated" if state == "unchanged" else state
        report.add("applications", state)
    for e in config["members"]:
        team = Team.objects.get(slug=e["team"])
        existing = Member.objects.filter(user__email=e["email"]).first()
        if existing and existing.team_id == team.pk and existing.role == e["role"]:
            report.add("members", "unchanged")
            continue
        member_ensure(email=e["email"], team=team, role=e["role"])
        report.add("members", "updated" if existing else "created")
    for e in config["limits"]:
        # The file says all of a target's limits: a value it leaves out is no limit.
        values = {name: e[name] or None for name in LIMIT_FIELDS}
        if values["cost_per_month"] is not None:
            values["cost_per_month"] = Decimal(str(values["cost_per_month"]))
        lookup = {"scope": e["scope"], **limit_target(Scope(e["scope"]), e["name"])}
        report.add("limits", _sync(Limit, lookup, values)[1])
    for fields in config["sso"]:
        report.add("sso", sso_config_apply(fields))
    # Chains are written in bulk (no signals): tell the workers here.
    invalidate(KEYS, LIMITS, CATALOG)
    return report
