"""Console single sign-on in headless Chromium against a real OpenID provider (npm
oidc-provider on http://localhost, the gateway on 127.0.0.1): the login page's button, the
provider's login form, landing where the sign-in was headed; a group change at the provider
changing the role at the next sign-in; groups mapped to nothing and a forged state ending on
the refusal page. test_sso_login.py covers the same flows over plain HTTP. Screenshots go to
the folder SLUICE_SSO_SCREENSHOTS names, when set."""

import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.console.browser import Console
from tests.console.sso import DISPLAY_NAME, SsoWorld, account

pytestmark = pytest.mark.browser


@pytest.fixture
def sso_console(chromium: Any, sso_world: SsoWorld) -> Iterator[Console]:
    """A browser with no cookie at either origin (the gateway's and the provider's)."""
    console = Console(chromium, sso_world.gateway.url, {}, "")
    _sign_out(console)
    yield console
    _sign_out(console)


def _sign_out(console: Console) -> None:
    console.driver.delete_all_cookies()
    console.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})


def _by_testid(console: Console, testid: str) -> Any:
    from selenium.webdriver.common.by import By

    selector = f"[data-testid='{testid}']"
    return console.wait(lambda d: d.find_element(By.CSS_SELECTOR, selector), selector)


def _path(console: Console) -> str:
    return urlsplit(console.driver.current_url).path


def _shot(console: Console, name: str) -> None:
    """A screenshot to look at, into SLUICE_SSO_SCREENSHOTS (a folder) when it is set."""
    folder = os.environ.get("SLUICE_SSO_SCREENSHOTS")
    if folder:
        console.driver.save_screenshot(os.path.join(folder, f"sso-{name}.png"))


def _to_provider(console: Console, world: SsoWorld, path: str = "/keys/") -> None:
    """Open `path` signed out, land on the login page, click the provider's button and wait
    for the provider's login form."""
    from selenium.webdriver.common.by import By

    console.open(path)
    console.wait(lambda d: _path(console) == "/login/", "the login page")
    assert parse_qs(urlsplit(console.driver.current_url).query) == {"next": [path]}
    button = _by_testid(console, "sso-login")
    assert button.text == f"Sign in with {DISPLAY_NAME}"
    button.click()
    console.wait(lambda d: d.current_url.startswith(world.provider.url), "the provider's page")
    console.wait(lambda d: d.find_element(By.NAME, "login"), "the provider's login form")


def _sign_in(console: Console, world: SsoWorld, login: str, path: str = "/keys/") -> None:
    """The whole sign-in, as a person does it: ends back on the console."""
    _to_provider(console, world, path)
    _provider_login(console, world, login)


def _provider_login(console: Console, world: SsoWorld, login: str) -> None:
    """On the provider's login form: sign in as `login` and wait to be back."""
    from selenium.webdriver.common.by import By

    driver = console.driver
    console.wait(lambda d: d.find_element(By.NAME, "login"), "the provider's login form")
    driver.find_element(By.NAME, "login").send_keys(login)
    driver.find_element(By.NAME, "password").send_keys("anything")
    driver.find_element(By.CSS_SELECTOR, "[type=submit]").click()
    console.wait(lambda d: d.current_url.startswith(world.gateway.url), "back on the console")


def test_a_member_signs_in_through_the_provider_and_lands_where_they_were_headed(
    sso_console: Console, sso_world: SsoWorld
) -> None:
    from selenium.webdriver.common.by import By

    sso_world.provider.set_account("bria", account("bria", "sluice-eng"))
    console = sso_console
    console.open("/keys/")
    console.wait(lambda d: _path(console) == "/login/", "the login page")
    _by_testid(console, "sso-login")
    assert "or with your password" in console.text()
    _shot(console, "login")

    _to_provider(console, sso_world)
    _shot(console, "provider")
    console.driver.find_element(By.NAME, "login").send_keys("bria")
    console.driver.find_element(By.NAME, "password").send_keys("anything")
    console.driver.find_element(By.CSS_SELECTOR, "[type=submit]").click()
    console.wait(lambda d: d.current_url.startswith(sso_world.gateway.url), "back on the console")

    assert _path(console) == "/keys/"
    assert "bria@sso.example.com" in console.text()
    assert console.status_of("/keys/") == 200  # a session, not just a page
    _shot(console, "keys")


