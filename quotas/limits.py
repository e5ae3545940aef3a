"""The limits that apply to a call: its key's, application's, member's and team's, read
from the database and cached briefly, so a change reaches every worker within seconds."""

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db.models import Q, Sum

from accounts.authentication import Principal
from core.db import db_read
from core.refresh import LIMITS, RefreshingCache
from quotas.models import Limit, Scope, UsageRollup


@dataclass(frozen=True)
class ScopeLimits:
    scope: str  # key | application | member | team
    target: int  # the object's id
    name: str  # for messages: the key's prefix, the slug or the email
    requests_per_minute: int | None
    tokens_per_minute: int | None
    max_concurrency: int | None
    tokens_per_day: int | None
    tokens_per_month: int | None
    cost_per_month: float | None
    # Usage already recorded in the rollups this day / month (team's time zone): where a
    # counter that Redis lost starts again.
    tokens_today: float = 0.0
    tokens_this_month: float = 0.0
    cost_this_month: float = 0.0

    def label(self) -> str:
        return f"{self.scope} {self.name}"


def period_starts(now: float, time_zone: str) -> tuple[datetime, datetime, datetime, datetime]:
    """This day's and month's start in the team's time zone, and the next ones."""
    local = datetime.fromtimestamp(now, ZoneInfo(time_zone))
    day = local.replace(hour=0, minute=0, second=0, microsecond=0)
    month = day.replace(day=1)
    # Aware datetimes add on the wall clock: the next local midnight, also across DST.
    next_day = day + timedelta(days=1)
    next_month = (month + timedelta(days=32)).replace(day=1)
    return day, next_day, month, next_month


_FIELD = {
    Scope.KEY: "api_key_id",
    Scope.APPLICATION: "application_id",
    Scope.MEMBER: "member_id",
    Scope.TEAM: "team_id",
}
_ROLLUP_FIELD = {
    Scope.APPLICATION: "application_id",
    Scope.MEMBER: "member_id",
    Scope.TEAM: "team_id",
}


def _load(principal: Principal) -> tuple[ScopeLimits, ...]:
    targets = {
        Scope.KEY: (principal.key_id, principal.prefix),
        Scope.APPLICATION: (principal.application_id, principal.application_slug),
        Scope.MEMBER: (principal.member_id, principal.member_email),
        Scope.TEAM: (principal.team_id, principal.team_slug),
    }
    query = Q()
    for scope, (target, _) in targets.items():
        query |= Q(scope=scope, **{_FIELD[scope]: target})
    found = []
    now = time.time()
    day, _, month, _ = period_starts(now, principal.team_time_zone)
    for limit in Limit.objects.filter(query):
        scope = Scope(limit.scope)
        target, name = targets[scope]
        used = {}
        if limit.tokens_per_day or limit.tokens_per_month or limit.cost_per_month:
            used = _recorded_usage(scope, target, principal.prefix, day, month)
        found.append(
            ScopeLimits(
                scope=scope.value,
                target=target,
                name=name,
                requests_per_minute=limit.requests_per_minute,
                tokens_per_minute=limit.tokens_per_minute,
                max_concurrency=limit.max_concurrency,
                tokens_per_day=limit.tokens_per_day,
                tokens_per_month=limit.tokens_per_month,
                cost_per_month=float(limit.cost_per_month) if limit.cost_per_month else None,
                **used,
            )
        )
    return tuple(found)


def _recorded_usage(
    scope: Scope, target: int, prefix: str, day: datetime, month: datetime
) -> dict[str, float]:
    rows = UsageRollup.objects.filter(
        Q(key_prefix=prefix) if scope is Scope.KEY else Q(**{_ROLLUP_FIELD[scope]: target}),
        hour__gte=month,
    )
    tokens = Sum("tokens_in") + Sum("tokens_out")
    month_usage = rows.aggregate(tokens=tokens, cost=Sum("cost"))
    day_usage = rows.filter(hour__gte=day).aggregate(tokens=tokens)
    return {
        "tokens_today": float(day_usage["tokens"] or 0),
        "tokens_this_month": float(month_usage["tokens"] or 0),
        "cost_this_month": float(month_usage["cost"] or Decimal(0)),
    }


_limits: RefreshingCache[tuple[ScopeLimits, ...]] = RefreshingCache(
    lambda: settings.SLUICE_KEY_CACHE_SECONDS, name=LIMITS
)


async def limits_for(principal: Principal) -> tuple[ScopeLimits, ...]:
    return await _limits.get(principal.key_id, lambda: db_read(_load, principal))
