"""Capacity weather: the hour-of-week heatmap and the quietest batch window."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from accounts.selectors import viewer_for
from reports.capacity_weather import Cell, capacity_weather, quietest_window
from tests.console.people import make_people
from tests.console.report_data import call, write

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 30, tzinfo=BERLIN)  # four weeks back: Monday 2 November


def test_quietest_window_wraps_midnight_and_prefers_low_share():
    grid = [[Cell(calls=10, attempts=10, capacity_errors=5) for _ in range(24)] for _ in range(7)]
    for day in grid:
        for h in (23, 0, 1):
            day[h] = Cell(calls=10, attempts=10, capacity_errors=0)
    window = quietest_window(grid, 3)
    assert (window.start_hour, window.share, window.label) == (23, 0.0, "23:00–02:00")  # noqa: RUF001
    assert quietest_window([[Cell() for _ in range(24)] for _ in range(7)], 3) is None
    with pytest.raises(ValueError):
        quietest_window(grid, 0)


@pytest.mark.django_db
def test_weather_maps_hours_to_local_weekday_and_suggests_the_quiet_night():
    people = make_people(tag="wx")
    key = people.keys["member"]
    calls = []
    # Four weeks: every day, 02:00-05:00 Berlin answers cleanly; 14:00 Berlin is full.
    for day in range(28):
        base = datetime(2026, 11, 2, tzinfo=BERLIN) + timedelta(days=day)
        for h in (2, 3, 4):
            calls.append(call(key, (base + timedelta(hours=h)).astimezone(UTC), served="big"))
        peak = (base + timedelta(hours=14)).astimezone(UTC)
        calls.append(call(key, peak, served="small", failed_on=(("big", "capacity"),)))
        calls.append(call(key, peak, served="big"))
    write(calls)
    staff = viewer_for(people.users["staff"])
    (big, _small) = capacity_weather(viewer=staff, zone=BERLIN, now=NOW, window_hours=3)
    assert big.deployment == "big"
    monday = big.grid[0]
    assert monday[2].calls == 4 and monday[2].share == 0.0  # four Mondays at 02:00 Berlin
    assert monday[14].share == pytest.approx(0.5)
    assert big.quietest.label == "02:00–05:00"  # noqa: RUF001
    assert big.peak_share == pytest.approx(0.5)
    assert "02:00–05:00 Europe/Berlin, 0.0% capacity errors vs 50.0% at peak" in big.suggestion()  # noqa: RUF001
    # The rival team's admin sees none of it.
    assert (
        capacity_weather(viewer=viewer_for(people.users["other_team_admin"]), zone=BERLIN, now=NOW)
        == []
    )
