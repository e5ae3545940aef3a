"""Reads for quotas: which limits a viewer may see, and how much of each is used now.

Usage comes from where the gateway counts it: requests this minute from django-ratelimit's
counter, calls in flight from the quota counters' leases (Redis with REDIS_URL, else this
process), tokens today and spend this month from the hourly rollups (indexed by scope and
hour; the audit writer adds to them within seconds of a call).
"""

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.models import Q, QuerySet, Sum
from django.db.models.functions import TruncDate, TruncDay
from django.http import HttpRequest
from django.utils import timezone
from django_ratelimit.core import get_usage

from accounts.models import ApiKey, Application, Member, Team
from accounts.selectors import (
    Viewer,
    applications_visible_to,
    keys_visible_to,
    member_by_email,
    members_visible_to,
    teams_visible_to,
)
from quotas.counters import quota_counters
from quotas.forecast import PATTERN_DAYS, Forecast, forecast_spend
from quotas.limits import period_starts
from quotas.models import Limit, RollupCounts, Scope, UsageRollup


def limits_visible_to(viewer: Viewer) -> QuerySet[Limit]:
    """Staff: every limit. Team admin: their team's, and its applications', members' and
    keys'. Member: the limits that apply to them (their own, their keys', their team's and
    their keys' applications')."""
    qs = Limit.objects.select_related(
        "team", "application__team", "member__user", "member__team", "api_key__member__user"
    )
    if viewer.is_staff:
        return qs
    if viewer.team_admin_of is not None:
        team = viewer.team_admin_of
        return qs.filter(
            Q(team_id=team)
            | Q(application__team_id=team)
            | Q(member__team_id=team)
            | Q(api_key__member__team_id=team)
        )
    if viewer.member_id is not None:
        apps = ApiKey.objects.filter(member_id=viewer.member_id).values("application_id")
        return qs.filter(
            Q(member_id=viewer.member_id)
            | Q(api_key__member_id=viewer.member_id)
            | Q(team_id=viewer.team_id)
            | Q(application_id__in=apps)
        )
    return qs.none()


@dataclass(frozen=True)
class LimitTarget:
    """What a limit applies to: the object, the Limit field naming it, its team and the
    name `limit_set` takes (prefix, slug or the member's stored email)."""

    scope: Scope
    obj: Any
    limit_field: str
    team_id: int
    name: str

    @property
    def lookup(self) -> dict[str, Any]:
        return {self.limit_field: self.obj}


def limit_target_find(scope: str, name: str, *, viewer: Viewer | None = None) -> LimitTarget | None:
    """The key (by prefix), application or team (by slug) or member (by email, ignoring
    case) a limit of `scope` named `name` applies to; only among what `viewer` sees when
    given (the console and the API), among everything without one (services, config
    import). None when there is none, or the scope is unknown."""
    name = name.strip()
    if scope == Scope.KEY:
        keys = keys_visible_to(viewer) if viewer else ApiKey.objects.select_related("member__user")
        key = keys.select_related("application").filter(prefix=name).first()
        if key is not None:
            return LimitTarget(Scope.KEY, key, "api_key", key.application.team_id, key.prefix)
    elif scope == Scope.APPLICATION:
        apps = applications_visible_to(viewer) if viewer else Application.objects.all()
        app = apps.filter(slug=name).first()
        if app is not None:
            return LimitTarget(Scope.APPLICATION, app, "application", app.team_id, app.slug)
    elif scope == Scope.MEMBER:
        members = members_visible_to(viewer) if viewer else Member.objects.select_related("user")
        member = member_by_email(members, name)
        if member is not None:
            return LimitTarget(Scope.MEMBER, member, "member", member.team_id, member.user.email)
    elif scope == Scope.TEAM:
        teams = teams_visible_to(viewer) if viewer else Team.objects.all()
        team = teams.filter(slug=name).first()
        if team is not None:
            return LimitTarget(Scope.TEAM, team, "team", team.pk, team.slug)
    return None


