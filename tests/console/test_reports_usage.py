"""The usage report, requested-vs-served and time series: read from the rollups, scoped per
role, totals that are exactly the sum of the rows."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db.models import Sum

from accounts.selectors import viewer_for
from quotas.models import UsageRollup
from quotas.rollup_split import Split, split_period
from reports import usage as usage_report_module
from reports.requested_vs_served import downgrades_by_application, requested_vs_served
from reports.usage import GROUPS, ReportError, percentile_ms, period_for, usage_report, usage_series
from routing.models import CallRecord, Outcome
from tests.console.people import make_people
from tests.console.report_data import call, write

NOW = datetime(2026, 11, 18, 15, 30, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture
def people(db):
    return make_people(tag="rep")


@pytest.fixture
def traffic(people):
    member, peer, rival = (people.keys[k] for k in ("member", "member_peer", "rival_member"))
    calls = []
    for i in range(12):
        at = NOW - timedelta(hours=i)
        calls.append(call(member, at, cost="0.10000001", latency_ms=80 + 50 * i))
        calls.append(
            call(peer, at, route="smart", served="small", failed_on=(("big", "capacity"),))
        )
        calls.append(call(rival, at, route="fast", served="small", tokens=(5, 7), cost="0.3"))
    calls.append(call(member, NOW, served="", outcome=Outcome.RATE_LIMITED))
    calls.append(
        call(
            peer,
            NOW,
            served="",
            outcome=Outcome.CAPACITY_EXHAUSTED,
            failed_on=(("big", "capacity"), ("small", "rate_limit")),
        )
    )
    write(calls)
    return calls


def _month():
    return period_for(period="month", zone=ZoneInfo("UTC"), now=NOW)


@pytest.mark.parametrize("group_by", list(GROUPS))
def test_totals_row_is_exactly_the_sum_of_the_rows(people, traffic, group_by):
    report = usage_report(
        viewer=viewer_for(people.users["staff"]), group_by=group_by, period=_month()
    )
    assert len(report.rows) >= 2
    for attr in (
        "calls",
        "success",
        "capacity_errors",
        "rate_limit_errors",
        "rejected",
        "fallbacks",
        "tokens_in",
        "tokens_out",
        "cost",
    ):
        assert getattr(report.totals, attr) == sum(getattr(r, attr) for r in report.rows), attr
    # And the totals agree with the call records themselves (every call in one month).
    calls = CallRecord.objects.aggregate(n=Sum("tokens_out"), c=Sum("cost"))
    assert report.totals.calls == CallRecord.objects.count() == len(traffic)
    assert report.totals.tokens_out == calls["n"]
    assert report.totals.cost == calls["c"] == Decimal("4.80148152")


def test_usage_by_member_counts_errors_by_class_and_fallbacks(people, traffic):
    report = usage_report(
        viewer=viewer_for(people.users["staff"]), group_by="member", period=_month()
    )
    rows = {r.label: r for r in report.rows}
    peer = rows[people.email("member_peer")]
    assert (peer.calls, peer.success, peer.fallbacks) == (13, 12, 12)
    assert (peer.capacity_errors, peer.rate_limit_errors) == (13, 1)
    member = rows[people.email("member")]
    assert (member.calls, member.rejected, member.tokens_in) == (13, 1, 120)
    # 12 latencies 80..630 ms: the median lies in the 250-500 ms bucket.
    assert 250 <= member.p50_ms <= 500
    assert 500 <= member.p95_ms <= 1000


def test_a_member_sees_only_their_own_usage_and_a_team_admin_their_team(people, traffic):
    period = _month()
    mine = usage_report(viewer=viewer_for(people.users["member"]), group_by="member", period=period)
    assert [r.label for r in mine.rows] == [people.email("member")]
    team = usage_report(
        viewer=viewer_for(people.users["team_admin"]), group_by="team", period=period
    )
    assert [r.label for r in team.rows] == [people.home.slug]
    assert team.totals.calls == 26
    rival = usage_report(
        viewer=viewer_for(people.users["other_team_admin"]), group_by="member", period=period
    )
    assert [r.label for r in rival.rows] == [people.email("other_member")]


def test_periods_are_taken_in_the_team_time_zone():
    # 2026-11-18 00:30 in Berlin is still the 17th in UTC.
    now = datetime(2026, 11, 17, 23, 30, tzinfo=UTC)
    day = period_for(period="day", zone=BERLIN, now=now)
    assert day.start == datetime(2026, 11, 18, tzinfo=BERLIN)
    assert day.end - day.start == timedelta(days=1)
    week = period_for(period="week", zone=BERLIN, now=now)
    assert week.start.date() == date(2026, 11, 16)  # Monday
    custom = period_for(
        period="custom", zone=BERLIN, now=now, since=date(2026, 1, 1), until=date(2026, 1, 31)
    )
    assert custom.end == datetime(2026, 2, 1, tzinfo=BERLIN)
    with pytest.raises(ReportError, match="comes before"):
        period_for(
            period="custom", zone=BERLIN, now=now, since=date(2026, 2, 1), until=date(2026, 1, 1)
        )
    with pytest.raises(ReportError, match="Unknown period"):
        period_for(period="year", zone=BERLIN, now=now)


def test_a_day_excludes_the_hours_outside_it(people, traffic):
    day = period_for(period="day", zone=BERLIN, now=NOW)  # Berlin day: 23:00 UTC onwards
    report = usage_report(viewer=viewer_for(people.users["staff"]), group_by="route", period=day)
    # The 12 hours before NOW (15:30 UTC) all fall on the 18th in Berlin.
    assert report.totals.calls == len(traffic)
    early = period_for(
        period="custom", zone=BERLIN, now=NOW, since=date(2026, 11, 17), until=date(2026, 11, 17)
    )
    assert (
        usage_report(viewer=viewer_for(people.users["staff"]), group_by="route", period=early).rows
        == []
    )


def test_requested_vs_served_matrix_and_downgrade_rate(people, traffic):
    matrix = requested_vs_served(viewer=viewer_for(people.users["staff"]), period=_month())
    assert matrix.counts[("smart", "big")] == 12
    assert matrix.counts[("smart", "small")] == 12
    assert matrix.share("smart", "small") == 0.5
    assert matrix.downgrade_rate("smart") == 0.5
    assert matrix.downgrade_rate("fast") == 0.0
    mine = requested_vs_served(viewer=viewer_for(people.users["member"]), period=_month())
    assert mine.routes == ["smart"] and mine.deployments == ["big"]


def test_series_has_one_bucket_per_hour_and_capacity_share(people, traffic):
    day = period_for(period="day", zone=ZoneInfo("UTC"), now=NOW)
    series = usage_series(viewer=viewer_for(people.users["staff"]), period=day)
    assert series.unit == "hour" and len(series.buckets) == 24
    assert sum(series.calls["big"]) == 12 and sum(series.calls["small"]) == 24
    at_15 = series.buckets.index(datetime(2026, 11, 18, 15, tzinfo=UTC))
    # At 15:00 big answered 1 call and failed 2 attempts with capacity errors.
    assert series.capacity_share["big"][at_15] == pytest.approx(2 / 3)
    assert series.capacity_share["big"][0] is None  # no traffic at midnight


def test_percentile_interpolates_within_a_bucket():
    hist = [0, 0, 10, 0, 0, 0, 0, 0, 0, 0]  # ten calls in 250..500 ms
    assert percentile_ms(hist, 0.5) == pytest.approx(375)
    assert percentile_ms([0] * 10, 0.5) is None
    assert percentile_ms([0] * 9 + [3], 0.95) == 60000


def test_a_year_is_drawn_in_weeks_from_monday(people, traffic):
    year = period_for(
        period="custom", zone=BERLIN, now=NOW, since=date(2025, 12, 3), until=date(2026, 12, 2)
    )
    series = usage_series(viewer=viewer_for(people.users["staff"]), period=year)
    assert series.unit == "week" and len(series.buckets) in (52, 53)
    assert series.buckets[0].weekday() == 0 and series.buckets[0] <= year.start
    assert sum(series.calls["small"]) == 24


# --- Whole UTC days from the daily rollup, ragged edges from the hourly one ---------------

KOLKATA = ZoneInfo("Asia/Kolkata")  # +05:30: no local day starts on a UTC hour


@pytest.fixture
def fortnight(people):
    """Calls every 53 minutes over two weeks, so every hour edge has some."""
    keys = [people.keys[k] for k in ("member", "member_peer", "rival_member")]
    start = datetime(2026, 11, 1, 17, 3, tzinfo=UTC)
    calls = []
    for i in range(380):
        at, key = start + timedelta(minutes=53 * i), keys[i % 3]
        if i % 6 == 0:
            calls.append(
                call(key, at, route="smart", served="small", failed_on=(("big", "capacity"),))
            )
        elif i % 11 == 0:
            calls.append(call(key, at, served="", outcome=Outcome.RATE_LIMITED))
        else:
            calls.append(
                call(
                    key,
                    at,
                    route=("smart", "fast")[i % 2],
                    cost=f"0.{i:08d}",
                    latency_ms=40 + 173 * (i % 17),
                    tokens=(i, 3 * i),
                )
            )
    write(calls)
    return calls


@pytest.fixture
def hourly_only(monkeypatch):
    """Run a report as it was before the daily rollup: every hour from the hourly table."""

    def run(report, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(
                usage_report_module,
                "split_period",
                lambda start, end, boundaries=(): Split([], [(start, end)]),
            )
            return report(**kwargs)

    return run


def _kolkata_days(first: int, last: int):
    return period_for(
        period="custom",
        zone=KOLKATA,
        now=NOW,
        since=date(2026, 11, first),
        until=date(2026, 11, last),
    )


def _table(report):
    return [(r.label, r.cells(), r.latency) for r in [*report.rows, report.totals]]


@pytest.mark.parametrize("group_by", list(GROUPS))
def test_a_report_with_ragged_edges_equals_the_hourly_answer_exactly(
    people, fortnight, hourly_only, group_by
):
    period = _kolkata_days(2, 12)  # 1 Nov 18:30 UTC to 12 Nov 18:30 UTC
    split = split_period(period.start, period.end)
    assert split.days and len(split.hours) == 2  # both tables answer
    viewer = viewer_for(people.users["staff"])
    report = usage_report(viewer=viewer, group_by=group_by, period=period)
    expected = hourly_only(usage_report, viewer=viewer, group_by=group_by, period=period)
    assert _table(report) == _table(expected)  # every column, totals and p50/p95 too
    assert report.totals.p95_ms is not None and report.totals.calls > 250
    assert report.totals.cost == sum(r.cost for r in report.rows)


def test_whole_days_are_read_from_the_daily_rollup(people, fortnight):
    period = _kolkata_days(2, 12)
    viewer = viewer_for(people.users["staff"])
    before = _table(usage_report(viewer=viewer, group_by="member", period=period))
    # The hours inside whole UTC days are no longer needed: the days answer for them.
    UsageRollup.objects.filter(
        hour__gte=datetime(2026, 11, 2, tzinfo=UTC), hour__lt=datetime(2026, 11, 12, tzinfo=UTC)
    ).delete()
    assert _table(usage_report(viewer=viewer, group_by="member", period=period)) == before
    # The edges are not: they come from the hours.
    UsageRollup.objects.filter(hour__gte=datetime(2026, 11, 12, tzinfo=UTC)).delete()
    after = usage_report(viewer=viewer, group_by="member", period=period)
    assert after.totals.calls < before[-1][1][0]


def test_requested_vs_served_with_ragged_edges_equals_the_hourly_answer(
    people, fortnight, hourly_only
):
    period = _kolkata_days(3, 9)
    viewer = viewer_for(people.users["team_admin"])
    got = requested_vs_served(viewer=viewer, period=period)
    assert got == hourly_only(requested_vs_served, viewer=viewer, period=period)
    assert got.counts and got.fallbacks
    by_app = downgrades_by_application(viewer=viewer, period=period)
    assert by_app == hourly_only(downgrades_by_application, viewer=viewer, period=period)


@pytest.mark.parametrize(
    ("zone", "first", "last", "unit"),
    [
        (KOLKATA, date(2026, 11, 2), date(2026, 11, 12), "day"),  # no UTC day fits a bucket
        (UTC_ZONE := ZoneInfo("UTC"), date(2026, 11, 2), date(2026, 11, 12), "day"),
        (KOLKATA, date(2026, 2, 3), date(2026, 11, 30), "week"),  # most days fit a week
        (UTC_ZONE, date(2026, 2, 3), date(2026, 11, 30), "week"),
        (ZoneInfo("America/New_York"), date(2026, 2, 3), date(2026, 11, 30), "week"),  # DST
    ],
)
def test_a_series_with_daily_or_weekly_buckets_equals_the_hourly_answer(
    people, fortnight, hourly_only, zone, first, last, unit
):
    period = period_for(period="custom", zone=zone, now=NOW, since=first, until=last)
    viewer = viewer_for(people.users["staff"])
    series = usage_series(viewer=viewer, period=period)
    assert series.unit == unit
    assert series == hourly_only(usage_series, viewer=viewer, period=period)
    assert sum(series.calls["small"]) >= 50
