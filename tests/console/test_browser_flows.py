"""The console's main flows in headless Chromium against the live gateway (real uvicorn, the
shared end-to-end database and simulator): log in; a member creates a key, sees it once,
calls the gateway with it through the official openai SDK and finds the call in My usage;
an admin drains a deployment and another screen's capacity board shows it by its own
refresh; a member cannot open another member's page."""

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from tests.console.browser import Console, start_chromium, stop_chromium
from tests.console.people import PASSWORD, People
from tests.support import GatewayHandle

pytestmark = pytest.mark.browser

DRILL = "console-drill"  # a deployment of the browser tests' own: no route uses it


def by_testid(console: Console, testid: str, within: Any = None) -> Any:
    from selenium.webdriver.common.by import By

    selector = f"[data-testid='{testid}']"
    if within is not None:
        return within.find_element(By.CSS_SELECTOR, selector)
    return console.wait(lambda d: d.find_element(By.CSS_SELECTOR, selector), selector)


@pytest.fixture(scope="module")
def drill_deployment(console_people: People, django_db_blocker: Any) -> Iterator[str]:
    from routing.models import Deployment, Upstream

    with django_db_blocker.unblock():
        Deployment.objects.update_or_create(
            name=DRILL,
            defaults={"upstream": Upstream.objects.get(name="simulator"), "model": "small"},
        )
    yield DRILL
    with django_db_blocker.unblock():
        Deployment.objects.filter(name=DRILL).update(drained_until=None, drain_reason="")


@pytest.fixture
def second_console(gateway: GatewayHandle, console_people: People) -> Iterator[Console]:
    """Another person's browser, for flows where one watches what the other does."""
    driver = start_chromium()
    emails = {role: user.email for role, user in console_people.users.items()}
    yield Console(driver, gateway.url, emails, PASSWORD)
    stop_chromium(driver)


def test_a_visitor_is_sent_to_the_login_page_and_a_wrong_password_is_refused(
    console: Console,
) -> None:
    console.logout()
    console.open("/keys/")
    console.wait(lambda d: "/login/" in d.current_url, "the login page")
    assert "next=/keys/" in console.driver.current_url
    by_testid(console, "login-form")
    console.driver.find_element("name", "username").send_keys(console.emails["member"])
    console.driver.find_element("name", "password").send_keys("not-the-password")
    by_testid(console, "login-submit").click()
    error = by_testid(console, "form-errors")
    assert "password" in error.text.lower()
    assert "/login/" in console.driver.current_url
    assert "not-the-password" not in console.driver.page_source


@pytest.mark.parametrize(
    ("role", "label"),
    [("member", "member"), ("team_admin", "team admin"), ("staff", "admin")],
)
def test_each_role_logs_in_and_sees_who_they_are(console: Console, role: str, label: str) -> None:
    console.login(role)
    assert console.driver.current_url.rstrip("/") == console.url
    who = by_testid(console, "whoami").text
    assert console.emails[role] in who
    assert label in by_testid(console, "role").text.lower()
    nav = by_testid(console, "nav").text
    assert "Keys" in nav
    # Members are not offered the pages they may not open.
    assert ("Members" in nav) == (role != "member")