def test_a_group_change_at_the_provider_changes_the_role_at_the_next_sign_in(
    sso_console: Console, sso_world: SsoWorld
) -> None:
    from selenium.webdriver.common.by import By

    provider, console = sso_world.provider, sso_console
    provider.set_account("cole", account("cole", "sluice-eng"))
    provider.set_account("cyd", account("cyd", "sluice-eng"))  # a teammate
    provider.set_account("cleo", account("cleo", "sluice-research"))  # another team
    assert sso_world.sign_in("cyd").status_code == 302
    assert sso_world.sign_in("cleo").status_code == 302

    _sign_in(console, sso_world, "cole")
    assert _path(console) == "/keys/"
    assert console.status_of("/members/") == 403
    console.open("/members/")
    assert _by_testid(console, "forbidden").is_displayed()

    provider.set_groups("cole", ["sluice-eng", "sluice-eng-admins"])
    _sign_out(console)
    assert console.status_of("/keys/") == 302  # signed out for real
    _sign_in(console, sso_world, "cole", "/members/")
    assert _path(console) == "/members/"
    assert console.status_of("/members/") == 200
    rows = console.driver.find_elements(By.CSS_SELECTOR, "[data-testid='member-row']")
    emails = {row.get_attribute("data-email") for row in rows}
    assert {"cole@sso.example.com", "cyd@sso.example.com"} <= emails
    assert "cleo@sso.example.com" not in emails


def test_groups_mapped_to_nothing_end_on_the_refusal_page(
    sso_console: Console, sso_world: SsoWorld, committed_db: None
) -> None:
    from django.contrib.auth import get_user_model
    from selenium.webdriver.common.by import By

    sso_world.provider.set_account("dora", account("dora", "marketing"))
    console = sso_console
    _sign_in(console, sso_world, "dora")
    assert _path(console) == "/sso/callback/"
    card = _by_testid(console, "sso-refused")
    assert "Your groups give no access to Sluice" in card.text
    assert "marketing" in _by_testid(console, "sso-refused-detail").text
    assert "Traceback" not in console.text()
    _shot(console, "refused")
    assert not get_user_model().objects.filter(email="dora@sso.example.com").exists()

    card.find_element(By.LINK_TEXT, "Back to sign-in").click()
    console.wait(lambda d: _path(console) == "/login/", "the login page again")
    assert _by_testid(console, "sso-login").is_displayed()
    assert console.status_of("/keys/") == 302  # still nobody

    # The provider's session still knows her: the button alone refuses her again at once;
    # "Sign in as someone else" makes the provider ask who is signing in.
    sso_world.provider.set_account("dina", account("dina", "sluice-eng"))
    _by_testid(console, "sso-login").click()
    console.wait(lambda d: _path(console) == "/sso/callback/", "refused again, silently")
    _by_testid(console, "sso-switch").click()
    _provider_login(console, sso_world, "dina")
    assert _path(console) == "/"
    assert "dina@sso.example.com" in console.text()


def test_a_forged_state_in_the_browser_is_refused(
    sso_console: Console, sso_world: SsoWorld
) -> None:
    sso_world.provider.set_account("dov", account("dov", "sluice-eng"))
    console = sso_console
    _to_provider(console, sso_world)  # the session now holds a real state
    console.open("/sso/callback/?code=abc&state=forged")
    card = _by_testid(console, "sso-refused")
    assert "(state)" in _by_testid(console, "sso-refused-detail").text
    assert "Back to sign-in" in card.text
    _shot(console, "forged-state")
    assert console.status_of("/keys/") == 302  # not signed in
