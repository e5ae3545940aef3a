"""The rules for values that several entry points take: the services (which the console
and the API call), config import, and the bounds the console's forms and the API's
serializers declare. Each rule is written here once.

A check returns the clean value or raises `Invalid`, whose message each caller completes
with its own name for the field ("the slug" in a service, "'slug'" in a config file), so
every entry point keeps the wording its users know.
"""

import re
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from accounts.models import MAX_CACHE_TTL_SECONDS, Fallback, Member, PriorityClass
from accounts.windows import normalize_windows

# An environment variable's name, where config names one that holds a secret.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Sluice's own secrets: never sent anywhere as an upstream key or a provider's client secret.
OWN_SECRETS = frozenset({"DATABASE_URL", "REDIS_URL", "SLUICE_SECRET_KEY", "SLUICE_METRICS_TOKEN"})


class Invalid(ValueError):
    """A value that breaks a rule. `template` may name the field as `{label}`."""

    def __init__(self, template: str) -> None:
        super().__init__(template)
        self.template = template

    def message(self, label: str) -> str:
        return self.template.replace("{label}", label)


SLUG_MAX_LENGTH = 50
SLUG_REGEX = r"^[-a-zA-Z0-9_]+$"  # with SLUG_MAX_LENGTH: what the API's RegexField takes
_SLUG = re.compile(rf"[-a-zA-Z0-9_]{{1,{SLUG_MAX_LENGTH}}}")
NAME_MAX_LENGTH = 200  # a team's or an application's display name
EMAIL_MAX_LENGTH = 254
# Inclusive bounds of an application's numeric settings.
APPLICATION_RANGES: dict[str, tuple[int, int]] = {
    "default_max_tokens": (1, 10_000_000),
    "max_tokens_ceiling": (1, 10_000_000),
    "max_n": (1, 10_000),
    "cache_ttl_seconds": (0, MAX_CACHE_TTL_SECONDS),
}
_CHOICES: dict[str, list[str]] = {
    "default_priority": list(PriorityClass.values),
    "fallback": list(Fallback.values),
}


def slug_check(value: str) -> str:
    if not isinstance(value, str) or not _SLUG.fullmatch(value):
        raise Invalid(f"{{label}} must be 1-{SLUG_MAX_LENGTH} letters, digits, '-' or '_'")
    return value


def name_check(value: str) -> str:
    if len(value) > NAME_MAX_LENGTH:
        raise Invalid(f"{{label}} must be at most {NAME_MAX_LENGTH} characters")
    return value


def time_zone_check(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise Invalid(f"unknown time zone {value!r}") from None
    return value


def choice_check(value: Any, choices: list[str]) -> Any:
    if value not in choices:
        raise Invalid(f"{{label}} must be one of {', '.join(choices)}")
    return value


def range_check(value: Any, low: int, high: int) -> Any:
    """None passes (the setting is off); anything else must be a whole number in bounds."""
    if value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Invalid(f"{{label}} must be between {low} and {high}")
    return value


def batch_windows_check(value: Any) -> str:
    """The stored form of batch windows (accounts/windows.py)."""
    if not isinstance(value, (str, list)):
        raise Invalid("{label} must be text such as 00:00-06:00 (or 'any')")
    if isinstance(value, list) and not all(isinstance(v, str) for v in value):
        raise Invalid("{label} must hold strings")
    try:
        return normalize_windows(value)
    except ValueError as exc:
        raise Invalid(str(exc)) from exc


def application_value_check(name: str, value: Any) -> Any:
    """One of an application's settings, cleaned; unknown names pass unchanged."""
    if name in _CHOICES:
        return choice_check(value, _CHOICES[name])
    if name in APPLICATION_RANGES:
        return range_check(value, *APPLICATION_RANGES[name])
    if name == "batch_windows":
        return batch_windows_check(value)
    if name == "name" and isinstance(value, str):
        return name_check(value)
    return value


def email_check(value: str) -> str:
    if "@" not in value or len(value) > EMAIL_MAX_LENGTH:
        raise Invalid(
            f"{{label}} must be an email address of at most {EMAIL_MAX_LENGTH} characters"
        )
    return value


def role_check(value: str) -> str:
    return choice_check(value, list(Member.Role.values))
