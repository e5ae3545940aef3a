"""Writes for quotas: the limits of a key, application, member or team."""

from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from accounts import policy
from accounts.models import ApiKey, Application, Member, Team
from accounts.services import SYSTEM, Actor, admin_action_record
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


def _limit_snapshot(limit: Limit | None) -> dict[str, Any] | None:
    if limit is None:
        return None
    return {
        name: (str(v) if isinstance(v, Decimal) else v)
        for name in LIMIT_FIELDS
        if (v := getattr(limit, name)) is not None
    }


def _team_of(target: dict[str, Any]) -> int | None:
    found = next(iter(target.values()))
    if isinstance(found, Team):
        return found.pk
    if isinstance(found, ApiKey):
        return found.application.team_id
    return found.team_id


MAX_LIMIT = 10**15


@transaction.atomic
def limit_set(
    *, scope: str, name: str, clear: bool = False, actor: Actor = SYSTEM, **values: Any
) -> Limit | None:
    """Set (or with `clear`, remove) limits of one key, application, member or team.
    Only the values given change; None leaves a value as it is, 0 removes that one limit.
    Workers see the change within a few seconds."""
    try:
        kind = Scope(scope)
    except ValueError:
        raise LimitError(f"scope must be one of {', '.join(Scope.values)}") from None
    target = limit_target(kind, name)
    found = next(iter(target.values()))
    policy.limit_change_check(
        actor=actor,
        scope=kind.value,
        team_id=_team_of(target),
        member_is_staff=(isinstance(found, Member) and found.user.is_staff)
        or (isinstance(found, ApiKey) and found.member.user.is_staff),
    )
    unknown = set(values) - set(LIMIT_FIELDS)
    if unknown:
        raise LimitError(f"unknown limit(s): {', '.join(sorted(unknown))}")
    for field_name, value in values.items():
        if value is None:
            continue
        if field_name == "cost_per_month":
            try:
                value = Decimal(str(value))
            except InvalidOperation:
                raise LimitError(f"{field_name} must be a number") from None
            if value != value.quantize(Decimal("0.0001")):
                raise LimitError(f"{field_name} takes at most 4 decimals")
        elif isinstance(value, bool) or not isinstance(value, int):
            raise LimitError(f"{field_name} must be a whole number")
        if not 0 <= value <= MAX_LIMIT:
            raise LimitError(f"{field_name} must be between 0 and 10^15")
    existing = Limit.objects.filter(scope=kind, **target).first()
    before = _limit_snapshot(existing)
    if clear:
        if existing is not None:
            existing.delete()
            _record(actor, kind, name, target, before, None)
        return None
    limit = existing or Limit(scope=kind, **target)
    for field_name, value in values.items():
        if value is not None:
            value = Decimal(str(value)) if field_name == "cost_per_month" else value
            setattr(limit, field_name, value or None)  # 0 removes that one limit
    limit.save()
    after = _limit_snapshot(limit)
    if after != before or existing is None:
        _record(actor, kind, name, target, before, after)
    return limit


def _record(
    actor: Actor,
    kind: Scope,
    name: str,
    target: dict[str, Any],
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    admin_action_record(
        actor=actor,
        action="limit.clear" if after is None else "limit.set",
        obj=f"{kind.value} {name}",
        object_type="limit",
        team_id=_team_of(target),
        before=before,
        after=after,
    )