def limit_target_name(limit: Limit) -> str:
    """The name `limit_set` and `set_limit` take: prefix, slug or email."""
    if limit.scope == Scope.KEY:
        return limit.api_key.prefix
    if limit.scope == Scope.APPLICATION:
        return limit.application.slug
    if limit.scope == Scope.MEMBER:
        return limit.member.user.email
    return limit.team.slug


def limit_team_id(limit: Limit) -> int:
    if limit.scope == Scope.KEY:
        return limit.api_key.application.team_id
    if limit.scope == Scope.APPLICATION:
        return limit.application.team_id
    if limit.scope == Scope.MEMBER:
        return limit.member.team_id
    return limit.team_id


@dataclass
class Usage:
    requests_this_minute: int | None = None  # None: not counted (no requests-per-minute limit)
    tokens_today: int = 0
    tokens_this_month: int = 0
    cost_this_month: Decimal = Decimal(0)
    in_flight: int | None = None  # None: not counted (no concurrency limit)


@dataclass
class LimitRow:
    limit: Limit
    scope: str
    name: str
    usage: Usage
    # limit field -> (used, limit, share used 0..1); only the limits that are set
    meters: dict[str, tuple[Any, Any, float]] = field(default_factory=dict)
    # monthly budget field -> where it is heading (limit_rows(forecast=True) only)
    forecasts: dict[str, Forecast] = field(default_factory=dict)


def _target_id(limit: Limit) -> int:
    return {
        Scope.KEY: limit.api_key_id,
        Scope.APPLICATION: limit.application_id,
        Scope.MEMBER: limit.member_id,
        Scope.TEAM: limit.team_id,
    }[Scope(limit.scope)]


def _rollups(limit: Limit) -> QuerySet[UsageRollup]:
    scope = Scope(limit.scope)
    if scope is Scope.KEY:
        return UsageRollup.objects.filter(key_prefix=limit.api_key.prefix)
    return UsageRollup.objects.filter(**{f"{scope.value}_id": _target_id(limit)})


def _time_zone(limit: Limit) -> str:
    if limit.scope == Scope.KEY:
        return limit.api_key.application.team.time_zone
    if limit.scope == Scope.APPLICATION:
        return limit.application.team.time_zone
    if limit.scope == Scope.MEMBER:
        return limit.member.team.time_zone
    return limit.team.time_zone


def _requests_this_minute(limit: Limit) -> int | None:
    if not limit.requests_per_minute:
        return None
    usage = get_usage(
        HttpRequest(),
        group="sluice.rpm",  # the gateway's counter (quotas/reservation.py)
        key=lambda group, request: f"{limit.scope}:{_target_id(limit)}",
        rate=f"{limit.requests_per_minute}/m",
        increment=False,
    )
    return int(usage["count"]) if usage else 0


def limit_rows(
    limits: list[Limit], *, now: float | None = None, forecast: bool = False
) -> list[LimitRow]:
    """Each limit with its current usage (and, with `forecast`, where its monthly budgets
    are heading). Meant for one page of limits: a few indexed queries per row and one
    round trip for every row's calls in flight."""
    now = time.time() if now is None else now
    forecasts = budget_forecasts(limits, now=now) if forecast else {}
    rows = []
    for limit in limits:
        day, _, month, _ = period_starts(now, _time_zone(limit))
        rollups = _rollups(limit).filter(hour__gte=min(day, month))
        tokens = Sum("tokens_in") + Sum("tokens_out")
        month_used = rollups.filter(hour__gte=month).aggregate(tokens=tokens, cost=Sum("cost"))
        day_used = rollups.filter(hour__gte=day).aggregate(tokens=tokens)
        usage = Usage(
            requests_this_minute=_requests_this_minute(limit),
            tokens_today=int(day_used["tokens"] or 0),
            tokens_this_month=int(month_used["tokens"] or 0),
            cost_this_month=month_used["cost"] or Decimal(0),
        )
        rows.append(
            LimitRow(
                limit=limit,
                scope=limit.scope,
                name=limit_target_name(limit),
                usage=usage,
                forecasts=forecasts.get(limit.pk, {}),
            )
        )
    concurrency = [r for r in rows if r.limit.max_concurrency]
    if concurrency:
        prefix = settings.SLUICE_REDIS_PREFIX
        keys = [f"{prefix}:q:{r.scope}:{_target_id(r.limit)}:concurrency" for r in concurrency]
        counts = async_to_sync(quota_counters().in_flight)(keys)
        for row, count in zip(concurrency, counts, strict=True):
            row.usage.in_flight = count
    for row in rows:
        row.meters = _meters(row.limit, row.usage)
    return rows


