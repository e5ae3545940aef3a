"""The config file's `[sso]` table, checked before anything is written (docs/sso.md).
Pure: the result is what `accounts.sso_services.sso_config_apply` stores."""

from typing import Any
from urllib.parse import urlsplit

from accounts.sso_rules import RuleError, claim_path_check, rules_from
from accounts.validators import ENV_NAME, OWN_SECRETS

_FIELDS = {
    "enabled",
    "display_name",
    "issuer",
    "client_id",
    "client_secret_env",
    "scopes",
    "groups_claim",
    "redirect_uri",
    "password_login",
    "break_glass",
    "groups",
}


def _url(value: Any, name: str, *, required: bool) -> str:
    if value in (None, "") and not required:
        return ""
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise RuleError(f"sso.{name} must be an http(s) URL")
    if parts.query or parts.fragment:
        raise RuleError(f"sso.{name} must have no query or fragment")
    return value.rstrip("/") if name == "issuer" else value


def _text(raw: dict[str, Any], name: str, default: str | None = None, limit: int = 255) -> str:
    value = raw.get(name, default)
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise RuleError(f"sso.{name} must be a non-empty string (at most {limit} characters)")
    return value.strip()


def sso_section_check(raw: Any) -> dict[str, Any]:
    """The `[sso]` table as the SsoConfig row's fields; RuleError names what is wrong."""
    if not isinstance(raw, dict):
        raise RuleError("sso must be a table ([sso])")
    unknown = set(raw) - _FIELDS
    if unknown:
        raise RuleError(f"sso: unknown field(s) {', '.join(sorted(unknown))}")
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise RuleError("sso.enabled must be true or false")
    secret_env = _text(raw, "client_secret_env", limit=128)
    if not ENV_NAME.fullmatch(secret_env) or secret_env in OWN_SECRETS:
        raise RuleError(
            "sso.client_secret_env must name the environment variable holding the client "
            "secret (not the secret itself, and none of Sluice's own)"
        )
    scopes = raw.get("scopes", "openid email profile")
    if isinstance(scopes, list):
        scopes = " ".join(s for s in scopes if isinstance(s, str))
    if not isinstance(scopes, str) or "openid" not in scopes.split():
        raise RuleError('sso.scopes must include "openid"')
    password_login = raw.get("password_login", "on")
    if password_login not in ("on", "break-glass"):
        raise RuleError('sso.password_login must be "on" or "break-glass"')
    break_glass = raw.get("break_glass", [])
    if not isinstance(break_glass, list) or not all(
        isinstance(u, str) and u.strip() for u in break_glass
    ):
        raise RuleError("sso.break_glass must be a list of usernames")
    if password_login == "break-glass" and not break_glass:
        raise RuleError(
            'sso.password_login = "break-glass" needs at least one break_glass account '
            "(who signs in when the provider is down?)"
        )
    rules = rules_from(raw.get("groups", []))
    return {
        "enabled": enabled,
        "display_name": _text(raw, "display_name", "single sign-on", limit=100),
        "issuer": _url(raw.get("issuer"), "issuer", required=True),
        "client_id": _text(raw, "client_id"),
        "client_secret_env": secret_env,
        "scopes": " ".join(scopes.split()),
        "groups_claim": claim_path_check(raw.get("groups_claim", "groups")),
        "redirect_uri": _url(raw.get("redirect_uri"), "redirect_uri", required=False),
        "password_login": password_login,
        "break_glass": sorted({u.strip().lower() for u in break_glass}),
        "group_rules": [
            {"group": r.group, "team": r.team, "role": r.role, "staff": r.staff} for r in rules
        ],
    }
