"""Where a monthly budget is heading: spend projected to the end of its period from a daily
series. Pure (no database): quotas/selectors.py reads the series from the rollups.

The projection is what is spent so far in the period plus, for each day still to come (the
rest of today pro rata), the day's expected spend:

- the recent rate: a trimmed mean of the last RECENT_DAYS whole days (the highest and the
  lowest tenth left out, at least one of each from three days on), so a one-day spike or a
  quiet holiday does not swing it; days of the previous period count, so a new month is
  projected from the last one's rate;
- weekday and weekend rates instead, each trimmed the same way over the last PATTERN_DAYS
  whole days, when there are at least two weeks of data and the two differ by PATTERN_SHARE
  of the larger (a team that calls on working days only);
- nothing ("insufficient") with fewer than MIN_DAYS whole days since the first day that
  spent anything: a team that started yesterday has no rate yet.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta

RECENT_DAYS = 14
PATTERN_DAYS = 28
PATTERN_MIN_DAYS = 14
PATTERN_SHARE = 0.25
MIN_DAYS = 3

RECENT = "recent"  # one rate for every day
WEEKDAY = "weekday"  # a weekday rate and a weekend rate
INSUFFICIENT = "insufficient"  # not enough data yet


@dataclass(frozen=True)
class Forecast:
    period_start: date  # the first day of the period projected
    spent: float  # in the period so far, today included
    budget: float | None
    basis: str  # RECENT | WEEKDAY | INSUFFICIENT
    days_used: int  # whole days the rate was read from
    projected: float | None = None  # at the period's end; None when INSUFFICIENT
    runs_out_on: date | None = None  # the day spend reaches the budget, if in this period
    daily_rate: float | None = None  # RECENT: every day's; WEEKDAY: Monday to Friday's
    weekend_rate: float | None = None  # WEEKDAY only

    @property
    def share(self) -> float | None:
        """Projected spend as a share of the budget (1.0: exactly spent at the period's end)."""
        if self.projected is None or not self.budget:
            return None
        return self.projected / self.budget


def trimmed_mean(values: list[float]) -> float:
    """The mean without the highest and lowest tenth (at least one each from three values
    on): one spike among a week of ordinary days leaves it where the ordinary days are."""
    if not values:
        return 0.0
    ordered = sorted(values)
    cut = max(1, len(ordered) // 10) if len(ordered) >= 3 else 0
    kept = ordered[cut : len(ordered) - cut]
    return sum(kept) / len(kept)


def _is_weekend(day: date) -> bool:
    return day.weekday() >= 5


def _reached_on(
    daily: Mapping[date, float], start: date, today: date, budget: float | None
) -> date | None:
    """The day of the period, up to today, whose spend reached the budget."""
    if not budget:
        return None
    total = 0.0
    for day in sorted(d for d in daily if start <= d <= today):
        total += daily[day]
        if total >= budget:
            return day
    return None


def forecast_spend(
    daily: Mapping[date, float],
    *,
    today: date,
    day_elapsed: float,
    period_start: date,
    period_end: date,
    budget: float | None,
) -> Forecast:
    """Project spend to `period_end` (exclusive: the next period's first day).

    `daily`: spend per local day (days missing spent nothing), today's so far included;
    `day_elapsed`: how much of today has passed (0..1)."""
    spent = sum(v for d, v in daily.items() if period_start <= d <= today)
    # Whole days of history: up to yesterday, from the first day that spent anything.
    first = min((d for d, v in daily.items() if v > 0 and d < today), default=None)
    history_days = (today - first).days if first is not None else 0
    if history_days < MIN_DAYS:
        return Forecast(
            period_start=period_start,
            spent=spent,
            budget=budget,
            basis=INSUFFICIENT,
            days_used=history_days,
        )

    def whole_days(count: int) -> list[date]:
        n = min(count, history_days)
        return [today - timedelta(days=i) for i in range(1, n + 1)]

    recent = whole_days(RECENT_DAYS)
    rate = trimmed_mean([daily.get(d, 0.0) for d in recent])
    rates = {False: rate, True: rate}  # is weekend -> rate
    basis, days_used, weekend_rate = RECENT, len(recent), None
    if history_days >= PATTERN_MIN_DAYS:
        pattern = whole_days(PATTERN_DAYS)
        weekday = trimmed_mean([daily.get(d, 0.0) for d in pattern if not _is_weekend(d)])
        weekend = trimmed_mean([daily.get(d, 0.0) for d in pattern if _is_weekend(d)])
        larger = max(weekday, weekend)
        if larger > 0 and abs(weekday - weekend) >= PATTERN_SHARE * larger:
            rates = {False: weekday, True: weekend}
            basis, days_used, rate, weekend_rate = WEEKDAY, len(pattern), weekday, weekend

    runs_out = _reached_on(daily, period_start, today, budget)
    total = spent
    day, share_left = today, max(0.0, 1.0 - day_elapsed)
    while day < period_end:
        total += rates[_is_weekend(day)] * share_left
        if budget and runs_out is None and total >= budget:
            runs_out = day
        day, share_left = day + timedelta(days=1), 1.0
    return Forecast(
        period_start=period_start,
        spent=spent,
        budget=budget,
        basis=basis,
        days_used=days_used,
        projected=total if math.isfinite(total) else None,
        runs_out_on=runs_out,
        daily_rate=rate,
        weekend_rate=weekend_rate,
    )
