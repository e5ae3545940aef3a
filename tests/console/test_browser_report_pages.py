"""The report pages in headless Chromium against the live gateway: the usage report's charts
render as SVG with axes and units (served by Sluice, no network), the CSV downloads work in
the browser (the usage report's totals row equals its rows; the call explorer's export holds
the member's own call and no one else's), and the call page shows the attempt timeline."""

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.console.browser import Console
from tests.console.people import People
from tests.support import GatewayHandle, wait_until

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def member_calls(
    gateway: GatewayHandle, console_people: People, django_db_blocker: Any
) -> list[str]:
    """Three calls by the member (alice) through the live gateway; their request ids, once
    their audit rows and rollups are written."""
    from accounts.services import key_issue
    from quotas.models import UsageRollup
    from routing.models import CallRecord

    with django_db_blocker.unblock():
        key, plaintext = key_issue(
            member_email=console_people.email("member"),
            application_slug=console_people.home_app.slug,
            name="report pages",
        )
    ids = []
    with httpx.Client(base_url=f"{gateway.url}/v1", timeout=30) as client:
        for model in ("fast", "smart", "fast"):
            answer = client.post(
                "/chat/completions",
                headers={"Authorization": f"Bearer {plaintext}"},
                json={"model": model, "messages": [{"role": "user", "content": "report me"}]},
            )
            assert answer.status_code == 200, answer.text
            ids.append(answer.headers["x-sluice-request-id"])
    with django_db_blocker.unblock():
        wait_until(lambda: CallRecord.objects.filter(request_id__in=ids).count() == len(ids))
        wait_until(lambda: UsageRollup.objects.filter(key_prefix=key.prefix).exists())
    return ids


@pytest.fixture
def own_downloads(console: Console, download_dir: Path, tmp_path: Path) -> Iterator[Path]:
    """This test's downloads go to a folder of its own; then back to the shared one."""
    console.download_into(tmp_path)
    yield tmp_path
    console.download_into(download_dir)


def _downloaded(folder: Path, timeout: float = 15) -> Path:
    """The one finished download in `folder` (Chromium writes `*.crdownload` until done)."""

    def done() -> Path | None:
        found = [p for p in folder.iterdir() if not p.name.endswith(".crdownload")]
        return found[0] if len(found) == 1 and found[0].stat().st_size else None

    return wait_until(done, timeout=timeout)


def test_usage_report_charts_render_with_axes_and_units(
    console: Console, member_calls: list[str]
) -> None:
    from selenium.webdriver.common.by import By

    console.login("staff")
    console.open("/reports/?period=day&group_by=deployment")
    chart = console.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, "svg[data-testid='chart-calls']"),
        "the calls chart",
    )
    assert chart.tag_name == "svg"
    box = chart.rect
    assert box["width"] > 300 and box["height"] > 100, f"the chart is not drawn: {box}"
    assert chart.find_elements(By.CSS_SELECTOR, ".axis"), "no axis line"
    ticks = [t.text for t in chart.find_elements(By.CSS_SELECTOR, "text.tick")]
    assert len(ticks) >= 4, f"too few axis ticks: {ticks}"
    labels = [t.text for t in chart.find_elements(By.CSS_SELECTOR, "text.axis-label")]
    assert "calls" in labels, f"no unit on the y axis: {labels}"
    assert any("UTC" in label or "hour" in label or "day" in label for label in labels), labels
    legend = [t.text for t in chart.find_elements(By.CSS_SELECTOR, "text.legend")]
    assert "small" in legend, f"the deployment that served the calls is not drawn: {legend}"
    # Every chart of the page, with its unit, and a table alternative.
    for key, unit in (("tokens", "tokens"), ("cost", "USD"), ("capacity", "%")):
        other = console.driver.find_element(By.CSS_SELECTOR, f"svg[data-testid='chart-{key}']")
        assert unit in [t.text for t in other.find_elements(By.CSS_SELECTOR, "text.axis-label")]
        console.driver.find_element(By.CSS_SELECTOR, f"[data-testid='chart-table-{key}']")
    # Nothing came from elsewhere: every script, stylesheet and image is Sluice's own.
    sources = console.driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name);"
    )
    assert all(s.startswith(console.url) for s in sources), sources


def test_usage_report_csv_downloads_with_a_totals_row_equal_to_the_rows(
    console: Console, member_calls: list[str], own_downloads: Path
) -> None:
    from selenium.webdriver.common.by import By

    console.login("staff")
    console.open("/reports/?period=day&group_by=member")
    console.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, "[data-testid='csv-download']"), "CSV link"
    ).click()
    path = _downloaded(own_downloads)
    assert path.name.startswith("sluice-usage-member-")
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
    header, body, totals = rows[0], rows[1:-1], rows[-1]
    assert header[0] == "member" and "calls" in header
    assert totals[0].lower().startswith("total")
    calls = header.index("calls")
    assert sum(int(r[calls]) for r in body) == int(totals[calls])
    alice = [r for r in body if r[0] == console.emails["member"]]
    assert alice and int(alice[0][calls]) >= len(member_calls)


def test_call_explorer_csv_holds_the_members_own_calls_only(
    console: Console, member_calls: list[str], own_downloads: Path, console_people: People
) -> None:
    from selenium.webdriver.common.by import By

    console.login("member")
    console.open("/calls/")
    shown = console.wait(
        lambda d: [
            r.get_attribute("data-request-id")
            for r in d.find_elements(By.CSS_SELECTOR, "[data-testid='call-row']")
        ],
        "the member's calls",
    )
    assert set(member_calls) <= set(shown)
    console.driver.find_element(By.CSS_SELECTOR, "[data-testid='csv-download']").click()
    path = _downloaded(own_downloads)
    assert path.name.startswith("sluice-calls-")
    text = path.read_text(encoding="utf-8-sig")
    for request_id in member_calls:
        assert request_id in text
    others = {console_people.users[r].email for r in ("member_peer", "other_member", "staff")}
    assert not [email for email in others if email in text]


def test_a_calls_page_shows_its_attempt_timeline(console: Console, member_calls: list[str]) -> None:
    from selenium.webdriver.common.by import By

    console.login("member")
    console.open(f"/calls/{member_calls[1]}/")
    assert (
        console.driver.find_element(By.CSS_SELECTOR, "[data-testid='call-id']").text.endswith(
            member_calls[1]
        )
        or member_calls[1] in console.text()
    )
    attempts = console.driver.find_elements(By.CSS_SELECTOR, "[data-testid='attempt-row']")
    assert attempts, "no attempt in the timeline"
    assert "smart" in console.text()
