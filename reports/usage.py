"""The usage report: who used what, read from the rollups only, so a year of data answers
as fast as a day: whole UTC days from the daily rollup, the ragged edges of a period (a team's
day rarely starts at 00:00 UTC) from the hourly one, so the answer is exactly the hourly
rollups' (quotas/rollup_split.py).

Periods are taken in a time zone (the team's) and rounded to the rollups' whole UTC hours
(a zone with a half-hour offset starts and ends its day at the next whole hour). Errors by
class count upstream attempts that failed that way on the row's deployment (a call that met
two full deployments counts two capacity errors); `refused` counts calls Sluice's own limits
turned away. p50/p95 latency come from each row's histogram (calls that reached an
upstream), interpolated within a bucket.
"""

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Aggregate, F, Q, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncHour, TruncWeek

from accounts.models import ApiKey, Application, Member, Team
from accounts.selectors import Viewer
from quotas.models import (
    LATENCY_BUCKETS_MS,
    LATENCY_FIELDS,
    DailyUsageRollup,
    UsageRollup,
)
from quotas.rollup_split import Split, split_period
from quotas.selectors import rollups_visible_to

GROUPS = {
    "team": "team_id",
    "application": "application_id",
    "member": "member_id",
    "key": "key_prefix",
    "route": "route",
    "deployment": "deployment",
}
PERIODS = ("day", "week", "month", "custom")
COUNTS = (
    "requests",
    "errors",
    "capacity_errors",
    "rate_limit_errors",
    "server_errors",
    "timeouts",
    "rejected",
    "fallbacks",
    "tokens_in",
    "tokens_out",
    "cost",
    *LATENCY_FIELDS,
)
# The CSV's and the page's columns, in order: (attribute, header).
COLUMNS = (
    ("calls", "calls"),
    ("success", "success"),
    ("capacity_errors", "capacity errors"),
    ("rate_limit_errors", "rate-limit errors"),
    ("server_errors", "server errors"),
    ("timeouts", "timeouts"),
    ("rejected", "refused by limits"),
    ("fallbacks", "fallbacks"),
    ("tokens_in", "tokens in"),
    ("tokens_out", "tokens out"),
    ("cost", "cost (USD)"),
    ("p50_ms", "p50 latency (ms)"),
    ("p95_ms", "p95 latency (ms)"),
)


# SQLite sums decimals as floats (0.00623924999999999 for 0.00623925): back to the
# column's scale, so a sum is the same whichever rows and tables it was added from.
_CENT_FRACTION = Decimal(1).scaleb(-UsageRollup._meta.get_field("cost").decimal_places)


def money(value: Decimal | float | None) -> Decimal:
    """A summed cost at the scale the rollups keep it."""
    return Decimal(value or 0).quantize(_CENT_FRACTION)


class ReportError(ValueError):
    """A report asked for with parameters that make no sense (shown to the user)."""


@dataclass(frozen=True)
class Period:
    start: datetime  # inclusive, aware
    end: datetime  # exclusive, aware
    zone: ZoneInfo
    label: str


def period_for(
    *,
    period: str,
    zone: ZoneInfo,
    now: datetime,
    since: date | None = None,
    until: date | None = None,
) -> Period:
    """Today, this week (from Monday), this month (to now) or the days since..until
    (inclusive), in `zone`."""
    local_now = now.astimezone(zone)
    today = local_now.date()
    if period == "day":
        first, last = today, today
    elif period == "week":
        first, last = today - timedelta(days=today.weekday()), today
    elif period == "month":
        first, last = today.replace(day=1), today
    elif period == "custom":
        if since is None or until is None:
            raise ReportError("A custom period needs both a first and a last day.")
        if until < since:
            raise ReportError("The last day comes before the first.")
        if (until - since).days > 3660:
            raise ReportError("A period may cover at most ten years.")
        first, last = since, until
    else:
        raise ReportError(f"Unknown period {period!r}: use one of {', '.join(PERIODS)}.")
    start = datetime.combine(first, time(), zone)
    end = datetime.combine(last + timedelta(days=1), time(), zone)
    label = f"{first:%Y-%m-%d}" if first == last else f"{first:%Y-%m-%d} to {last:%Y-%m-%d}"
    return Period(start, end, zone, f"{label} ({zone.key})")


@dataclass(frozen=True)
class Part:
    """One table's share of a period: its rows in scope, and whether they are days."""

    rows: QuerySet[Any]
    daily: bool


def _any_range(column: str, ranges: list[tuple[Any, Any]]) -> Q:
    found = Q()
    for first, end in ranges:
        found |= Q(**{f"{column}__gte": first, f"{column}__lt": end})
    return found


