"""Which rollup table answers which part of a period: whole UTC days from the daily rollup,
the ragged edges from the hourly one, so the sum is exactly what the hourly rows alone give
(every hour of the period is read once, from one table or the other)."""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

_DAY = timedelta(days=1)


@dataclass(frozen=True)
class Split:
    days: list[tuple[date, date]]  # [first, end) UTC days read from the daily rollup
    hours: list[tuple[datetime, datetime]]  # [start, end) read from the hourly rollup


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), UTC)


def split_period(start: datetime, end: datetime, boundaries: Iterable[datetime] = ()) -> Split:
    """[start, end) (aware) as runs of whole UTC days inside it that no boundary (say the
    start of a chart's bucket) falls within, and the hour ranges left over."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    first = start.date() if start == _midnight(start.date()) else start.date() + _DAY
    last = end.date()  # days end before this one starts
    cut: set[date] = set()
    for boundary in boundaries:
        at = boundary.astimezone(UTC)
        if at != _midnight(at.date()):
            cut.add(at.date())
    days: list[tuple[date, date]] = []
    day = first
    while day < last:
        if day in cut:
            day += _DAY
            continue
        run = day
        while day < last and day not in cut:
            day += _DAY
        days.append((run, day))
    hours: list[tuple[datetime, datetime]] = []
    position = start
    for run, run_end in days:
        if position < _midnight(run):
            hours.append((position, _midnight(run)))
        position = _midnight(run_end)
    if position < end:
        hours.append((position, end))
    return Split(days, hours)
