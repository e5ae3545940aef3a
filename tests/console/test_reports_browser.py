"""The report pages in headless Chromium (no network but the gateway's): the usage report
draws its SVG charts and a totals row, its CSV downloads; the call explorer finds a member's
call and its page shows the attempt timeline; the calls CSV downloads; the capacity weather
shows its heatmap and suggestion."""

import csv
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from tests.console.browser import Console
from tests.console.people import People
from tests.console.report_data import call, write

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def report_calls(console_people: People, django_db_blocker: Any) -> list:
    key = console_people.keys["member"]
    now = timezone.now() - timedelta(minutes=2)
    logs = [
        call(key, now, route="smart", served="small", failed_on=(("big", "capacity"),)),
        call(key, now - timedelta(minutes=1), route="smart", served="big"),
    ]
    with django_db_blocker.unblock():
        write(logs)
    return logs


def _testid(console: Console, testid: str) -> Any:
    from selenium.webdriver.common.by import By

    selector = f"[data-testid='{testid}']"
    return console.wait(lambda d: d.find_element(By.CSS_SELECTOR, selector), selector)


def _downloaded(folder: Path, prefix: str, before: set[Path], timeout: float = 15) -> Path:
    """The file of `prefix` that appeared in `folder` since `before` (other tests download
    into the same folder), once Chromium has finished writing it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [p for p in folder.glob(f"{prefix}*.csv") if p not in before and p.stat().st_size]
        if new:
            return new[0]
        time.sleep(0.2)
    raise AssertionError(f"no new {prefix}*.csv downloaded into {folder}")


def test_usage_report_draws_charts_and_downloads_its_csv(
    console: Console, report_calls: list, download_dir: Path
) -> None:
    console.login("staff")
    console.open("/reports/?period=day&group_by=route")
    totals = _testid(console, "report-totals")
    assert totals.text.startswith("Total")
    chart = _testid(console, "chart-calls")
    assert chart.size["width"] > 300 and chart.size["height"] > 80  # drawn, not blank
    assert "calls" in chart.text or chart.get_attribute("aria-label")
    before = set(download_dir.iterdir())
    _testid(console, "csv-download").click()
    path = _downloaded(download_dir, "sluice-usage-route", before)
    rows = list(csv.reader(path.open(encoding="utf-8")))
    assert rows[0][:2] == ["route", "calls"] and rows[-1][0] == "Total"
    assert int(rows[-1][1]) == sum(int(r[1]) for r in rows[1:-1])


def test_overview_draws_the_last_24_hours_charts(console: Console, report_calls: list) -> None:
    from selenium.webdriver.common.by import By

    console.login("member")
    console.open("/")
    chart = _testid(console, "chart-calls")
    assert chart.size["width"] > 300 and chart.size["height"] > 80  # drawn, not blank
    assert chart.get_attribute("aria-label") == "Calls per deployment"
    assert chart.find_elements(By.CSS_SELECTOR, "polyline, circle")  # a line was drawn
    # A member sees no capacity-error share; the table alternative opens with one row an hour.
    assert not console.driver.find_elements(By.CSS_SELECTOR, "[data-testid='chart-capacity']")
    block = _testid(console, "chart-block-calls")
    block.find_element(By.TAG_NAME, "summary").click()
    rows = _testid(console, "chart-table-calls").find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == 24 and rows[0].is_displayed()


def test_member_finds_the_call_and_reads_its_timeline(
    console: Console, report_calls: list, download_dir: Path
) -> None:
    console.login("member")
    console.open("/calls/?fell_back=yes&route=smart")
    failed_over = report_calls[0].request_id
    from selenium.webdriver.common.by import By

    row = console.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, f"[data-request-id='{failed_over}'] a"),
        "the call's row",
    )
    row.click()
    timeline = _testid(console, "timeline")
    assert timeline.is_displayed()
    attempts = _testid(console, "attempts").text
    assert "big" in attempts and "capacity" in attempts and "small" in attempts
    console.open(f"/calls/?key={report_calls[0].key_prefix}")
    before = set(download_dir.iterdir())
    _testid(console, "csv-download").click()
    path = _downloaded(download_dir, "sluice-calls", before)
    rows = list(csv.reader(path.open(encoding="utf-8")))
    assert rows[0][0] == "request_id"
    assert {failed_over, report_calls[1].request_id} <= {r[0] for r in rows[1:]}


def test_capacity_weather_shows_a_heatmap_for_a_team_admin(
    console: Console, report_calls: list
) -> None:
    console.login("team_admin")
    console.open("/reports/weather/")
    section = _testid(console, "weather-big")
    assert "batch window suggestion" in section.text
    assert console.status_of("/reports/weather/") == 200
    console.login("member")
    assert console.status_of("/reports/weather/") == 403
