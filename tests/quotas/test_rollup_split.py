"""Which part of a period each rollup table answers: whole UTC days from the daily table, the
rest (ragged edges, days a chart's bucket boundary cuts) from the hourly one."""

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from quotas.rollup_split import split_period

KOLKATA = ZoneInfo("Asia/Kolkata")


def _utc(day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


def _hours_covered(start: datetime, end: datetime, boundaries=()) -> list[datetime]:
    """Every rollup hour the split reads, in order (days expanded to their 24 hours)."""
    split = split_period(start, end, boundaries)
    hours = []
    for first, last in split.days:
        day = first
        while day < last:
            hours += [
                datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(hours=h)
                for h in range(24)
            ]
            day += timedelta(days=1)
    for lo, hi in split.hours:
        at = lo.replace(minute=0) + (timedelta(hours=1) if lo.minute else timedelta())
        while at < hi:
            hours.append(at)
            at += timedelta(hours=1)
    return sorted(hours)


@pytest.mark.parametrize(
    ("start", "end", "days", "hours"),
    [
        # Whole UTC days: all from the daily table.
        (_utc(1), _utc(8), [(date(2026, 11, 1), date(2026, 11, 8))], []),
        # Kolkata days (+05:30): the edges are read by the hour.
        (
            datetime(2026, 11, 2, tzinfo=KOLKATA),
            datetime(2026, 11, 9, tzinfo=KOLKATA),
            [(date(2026, 11, 2), date(2026, 11, 8))],
            [(_utc(1, 18, 30), _utc(2)), (_utc(8), _utc(8, 18, 30))],
        ),
        # Shorter than a whole UTC day: hours only.
        (_utc(3, 5), _utc(4, 4), [], [(_utc(3, 5), _utc(4, 4))]),
        (_utc(3), _utc(3, 23), [], [(_utc(3), _utc(3, 23))]),
        (_utc(3), _utc(3), [], []),
    ],
)
def test_whole_utc_days_come_from_the_daily_table_and_the_edges_by_the_hour(
    start, end, days, hours
):
    split = split_period(start, end)
    assert (split.days, split.hours) == (days, hours)


def test_a_day_a_boundary_cuts_is_read_by_the_hour():
    # Weekly buckets from Monday in Kolkata: each boundary falls at 18:30 UTC on a Sunday.
    start = datetime(2026, 11, 2, tzinfo=KOLKATA)  # a Monday
    boundaries = [start + timedelta(weeks=w) for w in range(3)]
    split = split_period(start, start + timedelta(weeks=2), boundaries)
    assert split.days == [
        (date(2026, 11, 2), date(2026, 11, 8)),
        (date(2026, 11, 9), date(2026, 11, 15)),
    ]
    assert split.hours == [
        (_utc(1, 18, 30), _utc(2)),
        (_utc(8), _utc(9)),
        (_utc(15), _utc(15, 18, 30)),
    ]
    # Boundaries at UTC midnight cut nothing.
    assert split_period(_utc(1), _utc(8), [_utc(d) for d in range(1, 9)]).hours == []


@pytest.mark.parametrize(
    ("start", "end", "boundaries"),
    [
        (datetime(2026, 10, 20, tzinfo=KOLKATA), datetime(2026, 11, 20, tzinfo=KOLKATA), ()),
        (
            datetime(2026, 10, 20, tzinfo=ZoneInfo("America/New_York")),  # DST ends on Nov 1
            datetime(2026, 11, 20, tzinfo=ZoneInfo("America/New_York")),
            [
                datetime(2026, 10, 26, tzinfo=ZoneInfo("America/New_York")) + timedelta(weeks=w)
                for w in range(4)
            ],
        ),
        (_utc(1, 7), _utc(29, 13), [_utc(d, 12) for d in range(1, 30, 3)]),
    ],
)
def test_every_hour_of_the_period_is_read_exactly_once(start, end, boundaries):
    expected = []
    at = start.astimezone(UTC)
    at = at.replace(minute=0) + (timedelta(hours=1) if at.minute else timedelta())
    while at < end:
        expected.append(at)
        at += timedelta(hours=1)
    assert _hours_covered(start, end, boundaries) == expected
