"""Shared fixtures. End-to-end tests run the real thing: the upstream simulator and the
gateway under uvicorn as subprocesses on free loopback ports, sharing the test database."""

import os
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check: Callable[[], T | None], *, timeout: float = 10.0, every: float = 0.05) -> T:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except (httpx.HTTPError, OSError):
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(every)


def _start(args: list[str], *, url: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(args, cwd=ROOT, env=env)
    try:
        wait_until(
            lambda: proc.poll() is None and httpx.get(url, timeout=1).status_code < 500, timeout=30
        )
    except AssertionError:
        proc.kill()
        raise
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@dataclass
class SimulatorHandle:
    url: str  # base URL without /v1

    def set_capacity(self, model: str, capacity: int) -> None:
        httpx.post(
            f"{self.url}/admin/models/{model}", json={"capacity": capacity}
        ).raise_for_status()

    def stats(self, model: str) -> dict[str, Any]:
        return httpx.get(f"{self.url}/stats").json()["models"][model]


def _simulator(*args: str) -> Iterator[SimulatorHandle]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(
        [sys.executable, "-m", "routing.simulator", "--port", str(port), *args],
        url=f"{url}/stats",
    )
    yield SimulatorHandle(url)
    _stop(proc)


@pytest.fixture(scope="session")
def simulator() -> Iterator[SimulatorHandle]:
    """Answers at once: models big (4), medium (16), small (64)."""
    yield from _simulator(
        "--model", "big:4", "--model", "medium:16", "--model", "small:64", "--model", "tiny:0"
    )


@pytest.fixture(scope="session")
def slow_simulator() -> Iterator[SimulatorHandle]:
    """Streams 40 chunks, 50 ms apart: long enough to hang up in the middle."""
    yield from _simulator("--model", "slow:8", "--token-latency-ms", "50", "--output-tokens", "40")


@pytest.fixture(scope="session")
def django_db_modify_db_settings() -> None:
    """The test process itself runs without the psycopg pool: a pool opened before the test
    database exists would keep pointing at the real one. The gateway subprocess uses it."""
    from django.conf import settings

    settings.DATABASES["default"].get("OPTIONS", {}).pop("pool", None)


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


def _child_database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def e2e_config(simulator: SimulatorHandle, slow: SimulatorHandle) -> dict[str, Any]:
    """The demo config pointed at the test simulators, plus a slow route and a route the
    demo application may not use."""
    raw = tomllib.loads((ROOT / "config" / "demo.toml").read_text())
    raw["upstreams"][0]["base_url"] = f"{simulator.url}/v1"
    for deployment in raw["deployments"]:
        # Tests make these full on purpose; their breakers must not open for later tests.
        deployment["breaker_threshold"] = 1000
    raw["deployments"].append(
        {"name": "tiny", "upstream": "simulator", "model": "tiny", "breaker_threshold": 1000}
    )
    raw["upstreams"].append({"name": "slow-sim", "base_url": f"{slow.url}/v1"})
    raw["deployments"].append({"name": "slow", "upstream": "slow-sim", "model": "slow"})
    raw["routes"] += [
        {"name": "slow", "chain": ["slow"]},
        {"name": "secret", "chain": ["small"]},
        # Always full: three quick tries, then 503.
        {"name": "full", "chain": ["tiny"], "max_attempts": 3, "backoff_base": 0.05},
    ]
    raw["applications"][0]["routes"] += ["slow", "full"]
    return raw


@dataclass
class GatewayHandle:
    url: str  # base URL without /v1
    max_body_bytes: int


@pytest.fixture(scope="session")
def gateway(
    django_db_setup: None,
    django_db_blocker: Any,
    simulator: SimulatorHandle,
    slow_simulator: SimulatorHandle,
) -> Iterator[GatewayHandle]:
    from routing.config_file import apply_config, validate_config

    with django_db_blocker.unblock():
        apply_config(validate_config(e2e_config(simulator, slow_simulator)))
        database_url = _child_database_url()
    port = free_port()
    max_body = 64 * 1024
    env = os.environ | {
        "DATABASE_URL": database_url,
        "SLUICE_SECRET_KEY": "test-" + uuid.uuid4().hex,
        "SLUICE_MAX_BODY_BYTES": str(max_body),
        "SLUICE_AUDIT_FLUSH_SECONDS": "0.05",
        "SLUICE_REDIS_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
    }
    proc = _start(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        url=f"http://127.0.0.1:{port}/healthz",
        env=env,
    )
    yield GatewayHandle(f"http://127.0.0.1:{port}", max_body)
    _stop(proc)


@dataclass
class IssuedKey:
    plaintext: str
    prefix: str
    email: str


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

    def issue(**kwargs: Any) -> IssuedKey:
        email = f"{uuid.uuid4().hex[:10]}@example.com"
        member_ensure(email=email, team=Team.objects.get(slug="demo"))
        key, plaintext = key_issue(member_email=email, application_slug="demo", **kwargs)
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