def _meters(limit: Limit, usage: Usage) -> dict[str, tuple[Any, Any, float]]:
    pairs = {
        "requests_per_minute": usage.requests_this_minute,
        "tokens_per_day": usage.tokens_today,
        "tokens_per_month": usage.tokens_this_month,
        "cost_per_month": usage.cost_this_month,
        "max_concurrency": usage.in_flight,
    }
    meters = {}
    for name, used in pairs.items():
        cap = getattr(limit, name)
        if cap:
            used = used or 0
            meters[name] = (used, cap, min(1.0, float(used) / float(cap)))
    return meters


# The monthly budgets a forecast is made for, and the rollup sum each is spent in. A day's
# budget (tokens_per_day) has no daily series to project from.
BUDGET_FIELDS = {"cost_per_month": "cost", "tokens_per_month": "tokens"}


def _budgets_of(limit: Limit) -> list[str]:
    return [f for f in BUDGET_FIELDS if getattr(limit, f)]


def budget_forecasts(
    limits: Iterable[Limit], *, now: float | None = None
) -> dict[int, dict[str, Forecast]]:
    """Limit id -> monthly budget field -> its forecast (quotas/forecast.py), for the
    limits given that have a monthly budget. The daily series are read from the hourly
    rollups per local day of the target's team: one grouped query per scope and time zone,
    over the month so far and the last PATTERN_DAYS days."""
    now = time.time() if now is None else now
    groups: dict[tuple[Scope, str], list[Limit]] = {}
    for limit in limits:
        if _budgets_of(limit):
            groups.setdefault((Scope(limit.scope), _time_zone(limit)), []).append(limit)
    out: dict[int, dict[str, Forecast]] = {}
    for (scope, zone), members in groups.items():
        day, next_day, month, next_month = period_starts(now, zone)
        start = min(month, day - timedelta(days=PATTERN_DAYS))
        column = "key_prefix" if scope is Scope.KEY else f"{scope.value}_id"
        ids = {_series_id(limit): limit for limit in members}
        rows = (
            UsageRollup.objects.filter(**{f"{column}__in": list(ids)}, hour__gte=start)
            .annotate(local_day=TruncDate("hour", tzinfo=ZoneInfo(zone)))
            .values(column, "local_day")
            .annotate(tokens=Sum("tokens_in") + Sum("tokens_out"), cost=Sum("cost"))
            .order_by()
        )
        series: dict[Any, dict[str, dict[date, float]]] = {}
        for row in rows:
            by_sum = series.setdefault(row[column], {"tokens": {}, "cost": {}})
            by_sum["tokens"][row["local_day"]] = float(row["tokens"] or 0)
            by_sum["cost"][row["local_day"]] = float(row["cost"] or 0)
        elapsed = (now - day.timestamp()) / (next_day.timestamp() - day.timestamp())
        for target, limit in ids.items():
            found = series.get(target, {"tokens": {}, "cost": {}})
            out[limit.pk] = {
                name: forecast_spend(
                    found[BUDGET_FIELDS[name]],
                    today=day.date(),
                    day_elapsed=min(1.0, max(0.0, elapsed)),
                    period_start=month.date(),
                    period_end=next_month.date(),
                    budget=float(getattr(limit, name)),
                )
                for name in _budgets_of(limit)
            }
    return out


