"""The spend forecast on made-up daily series: flat, weekday-heavy, a spike, a new month."""

from datetime import date, timedelta

import pytest

from quotas.forecast import INSUFFICIENT, RECENT, WEEKDAY, forecast_spend, trimmed_mean

# June 2026: the 1st is a Monday; 30 days.
JUNE, JULY = date(2026, 6, 1), date(2026, 7, 1)


def series(start: date, end: date, amount) -> dict[date, float]:
    """Spend per day from `start` to `end` (inclusive); `amount` a number or day -> number."""
    days = (end - start).days + 1
    out = {}
    for i in range(days):
        d = start + timedelta(days=i)
        out[d] = amount(d) if callable(amount) else amount
    return out


def june(daily, *, today: date, elapsed: float = 0.0, budget: float | None = 300.0):
    return forecast_spend(
        daily,
        today=today,
        day_elapsed=elapsed,
        period_start=JUNE,
        period_end=JULY,
        budget=budget,
    )


def test_flat_spend_projects_the_rate_times_the_month_and_the_day_it_runs_out():
    today = date(2026, 6, 11)
    # $12 a day since mid-May; today half gone, $6 spent so far today.
    daily = series(date(2026, 5, 15), today - timedelta(days=1), 12.0) | {today: 6.0}
    f = june(daily, today=today, elapsed=0.5)
    assert f.basis == RECENT
    assert f.daily_rate == pytest.approx(12.0)
    assert f.spent == pytest.approx(10 * 12 + 6)
    assert f.projected == pytest.approx(30 * 12)  # the rest of today at the rate, then 19 days
    # $300 is reached during June 25th: 24 days x 12 = 288, the 25th's 12 crosses it.
    assert f.runs_out_on == date(2026, 6, 25)
    assert f.share == pytest.approx(360 / 300)


def test_flat_spend_under_the_budget_never_runs_out():
    today = date(2026, 6, 11)
    daily = series(date(2026, 5, 15), today - timedelta(days=1), 5.0)
    f = june(daily, today=today)
    assert f.projected == pytest.approx(10 * 5 + 20 * 5)
    assert f.runs_out_on is None
    assert june(daily, today=today, budget=None).runs_out_on is None


def test_weekday_heavy_spend_uses_weekday_and_weekend_rates():
    today = date(2026, 6, 26)  # a Friday: the 26th, 29th and 30th and a weekend remain
    daily = series(
        date(2026, 5, 11), today - timedelta(days=1), lambda d: 1.0 if d.weekday() >= 5 else 20.0
    )
    f = june(daily, today=today, budget=1000.0)
    assert f.basis == WEEKDAY
    assert (f.daily_rate, f.weekend_rate) == (pytest.approx(20.0), pytest.approx(1.0))
    # Spent June 1-25: 19 weekdays and 6 weekend days; to come 3 weekdays and 2 weekend days.
    assert f.spent == pytest.approx(19 * 20 + 6 * 1)
    assert f.projected == pytest.approx(f.spent + 3 * 20 + 2 * 1)
    # One rate for every day would have charged the weekend like a weekday.
    flat = trimmed_mean([daily[today - timedelta(days=i)] for i in range(1, 15)])
    assert f.projected < f.spent + 5 * flat - 10


def test_a_small_weekday_difference_is_not_a_pattern():
    today = date(2026, 6, 15)
    daily = series(
        date(2026, 5, 11), today - timedelta(days=1), lambda d: 9.0 if d.weekday() >= 5 else 10.0
    )
    assert june(daily, today=today).basis == RECENT


def test_a_weekly_pattern_needs_two_weeks_of_data():
    today = date(2026, 6, 15)
    daily = series(
        today - timedelta(days=10),
        today - timedelta(days=1),
        lambda d: 0.0 if d.weekday() >= 5 else 20.0,
    )
    assert june(daily, today=today).basis == RECENT


def test_a_one_day_spike_barely_moves_the_projection():
    today = date(2026, 6, 11)
    daily = series(date(2026, 5, 15), today - timedelta(days=1), 10.0)
    daily[today - timedelta(days=1)] = 900.0  # yesterday someone looped a script
    f = june(daily, today=today)
    assert f.daily_rate == pytest.approx(10.0)  # the spike is trimmed off the rate
    assert f.spent == pytest.approx(9 * 10 + 900)
    assert f.projected == pytest.approx(f.spent + 20 * 10)  # counted once, not every day
    assert f.runs_out_on == date(2026, 6, 10)  # that spike did spend the budget


def test_a_budget_already_spent_ran_out_on_the_day_it_was_reached():
    today = date(2026, 6, 11)
    daily = series(date(2026, 5, 15), today, 40.0)
    assert june(daily, today=today, budget=200.0).runs_out_on == date(2026, 6, 5)
    assert june(daily, today=today, budget=440.0).runs_out_on == today


def test_a_new_month_is_projected_from_last_months_rate():
    today = date(2026, 6, 2)  # the second day: one whole day of June
    daily = series(date(2026, 5, 1), today - timedelta(days=1), 8.0) | {today: 2.0}
    f = june(daily, today=today, elapsed=0.25)
    assert f.basis == RECENT and f.days_used == 14
    assert f.spent == pytest.approx(8 + 2)
    assert f.projected == pytest.approx(8 + 2 + 0.75 * 8 + 28 * 8)
    assert f.runs_out_on is None  # 246 of 300


def test_too_little_data_is_insufficient_not_a_guess():
    today = date(2026, 6, 2)
    daily = {date(2026, 6, 1): 50.0, today: 10.0}  # the team started yesterday
    f = june(daily, today=today)
    assert f.basis == INSUFFICIENT
    assert (f.projected, f.runs_out_on, f.share) == (None, None, None)
    assert f.spent == pytest.approx(60.0)
    assert june({}, today=today).basis == INSUFFICIENT


def test_trimmed_mean_drops_one_extreme_each_side_from_three_values():
    assert trimmed_mean([1.0, 2.0, 100.0]) == 2.0
    assert trimmed_mean([4.0, 6.0]) == 5.0
    assert trimmed_mean([]) == 0.0
    assert trimmed_mean([float(v) for v in range(20)]) == pytest.approx(9.5)
