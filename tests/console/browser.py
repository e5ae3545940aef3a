"""Headless Chromium for the console: how to start it, and a small driver wrapper to log in
as a role and wait for things. No Django import, so scripts (bench/screenshots.py) use it too."""

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# A laptop screen: the width the console must work at.
WINDOW = (1366, 900)
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def browser_skip_reason() -> str | None:
    if os.environ.get("SLUICE_SKIP_BROWSER_TESTS", "").strip().lower() in {"1", "true", "yes"}:
        return "browser tests off: SLUICE_SKIP_BROWSER_TESTS=1"
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        return (
            f"browser tests need {' and '.join(missing)} "
            "(apt-get install -y chromium chromium-driver)"
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "browser tests need selenium (make test installs the dev extras)"
    return None


def start_chromium(download_dir: Path | None = None) -> Any:
    """A fresh headless Chromium (own profile directory) with its driver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tempfile.mkdtemp(prefix="sluice-chromium-")
    for flag in (
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        options.add_argument(flag)
    if download_dir is not None:
        options.add_experimental_option(
            "prefs",
            {
                "download.default_directory": str(download_dir),
                "download.prompt_for_download": False,
            },
        )
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    driver._sluice_profile = profile  # removed with the driver
    return driver


def stop_chromium(driver: Any) -> None:
    profile = getattr(driver, "_sluice_profile", None)
    try:
        driver.quit()
    finally:
        if profile:
            shutil.rmtree(profile, ignore_errors=True)


@dataclass
class Console:
    """A browser on the live console, with helpers to log in as a role and wait for things."""

    driver: Any
    url: str  # the gateway's base URL, no trailing slash
    emails: dict[str, str]  # role -> login email
    password: str

    def open(self, path: str) -> None:
        self.driver.get(self.url + path)

    def logout(self) -> None:
        self.driver.delete_all_cookies()

    def login(self, role: str) -> None:
        """Through the login form, as a person would."""
        from selenium.webdriver.common.by import By

        self.logout()
        self.open("/login/")
        self.driver.find_element(By.NAME, "username").send_keys(self.emails[role])
        self.driver.find_element(By.NAME, "password").send_keys(self.password)
        self.driver.find_element(By.CSS_SELECTOR, "form [type=submit]").click()
        self.wait(lambda d: "/login/" not in d.current_url, f"log in as {role}")

    def wait(self, condition: Any, what: str, timeout: float = 10.0) -> Any:
        from selenium.common.exceptions import (
            NoSuchElementException,
            StaleElementReferenceException,
        )
        from selenium.webdriver.support.ui import WebDriverWait

        # The board and the alerts swap their rows in place every few seconds: an element
        # found a moment ago may be gone by the time it is read; the condition runs again.
        ignored = (NoSuchElementException, StaleElementReferenceException)
        return WebDriverWait(
            self.driver, timeout, poll_frequency=0.1, ignored_exceptions=ignored
        ).until(condition, message=f"waiting for: {what}")

    def by_id(self, element_id: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.wait(lambda d: d.find_element(By.ID, element_id), f"#{element_id}")

    def text(self) -> str:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.TAG_NAME, "body").text

    def download_into(self, folder: Path) -> None:
        """Send this browser's downloads to `folder` from now on (a test's own folder, so no
        other test's file can be taken for its own)."""
        self.driver.execute_cdp_cmd(
            "Browser.setDownloadBehavior",
            {"behavior": "allow", "downloadPath": str(folder), "eventsEnabled": False},
        )

    def status_of(self, path: str) -> int:
        """The HTTP status of a page as the browser (its session cookie) gets it."""
        return self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0], {redirect: 'manual', credentials: 'same-origin'})"
            ".then(r => done(r.type === 'opaqueredirect' ? 302 : r.status), () => done(0));",
            path,
        )
