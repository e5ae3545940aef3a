"""Writes for quotas: the limits of a key, application, member or team."""

from decimal import Decimal
from typing import Any

from django.db import transaction

from accounts import policy
from accounts.models import ApiKey, Member, Team
from accounts.services import SYSTEM, Actor, admin_action_record
from accounts.validators import Invalid
from quotas.models import Limit, Scope
from quotas.selectors import limit_target_find
from quotas.validators import LIMIT_FIELDS, limit_value_check


class LimitError(Exception):
    pass


def limit_target(scope: Scope, name: str) -> dict[str, Any]:
    """The Limit lookup for the target named `name` (see `limit_target_find`)."""
    found = limit_target_find(scope.value, name)
    if found is None:
        raise LimitError(f"no {scope.label.lower()} {name!r}")
    return found.lookup


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
        try:
            values[field_name] = limit_value_check(field_name, value)
        except Invalid as exc:
            raise LimitError(exc.message(field_name)) from None
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