def _parts(
    viewer: Viewer,
    period: Period,
    *,
    boundaries: Iterable[datetime] = (),
    team_id: int | None = None,
    application_id: int | None = None,
    member_id: int | None = None,
) -> list[Part]:
    """The period's rollups in the viewer's scope: whole UTC days that no boundary cuts from
    the daily table, the rest from the hourly one. An hourly row belongs to the period its
    hour starts in."""
    split: Split = split_period(period.start, period.end, boundaries)
    filters = {
        name: value
        for name, value in (
            ("team_id", team_id),
            ("application_id", application_id),
            ("member_id", member_id),
        )
        if value is not None
    }
    parts = []
    if split.hours:
        hourly = rollups_visible_to(viewer, UsageRollup).filter(_any_range("hour", split.hours))
        parts.append(Part(hourly.filter(**filters), daily=False))
    if split.days:
        daily = rollups_visible_to(viewer, DailyUsageRollup).filter(_any_range("day", split.days))
        parts.append(Part(daily.filter(**filters), daily=True))
    return parts


def _summed(
    parts: Iterable[QuerySet[Any]], by: tuple[str, ...], sums: dict[str, Aggregate]
) -> list[dict[str, Any]]:
    """`values(*by).annotate(**sums)` over each part, added up per `by` (None sums as 0)."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rows in parts:
        for found in rows.values(*by).annotate(**sums).order_by():
            key = tuple(found[c] for c in by)
            into = merged.get(key)
            if into is None:
                merged[key] = found
            else:
                for name in sums:
                    if found[name] is not None:
                        into[name] = found[name] + (into[name] or 0)
    return list(merged.values())


def percentile_ms(histogram: list[int], q: float) -> float | None:
    """The q-quantile (0..1) of a latency histogram over LATENCY_BUCKETS_MS, interpolated
    linearly within its bucket; the open last bucket answers its lower bound. None when
    the histogram is empty."""
    total = sum(histogram)
    if not total:
        return None
    rank = q * total
    seen = 0
    lower = 0.0
    for bound, count in zip(LATENCY_BUCKETS_MS, histogram, strict=True):
        if count and seen + count >= rank:
            if bound is None:
                return lower
            return lower + (bound - lower) * max(0.0, rank - seen) / count
        seen += count
        lower = float(bound) if bound is not None else lower
    return lower


@dataclass
class UsageRow:
    key: Any
    label: str
    requests: int = 0
    errors: int = 0
    capacity_errors: int = 0
    rate_limit_errors: int = 0
    server_errors: int = 0
    timeouts: int = 0
    rejected: int = 0
    fallbacks: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: Decimal = Decimal(0)
    latency: list[int] = field(default_factory=lambda: [0] * len(LATENCY_FIELDS))

    @property
    def calls(self) -> int:
        return self.requests

    @property
    def success(self) -> int:
        return self.requests - self.errors

    @property
    def p50_ms(self) -> float | None:
        return percentile_ms(self.latency, 0.5)

    @property
    def p95_ms(self) -> float | None:
        return percentile_ms(self.latency, 0.95)

    def add(self, other: "UsageRow") -> None:
        for name in COUNTS:
            if name in LATENCY_FIELDS:
                continue
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.latency = [a + b for a, b in zip(self.latency, other.latency, strict=True)]

    def cells(self) -> list[Any]:
        return [getattr(self, attr) for attr, _ in COLUMNS]


@dataclass
class UsageReport:
    group_by: str
    period: Period
    rows: list[UsageRow]
    totals: UsageRow


def _labels(group_by: str, keys: list[Any]) -> dict[Any, str]:
    ids = [k for k in keys if k is not None]
    if group_by == "team":
        return dict(Team.objects.filter(pk__in=ids).values_list("pk", "slug"))
    if group_by == "application":
        return dict(Application.objects.filter(pk__in=ids).values_list("pk", "slug"))
    if group_by == "member":
        return dict(Member.objects.filter(pk__in=ids).values_list("pk", "user__email"))
    if group_by == "key":
        return {
            p: f"{p} ({n})" if n else p
            for p, n in ApiKey.objects.filter(prefix__in=ids).values_list("prefix", "name")
        }
    return {}


def _empty_label(group_by: str) -> str:
    return {"deployment": "(none: not served)", "route": "(none)"}.get(group_by, "(deleted)")


def _sums() -> dict[str, Aggregate]:
    return {f"s_{name}": Sum(name) for name in COUNTS}


def _row_from(key: Any, label: str, values: dict[str, Any]) -> UsageRow:
    row = UsageRow(key=key, label=label)
    for name in COUNTS:
        if name in LATENCY_FIELDS:
            continue
        value = values[f"s_{name}"]
        setattr(row, name, money(value) if name == "cost" else int(value or 0))
    row.latency = [int(values[f"s_{name}"] or 0) for name in LATENCY_FIELDS]
    return row


def usage_report(
    *,
    viewer: Viewer,
    group_by: str,
    period: Period,
    team_id: int | None = None,
    application_id: int | None = None,
    member_id: int | None = None,
) -> UsageReport:
    """One row per team / application / member / key / route / deployment, most calls
    first, and the totals: the sum of the rows (so they agree to the cent)."""
    column = GROUPS.get(group_by)
    if column is None:
        raise ReportError(f"Unknown grouping {group_by!r}: use one of {', '.join(GROUPS)}.")
    parts = _parts(
        viewer, period, team_id=team_id, application_id=application_id, member_id=member_id
    )
    found = _summed((p.rows for p in parts), (column,), _sums())
    labels = _labels(group_by, [v[column] for v in found])
    rows = [
        _row_from(
            v[column],
            labels.get(v[column]) or (str(v[column]) if v[column] else _empty_label(group_by)),
            v,
        )
        for v in found
    ]
    rows.sort(key=lambda r: (-r.requests, r.label))
    totals = UsageRow(key=None, label="Total")
    for row in rows:
        totals.add(row)
    return UsageReport(group_by, period, rows, totals)


# --- Requested vs served -------------------------------------------------------------------


# --- Time series -----------------------------------------------------------------------------


@dataclass
class Series:
    """Per time bucket (local start) and deployment: calls, tokens, cost, capacity share."""

    buckets: list[datetime]
    deployments: list[str]
    calls: dict[str, list[int]]
    tokens: dict[str, list[int]]
    cost: dict[str, list[Decimal]]
    capacity_share: dict[str, list[float | None]]
    unit: str  # "hour", "day" or "week"


def attempts_sum() -> Sum:
    """Upstream attempts at a deployment, from its rollups, summed in the database: calls
    it answered (its latency histogram) plus the attempts that failed there by class. Bad
    requests it refused are not counted (rollups keep no class for them)."""
    names = (*LATENCY_FIELDS, "capacity_errors", "rate_limit_errors", "server_errors", "timeouts")
    total = F(names[0])
    for name in names[1:]:
        total = total + F(name)
    return Sum(total)


SERIES_SUMS = {
    "s_requests": Sum("requests"),
    "s_tokens": Sum(F("tokens_in") + F("tokens_out")),
    "s_cost": Sum("cost"),
    "s_capacity_errors": Sum("capacity_errors"),
    "s_attempts": attempts_sum(),
}


def usage_series(*, viewer: Viewer, period: Period, team_id: int | None = None) -> Series:
    """Hourly buckets for a period of up to two days, daily up to three months, else weekly
    (from Monday), in the period's zone."""
    length = period.end - period.start
    unit = (
        "hour" if length <= timedelta(days=2) else "day" if length <= timedelta(days=92) else "week"
    )
    step = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}[unit]
    buckets: list[datetime] = []
    cursor = period.start.astimezone(period.zone)
    if unit == "week":
        cursor = (cursor.replace(tzinfo=None) - timedelta(days=cursor.weekday())).replace(
            tzinfo=period.zone
        )
    while cursor < period.end:
        buckets.append(cursor)
        # Step in local wall time so days stay days across a DST change.
        cursor = (cursor.replace(tzinfo=None) + step).replace(tzinfo=period.zone)
    index = {b.replace(tzinfo=None): i for i, b in enumerate(buckets)}
    # A UTC day that no bucket boundary cuts is read from the daily rollup: in a zone
    # off UTC that is most days of weekly buckets, none of local days.
    parts = _parts(viewer, period, boundaries=buckets, team_id=team_id)
    trunc = {"hour": TruncHour, "day": TruncDay, "week": TruncWeek}[unit](
        "hour", tzinfo=period.zone
    )
    found: list[tuple[int, dict[str, Any]]] = []
    starts = [b.astimezone(UTC) for b in buckets]
    for part in parts:
        rows = part.rows.exclude(deployment="")
        if part.daily:
            for v in rows.values("day", "deployment").annotate(**SERIES_SUMS).order_by():
                day_start = datetime.combine(v["day"], time(), UTC)
                found.append((bisect_right(starts, day_start) - 1, v))
        else:
            grouped = rows.annotate(bucket=trunc).values("bucket", "deployment")
            for v in grouped.annotate(**SERIES_SUMS).order_by():
                local = v["bucket"].astimezone(period.zone).replace(tzinfo=None)
                found.append((index.get(local, -1), v))
    deployments = sorted({v["deployment"] for _, v in found})
    size = len(buckets)
    calls = {d: [0] * size for d in deployments}
    tokens = {d: [0] * size for d in deployments}
    cost = {d: [Decimal(0)] * size for d in deployments}
    attempts = {d: [0] * size for d in deployments}
    capacity = {d: [0] * size for d in deployments}
    for i, v in found:
        if i < 0:
            continue
        d = v["deployment"]
        calls[d][i] += int(v["s_requests"] or 0)
        tokens[d][i] += int(v["s_tokens"] or 0)
        cost[d][i] += money(v["s_cost"])
        attempts[d][i] += int(v["s_attempts"] or 0)
        capacity[d][i] += int(v["s_capacity_errors"] or 0)
    share = {
        d: [capacity[d][i] / attempts[d][i] if attempts[d][i] else None for i in range(size)]
        for d in deployments
    }
    return Series(buckets, deployments, calls, tokens, cost, share, unit)


def team_zone(team_id: int | None) -> ZoneInfo:
    """The team's time zone; UTC for no team or an unknown zone name."""
    name = (
        Team.objects.filter(pk=team_id).values_list("time_zone", flat=True).first()
        if team_id
        else None
    )
    try:
        return ZoneInfo(name or "UTC")
    except (KeyError, ValueError):
        return ZoneInfo("UTC")
