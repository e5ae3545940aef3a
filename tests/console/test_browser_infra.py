"""The browser-test plumbing itself: when it skips, and that Chromium reaches the gateway."""

import pytest

from tests.console.browser import browser_skip_reason


def test_browser_tests_skip_when_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_SKIP_BROWSER_TESTS", "1")
    assert browser_skip_reason() == "browser tests off: SLUICE_SKIP_BROWSER_TESTS=1"


def test_browser_tests_say_what_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import tests.console.browser as browser

    monkeypatch.delenv("SLUICE_SKIP_BROWSER_TESTS", raising=False)
    monkeypatch.setattr(browser, "CHROMEDRIVER", tmp_path / "chromedriver")
    reason = browser_skip_reason()
    assert reason is not None and str(tmp_path / "chromedriver") in reason
    assert "apt-get install -y chromium chromium-driver" in reason


@pytest.mark.browser
def test_chromium_reaches_the_live_gateway(console) -> None:
    console.open("/healthz")
    assert '"status":"ok"' in console.text()
    assert console.driver.get_window_size()["width"] == 1366
