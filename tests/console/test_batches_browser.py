"""The Batches page in headless Chromium: a member sees their batch's progress bar drawn
(completed and failed segments in proportion) and its batch page's counts."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.console.browser import Console
from tests.console.people import People

pytestmark = pytest.mark.browser


@pytest.fixture
def running_batch(console_people: People, django_db_blocker: Any) -> Iterator[str]:
    from batches.models import Batch
    from tests.console.batch_data import make_batch

    with django_db_blocker.unblock():
        make_batch(
            console_people.keys["member"], "batch_browser", completed=6, failed=2, pending=12
        )
    yield "batch_browser"
    with django_db_blocker.unblock():
        Batch.objects.filter(pk="batch_browser").delete()


def test_member_sees_the_progress_bar_of_their_batch(console: Console, running_batch: str) -> None:
    from selenium.webdriver.common.by import By

    console.login("member")
    console.driver.find_element(By.CSS_SELECTOR, "[data-testid='nav-batches']").click()
    row = console.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, f"[data-batch='{running_batch}']"), "batch row"
    )
    bar = row.find_element(By.CSS_SELECTOR, "[data-testid='batch-progress']")
    assert bar.get_attribute("aria-valuenow") == "8"
    assert bar.get_attribute("aria-valuemax") == "20"
    full = bar.size["width"]
    done = bar.find_element(By.CSS_SELECTOR, ".done").size["width"]
    failed = bar.find_element(By.CSS_SELECTOR, ".failed").size["width"]
    assert full >= 100, f"the bar is {full} px wide"
    assert abs(done - 0.3 * full) <= 2 and abs(failed - 0.1 * full) <= 2, (done, failed, full)
    assert "6 done · 2 failed of 20 (40%)" in row.text

    row.find_element(By.CSS_SELECTOR, "[data-testid='batch-link']").click()
    console.wait(
        lambda d: d.find_elements(By.CSS_SELECTOR, "[data-testid='line-outcomes']"), "lines"
    )
    assert console.driver.find_element(By.CSS_SELECTOR, "[data-testid='count-open']").text == "12"
    big = console.driver.find_element(By.CSS_SELECTOR, ".progress.big .done")
    assert big.size["width"] > 0