def test_member_creates_a_key_sees_it_once_uses_it_and_finds_the_call(
    console: Console, gateway: GatewayHandle, console_people: People
) -> None:
    from selenium.webdriver.support.select import Select

    console.login("member")
    console.open("/keys/new/")
    form = by_testid(console, "key-form")
    Select(form.find_element("name", "application")).select_by_value(
        str(console_people.home_app.pk)
    )
    form.find_element("name", "name").send_keys("browser laptop")
    form.find_element("name", "expires_days").send_keys("30")
    by_testid(console, "submit").click()

    shown = by_testid(console, "new-key").get_attribute("value")
    assert shown.startswith("sk-sluice-")
    # The secret is base64url and may itself hold a "-": cut at the public id's dash.
    secret = shown.removeprefix("sk-sluice-").partition("-")[2]
    assert len(secret) >= 32
    by_testid(console, "copy-key").click()
    console.wait(lambda d: by_testid(console, "copy-key").text == "Copied", "the copy button")

    by_testid(console, "done").click()
    console.wait(lambda d: d.current_url.endswith("/keys/"), "the key list")
    assert "browser laptop" in console.text()
    assert secret not in console.driver.page_source, "the key is shown once only"
    console.driver.refresh()
    assert secret not in console.driver.page_source

    client = OpenAI(base_url=f"{gateway.url}/v1", api_key=shown, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="fast", messages=[{"role": "user", "content": "hello from the console test"}]
    )
    assert raw.parse().choices[0].message.content
    request_id = raw.headers["x-sluice-request-id"]

    def call_row(driver: Any) -> Any:
        """The call's row once the page counts it too (the list reads the calls, the totals
        the hourly rollups)."""
        driver.get(console.url + "/usage/")
        rows = driver.find_elements("css selector", f"[data-request-id='{request_id}']")
        counted = int(by_testid(console, "usage-calls").text.replace(",", "")) >= 1
        return rows[0] if rows and counted else None

    row = console.wait(call_row, f"call {request_id} listed and counted in My usage", timeout=15)
    assert by_testid(console, "requested-model", row).text == "fast"
    assert by_testid(console, "served-model", row).text.startswith("small")


def test_admin_drains_a_deployment_and_the_board_shows_it_without_a_reload(
    console: Console, second_console: Console, drill_deployment: str
) -> None:
    from selenium.webdriver.common.by import By

    row_css = f"#capacity-board-rows [data-deployment='{drill_deployment}']"
    # One screen shows the overview (a member watching the board)...
    console.login("member")
    console.open("/")
    console.wait(
        lambda d: "in service" in d.find_element(By.CSS_SELECTOR, row_css).text,
        "the drill's row, in service",
    )
    console.driver.execute_script("window.__sluiceNoReload = true;")

    # ...while the admin drains the deployment in their own browser.
    admin = second_console
    admin.login("staff")
    admin.open("/deployments/")
    mine = admin.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, f"[data-deployment='{drill_deployment}']"),
        "the drill's deployment row",
    )
    by_testid(admin, "drain-open", mine).click()
    by_testid(admin, "drain-minutes", mine).clear()
    by_testid(admin, "drain-minutes", mine).send_keys("15")
    by_testid(admin, "drain-reason", mine).send_keys("browser drill")
    by_testid(admin, "drain-submit", mine).click()
    admin.wait(lambda d: "drained for 15 min" in d.page_source, "the drain message")

    def drained(driver: Any) -> bool:
        found = driver.find_elements(By.CSS_SELECTOR, f"{row_css} [data-testid='drained']")
        return bool(found) and "drained until" in found[0].text

    console.wait(drained, "the board's own refresh to show the drain", timeout=20)
    assert console.driver.execute_script("return window.__sluiceNoReload === true;"), (
        "the page was reloaded: the board must refresh itself"
    )
    console.wait(
        lambda d: "browser drill" in d.find_element(By.CSS_SELECTOR, row_css).text,
        "the drain's reason on the board",
    )

    # Undrain, and the board follows again.
    mine = admin.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, f"[data-deployment='{drill_deployment}']"),
        "the drill's deployment row",
    )
    by_testid(admin, "undrain", mine).click()
    console.wait(lambda d: not drained(d), "the board to show it back in service", timeout=20)


def test_a_member_cannot_open_another_members_page(
    console: Console, console_people: People
) -> None:
    bob = console_people.users["member_peer"]
    rival_key = console_people.keys["rival_member"].prefix
    console.login("member")
    assert console.status_of(f"/members/{bob.member.pk}/") == 403
    console.open(f"/members/{bob.member.pk}/")
    assert "Not allowed" in console.text()
    assert bob.email not in console.driver.page_source
    assert console.status_of(f"/keys/{rival_key}/rotate/") == 404
    console.open(f"/keys/{rival_key}/rotate/")
    assert rival_key not in console.driver.page_source
    # The team admin of that other team may open their own member's page; bob's is out of
    # their scope (404, not 403: its existence is not revealed).
    console.login("other_team_admin")
    assert console.status_of(f"/members/{bob.member.pk}/") == 404
