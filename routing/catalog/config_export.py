"""The catalog as a TOML file `apply_config` accepts, and what applying a file would change.

Export writes every field of every upstream, deployment, route, team, application, member
and limit (keys are not configuration: a limit on a key is left out, as are keys), in a fixed
order, so applying the file to an empty database and exporting again gives the same file.
The diff applies the file inside a transaction, reads the catalog before and after, and
rolls back unless asked to keep it: exactly what `apply_config` would do, nothing guessed.
"""

import json
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import transaction

from accounts.models import Application, Member, Team
from quotas.models import Limit, Scope
from quotas.services import LIMIT_FIELDS
from routing.catalog.config_file import ApplyReport, ConfigError, apply_config, validate_config
from routing.models import Deployment, Route, Upstream

SECTIONS = ("upstreams", "deployments", "routes", "teams", "applications", "members", "limits")
_DEPLOYMENT_FIELDS = (
    "model",
    "tier",
    "max_concurrency",
    "context_window",
    "input_price_per_million",
    "output_price_per_million",
    "enabled",
    "breaker_threshold",
    "breaker_cooldown",
    "retry_budget",
    "interactive_reserve",
)
_ROUTE_FIELDS = (
    "timeout_seconds",
    "max_attempts",
    "backoff_base",
    "backoff_cap",
    "retry_after_cap",
    "translation",
)
_APP_FIELDS = (
    "default_priority",
    "fallback",
    "default_max_tokens",
    "max_tokens_ceiling",
    "clamp_max_tokens",
    "max_n",
    "cache_ttl_seconds",
)
_LIMIT_SCOPES = (Scope.TEAM, Scope.APPLICATION, Scope.MEMBER)

Entry = dict[str, Any]


def _value(v: Any) -> Any:
    return float(v) if isinstance(v, Decimal) else v


def catalog_entries() -> dict[str, dict[str, Entry]]:
    """Section -> name -> entry, in the file's shape (None for a value left out)."""
    out: dict[str, dict[str, Entry]] = {s: {} for s in SECTIONS}
    for u in Upstream.objects.order_by("name"):
        out["upstreams"][u.name] = {
            "name": u.name,
            "kind": u.kind,
            "base_url": u.base_url,
            "api_key_env": u.api_key_env,
            "connect_timeout": u.connect_timeout,
            "read_timeout": u.read_timeout,
            "forward_openai_headers": u.forward_openai_headers,
            "http2": u.http2,
        }
    for d in Deployment.objects.select_related("upstream").order_by("name"):
        out["deployments"][d.name] = {"name": d.name, "upstream": d.upstream.name} | {
            f: _value(getattr(d, f)) for f in _DEPLOYMENT_FIELDS
        }
    for r in Route.objects.prefetch_related("chain__deployment").order_by("name"):
        chain = [link.deployment.name for link in r.chain.all()]
        out["routes"][r.name] = {"name": r.name, "chain": chain} | {
            f: getattr(r, f) for f in _ROUTE_FIELDS
        }
    for t in Team.objects.order_by("slug"):
        out["teams"][t.slug] = {"slug": t.slug, "name": t.name, "time_zone": t.time_zone}
    for a in Application.objects.select_related("team").prefetch_related("routes").order_by("slug"):
        out["applications"][a.slug] = {
            "slug": a.slug,
            "name": a.name,
            "team": a.team.slug,
            "routes": sorted(r.name for r in a.routes.all()),
        } | {f: getattr(a, f) for f in _APP_FIELDS}
    for m in Member.objects.select_related("user", "team").order_by("user__email"):
        out["members"][m.user.email] = {"email": m.user.email, "team": m.team.slug, "role": m.role}
    limits = Limit.objects.filter(scope__in=_LIMIT_SCOPES).select_related(
        "application", "member__user", "team"
    )
    for lim in limits:
        if lim.scope == Scope.TEAM:
            name = lim.team.slug
        elif lim.scope == Scope.APPLICATION:
            name = lim.application.slug
        else:
            name = lim.member.user.email
        out["limits"][f"{lim.scope} {name}"] = {"scope": lim.scope, "name": name} | {
            f: _value(getattr(lim, f)) for f in LIMIT_FIELDS
        }
    order = {s.value: i for i, s in enumerate(_LIMIT_SCOPES)}
    out["limits"] = dict(
        sorted(out["limits"].items(), key=lambda kv: (order[kv[1]["scope"]], kv[1]["name"]))
    )
    return out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        # JSON's escapes are a subset of TOML basic strings'; DEL must be escaped in TOML.
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def config_export() -> str:
    """The catalog as TOML text; `apply_config` takes it back unchanged."""
    lines = [
        "# Sluice catalog, exported. Apply with: python manage.py apply_config FILE.toml",
        "# Upstream keys are named by environment variable, never written here; API keys",
        "# (and limits on single keys) are not configuration and are left out.",
    ]
    for section, entries in catalog_entries().items():
        for entry in entries.values():
            lines.append("")
            lines.append(f"[[{section}]]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in entry.items() if v is not None)
    return "\n".join(lines) + "\n"


@dataclass
class Change:
    section: str
    name: str
    kind: str  # created | updated
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # name -> (before, after)


@dataclass
class ConfigDiff:
    report: ApplyReport
    changes: list[Change]
    applied: bool

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def before_summary(self) -> list[str]:
        return [
            f"{c.section} {c.name}: " + ", ".join(f"{k}={v[0]!r}" for k, v in c.fields.items())
            for c in self.changes
            if c.kind == "updated"
        ]

    def after_summary(self) -> list[str]:
        return [
            f"{c.kind} {c.section} {c.name}"
            + (": " + ", ".join(f"{k}={v[1]!r}" for k, v in c.fields.items()) if c.fields else "")
            for c in self.changes
        ]


class _DryRun(Exception):
    pass


def parse_config(text: str) -> dict[str, list[Entry]]:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}") from None
    return validate_config(raw)


def config_diff(text: str, *, apply: bool) -> ConfigDiff:
    """What applying `text` changes, object by object; kept only when `apply` is true.
    The whole file is validated first (ConfigError), so a bad file changes nothing."""
    config = parse_config(text)
    before = catalog_entries()
    result: dict[str, Any] = {}
    try:
        with transaction.atomic():
            result["report"] = apply_config(config)
            result["after"] = catalog_entries()
            if not apply:
                raise _DryRun
    except _DryRun:
        pass
    after = result["after"]
    changes = []
    for section in SECTIONS:
        for name, entry in after[section].items():
            old = before[section].get(name)
            if old is None:
                changes.append(Change(section, name, "created"))
                continue
            fields = {k: (old.get(k), v) for k, v in entry.items() if old.get(k) != v}
            if fields:
                changes.append(Change(section, name, "updated", fields))
    return ConfigDiff(report=result["report"], changes=changes, applied=apply)