@dataclass(frozen=True)
class BudgetForecast:
    limit: Limit
    scope: str
    name: str
    budget_field: str  # cost_per_month | tokens_per_month
    forecast: Forecast

    @property
    def money(self) -> bool:
        return self.budget_field == "cost_per_month"


def budget_forecasts_visible_to(
    viewer: Viewer, *, count: int = 10, now: float | None = None
) -> list[BudgetForecast]:
    """The viewer's monthly budgets (the limits they may see) with their forecasts, the
    closest to running out first (then those without enough data); at most `count` of
    the BUDGET_SCAN most recently changed limits with a monthly budget."""
    limits = list(
        limits_visible_to(viewer)
        .select_related("api_key__application__team")
        .filter(Q(cost_per_month__isnull=False) | Q(tokens_per_month__isnull=False))
        .order_by("-updated_at", "-id")[:BUDGET_SCAN]
    )
    forecasts = budget_forecasts(limits, now=now)
    found = [
        BudgetForecast(limit, limit.scope, limit_target_name(limit), name, forecast)
        for limit in limits
        for name, forecast in forecasts.get(limit.pk, {}).items()
    ]
    found.sort(key=lambda b: -(b.forecast.share if b.forecast.share is not None else -1.0))
    return found[:count]


BUDGET_SCAN = 200


def _series_id(limit: Limit) -> Any:
    """The rollup column value a limit's usage is filed under (a key's prefix, else the id)."""
    return limit.api_key.prefix if limit.scope == Scope.KEY else _target_id(limit)


def limits_of_member(member: Member) -> QuerySet[Limit]:
    """The limits that apply to a member's calls: theirs, their keys', their team's and
    the applications' their keys use (ids by subquery: no join in the OR)."""
    keys = ApiKey.objects.filter(member=member)
    return Limit.objects.select_related(
        "team",
        "application__team",
        "member__user",
        "member__team",
        "api_key__member__user",
        "api_key__application__team",
    ).filter(
        Q(member_id=member.pk)
        | Q(api_key_id__in=keys.values("pk"))
        | Q(team_id=member.team_id)
        | Q(application_id__in=keys.values("application_id"))
    )


@dataclass(frozen=True)
class DayUsage:
    day: datetime
    calls: int
    tokens: int
    cost: Decimal
    errors: int


def member_usage(*, member: Member, days: int = 30) -> list[DayUsage]:
    """A member's calls, tokens and spend per day (UTC days) for the last `days` days,
    oldest first, days without calls included; from the rollups (member_id, hour index)."""
    today = timezone.now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(days=days - 1)
    totals: dict[datetime, list[Any]] = {
        start + timedelta(days=i): [0, 0, Decimal(0), 0] for i in range(days)
    }
    rows = (
        UsageRollup.objects.filter(member_id=member.pk, hour__gte=start)
        .annotate(day=TruncDay("hour", tzinfo=UTC))
        .values("day")
        .annotate(
            calls=Sum("requests"),
            tokens=Sum("tokens_in") + Sum("tokens_out"),
            cost=Sum("cost"),
            errors=Sum("errors"),
        )
    )
    for row in rows:  # one row per day, added up by the database
        t = totals.get(row["day"])
        if t is not None:
            t[0] += row["calls"] or 0
            t[1] += row["tokens"] or 0
            t[2] += row["cost"] or Decimal(0)
            t[3] += row["errors"] or 0
    return [DayUsage(day, *values) for day, values in totals.items()]


def rollups_visible_to(viewer: Viewer, model: type[RollupCounts] = UsageRollup) -> QuerySet[Any]:
    """Staff: every row; a team admin: their team's; a member: their own (hourly rows, or
    those of `model`)."""
    rows: QuerySet[Any] = model._default_manager.all()
    if viewer.is_staff:
        return rows
    if viewer.team_admin_of is not None:
        return rows.filter(team_id=viewer.team_admin_of)
    if viewer.member_id is not None:
        return rows.filter(member_id=viewer.member_id)
    return rows.none()
