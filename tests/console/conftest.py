"""Browser-test fixtures: the gateway under real uvicorn (the shared end-to-end database and
simulators of tests/conftest.py) driven by Debian's headless Chromium through selenium.

Browser tests carry `@pytest.mark.browser`; they skip, with the reason, when
/usr/bin/chromium or /usr/bin/chromedriver is missing or SLUICE_SKIP_BROWSER_TESTS=1 (CI's
second database pass, so they run once)."""

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.browser import Console, browser_skip_reason, start_chromium, stop_chromium
from tests.console.people import PASSWORD, People, make_people
from tests.console.sso import CODE_TTL_SECONDS, SECRET_ENV, SsoWorld, sso_section
from tests.support import GatewayHandle, free_port, start_gateway
from tests.support.oidc_provider import oidc_skip_reason, start_oidc_provider


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = browser_skip_reason()
    if reason is None:
        return
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def console_people(e2e_database: str, django_db_blocker: Any) -> People:
    """One person per role, committed with a real password: the demo team is `home` (its
    application reaches the live simulator), a second team `rival`."""
    from accounts.models import Team

    with django_db_blocker.unblock():
        return make_people(tag="b", password=PASSWORD, home=Team.objects.get(slug="demo"))


@pytest.fixture(scope="session")
def download_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sluice-downloads-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def chromium(download_dir: Path) -> Iterator[Any]:
    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    driver = start_chromium(download_dir)
    yield driver
    stop_chromium(driver)


@pytest.fixture
def console(chromium: Any, gateway: GatewayHandle, console_people: People) -> Iterator[Console]:
    emails = {role: user.email for role, user in console_people.users.items()}
    c = Console(chromium, gateway.url, emails, PASSWORD)
    yield c
    c.logout()


@pytest.fixture(scope="session")
def sso_world(e2e_database: str, django_db_blocker: Any) -> Iterator[SsoWorld]:
    """A provider with a short code lifetime, a second one whose ID tokens name another
    audience, and a gateway signing in through the first ([sso] applied like any config
    file). The [sso] row is removed after, so other console tests see password login."""
    reason = oidc_skip_reason()
    if reason:
        pytest.skip(reason)
    from accounts.models import SsoConfig
    from routing.catalog.config_file import apply_config, validate_config

    port, other_port = free_port(), free_port()
    issuer = f"http://localhost:{port}"
    gateways = start_gateway(e2e_database, extra_env={SECRET_ENV: "sluice-oidc-test-secret"})
    gateway = next(gateways)
    callback = [f"{gateway.url}/sso/callback/"]
    providers = start_oidc_provider(
        port, redirect_uris=callback, accounts={}, code_ttl_seconds=CODE_TTL_SECONDS
    )
    others = start_oidc_provider(
        other_port, redirect_uris=callback, accounts={}, wrong_audience=True
    )
    provider, other = next(providers), next(others)
    assert provider.issuer == issuer
    with django_db_blocker.unblock():
        apply_config(
            validate_config(
                {
                    "teams": [{"slug": "sso-eng"}, {"slug": "sso-research"}],
                    "sso": sso_section(provider),
                }
            )
        )
    try:
        yield SsoWorld(gateway, provider, other)
    finally:
        with django_db_blocker.unblock():
            SsoConfig.objects.all().delete()
        for started in (others, providers, gateways):
            next(started, None)
