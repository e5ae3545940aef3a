"""Writes for quotas."""

from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model

from accounts.models import ApiKey, Application, Member, Team
from quotas.models import Limit, Scope

LIMIT_FIELDS = (
    "requests_per_minute",
    "tokens_per_minute",
    "max_concurrency",
    "tokens_per_day",
    "tokens_per_month",
    "cost_per_month",
)


class LimitError(Exception):
    pass


def limit_target(scope: Scope, name: str) -> dict[str, Any]:
    found: Any
    if scope is Scope.KEY:
        found, field = ApiKey.objects.filter(prefix=name).first(), "api_key"
    elif scope is Scope.APPLICATION:
        found, field = Application.objects.filter(slug=name).first(), "application"
    elif scope is Scope.MEMBER:
        user = get_user_model().objects.filter(email=name).first()
        found, field = Member.objects.filter(user=user).first() if user else None, "member"
    else:
        found, field = Team.objects.filter(slug=name).first(), "team"
    if found is None:
        raise LimitError(f"no {scope.label.lower()} {name!r}")
    return {field: found}


def limit_set(*, scope: str, name: str, clear: bool = False, **values: Any) -> Limit | None:
    """Set (or with `clear`, remove) limits of one key, application, member or team.
    Only the values given change; None leaves a value as it is. Workers see the change
    within a few seconds."""
    try:
        kind = Scope(scope)
    except ValueError:
        raise LimitError(f"scope must be one of {', '.join(Scope.values)}") from None
    target = limit_target(kind, name)
    unknown = set(values) - set(LIMIT_FIELDS)
    if unknown:
        raise LimitError(f"unknown limit(s): {', '.join(sorted(unknown))}")
    if clear:
        Limit.objects.filter(scope=kind, **target).delete()
        return None
    for field_name, value in values.items():
        if value is not None and value < 0:
            raise LimitError(f"{field_name} must not be negative")
    limit, _ = Limit.objects.get_or_create(scope=kind, **target)
    for field_name, value in values.items():
        if value is not None:
            value = Decimal(str(value)) if field_name == "cost_per_month" else value
            setattr(limit, field_name, value or None)  # 0 removes that one limit
    limit.save()
    return limit
