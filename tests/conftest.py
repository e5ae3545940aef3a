"""Shared fixtures. End-to-end tests run the real thing: the upstream simulator and the
gateway under uvicorn as subprocesses on free loopback ports, sharing the test database.
The helpers behind them are in tests/support."""

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.support import (
    GatewayHandle,
    IssuedKey,
    SimulatorHandle,
    child_database_url,
    e2e_config,
    faulty_simulator_args,
    start_gateway,
    start_simulator,
    wait_until,
)
from tests.support.api import World, api_client, make_world


@pytest.fixture(scope="session")
def simulator() -> Iterator[SimulatorHandle]:
    """Answers at once: models big (4), medium (16), small (64)."""
    yield from start_simulator(
        "--model", "big:4", "--model", "medium:16", "--model", "small:64", "--model", "tiny:0"
    )


@pytest.fixture(scope="session")
def slow_simulator() -> Iterator[SimulatorHandle]:
    """Streams 40 chunks, 50 ms apart: long enough to hang up in the middle."""
    yield from start_simulator(
        "--model", "slow:8", "--token-latency-ms", "50", "--output-tokens", "40"
    )


@pytest.fixture(scope="session")
def django_db_modify_db_settings() -> None:
    """The test process itself runs without the psycopg pool: a pool opened before the test
    database exists would keep pointing at the real one. The gateway subprocess uses it."""
    from django.conf import settings

    settings.DATABASES["default"].get("OPTIONS", {}).pop("pool", None)


@pytest.fixture(scope="session", autouse=True)
def no_change_reader() -> None:
    """Tests in this process read no change log (core/change_log.py) unless they ask: a
    reader would vouch for changes (the caches' trusted time to live) across tests. The
    gateways the end-to-end tests start read it, as deployed."""
    from django.conf import settings

    settings.SLUICE_CHANGE_POLL_SECONDS = 0


@pytest.fixture(scope="session")
def django_db_setup(
    django_test_environment: None, django_db_blocker: Any, django_db_modify_db_settings: None
) -> Iterator[None]:
    """The test database, always. pytest-django makes it only when some test carries the
    django_db mark, and the end-to-end tests don't: their data must be committed for the
    gateway process to see it, so they write through `committed_db` instead."""
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        databases = setup_databases(verbosity=0, interactive=False, aliases={"default"})
    yield
    with django_db_blocker.unblock():
        teardown_databases(databases, verbosity=0)


@pytest.fixture(scope="session")
def faulty_simulator() -> Iterator[SimulatorHandle]:
    """One model per upstream failure class (tests/support/scenario.py: FAULTS), plus healthy
    ones."""
    yield from start_simulator(*faulty_simulator_args())


@pytest.fixture(scope="session")
def e2e_database(
    django_db_setup: None,
    django_db_blocker: Any,
    simulator: SimulatorHandle,
    slow_simulator: SimulatorHandle,
    faulty_simulator: SimulatorHandle,
) -> str:
    """The test database with the end-to-end config applied; its URL for subprocesses."""
    from routing.catalog.config_file import apply_config, validate_config

    with django_db_blocker.unblock():
        apply_config(validate_config(e2e_config(simulator, slow_simulator, faulty_simulator)))
        return child_database_url()


@pytest.fixture(scope="session")
def gateway(e2e_database: str) -> Iterator[GatewayHandle]:
    yield from start_gateway(e2e_database)


@pytest.fixture
def committed_db(django_db_blocker: Any) -> Iterator[None]:
    """Database access outside a test transaction: what the gateway process can see."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def issue_key(gateway: GatewayHandle, committed_db: None) -> Callable[..., IssuedKey]:
    """A new member of the demo team and a key of theirs for the demo application."""
    from accounts.models import Team
    from accounts.services import key_issue, member_ensure

    def issue(application: str = "demo", team: str = "demo", **kwargs: Any) -> IssuedKey:
        email = f"{uuid.uuid4().hex[:10]}@example.com"
        member_ensure(email=email, team=Team.objects.get(slug=team))
        key, plaintext = key_issue(member_email=email, application_slug=application, **kwargs)
        return IssuedKey(plaintext, key.prefix, email)

    return issue


@pytest.fixture
def call_record(committed_db: None) -> Callable[[str], Any]:
    """Wait for the audit record of a request id (the gateway writes them in batches)."""
    from routing.models import CallRecord

    def find(request_id: str, timeout: float = 10.0) -> CallRecord:
        return wait_until(
            lambda: CallRecord.objects.filter(request_id=request_id).first(), timeout=timeout
        )

    return find


# The management API's world: tests/api uses it, and so do tests elsewhere that check an
# API endpoint next to a console page.
@pytest.fixture
def world(db: None) -> World:
    return make_world()


@pytest.fixture
def client_as(world: World) -> Callable[[str], APIClient]:
    return lambda role: api_client(world, role)
