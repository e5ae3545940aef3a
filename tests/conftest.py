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


def wait_until_served(base_url: str, key: str, model: str, messages: list[dict]) -> None:
    """Wait until the gateway's catalog (refreshed within SLUICE_CATALOG_CACHE_SECONDS)
    serves `model` to this key: for tests that apply config while the gateway runs."""
    wait_until(
        lambda: (
            httpx.post(
                f"{base_url}/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                json={"model": model, "messages": messages},
            ).status_code
            == 200
        )
    )


def _start(
    args: list[str], *, url: str, env: dict[str, str] | None = None, stderr: Any = None
) -> subprocess.Popen:
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stderr=stderr)
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

    def set_faults(self, model: str, faults: dict[str, float]) -> None:
        httpx.post(f"{self.url}/admin/models/{model}", json={"faults": faults}).raise_for_status()

    def stats(self, model: str) -> dict[str, Any]:
        return httpx.get(f"{self.url}/stats").json()["models"][model]


def _simulator(*args: str) -> Iterator[SimulatorHandle]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(
        [sys.executable, "-m", "simulator", "--port", str(port), *args],
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


FAULTY_MODELS = [
    "srv",
    "rl",
    "rlbare",
    "ctx",
    "auth",
    "nf",
    "hang",
    "reset",
    "garbage",
    "cut",
    "brk",
    "shared",
    "drn",
    "ok",
    "ok2",
    "t1",
    "t2",
    "t3",
]
FAULTS = {
    "srv": "server_error",
    "rl": "rate_limit=1:0.2",
    "rlbare": "rate_limit_bare",
    "ctx": "context_length",
    "auth": "auth",
    "nf": "not_found",
    "hang": "hang",
    "reset": "reset",
    "garbage": "garbage",
    "cut": "stream_cut",
    "t1": "capacity",
}


@pytest.fixture(scope="session")
def faulty_simulator() -> Iterator[SimulatorHandle]:
    """One model per upstream failure class (see FAULTS), plus healthy ones."""
    args = [arg for m in FAULTY_MODELS for arg in ("--model", f"{m}:16")]
    for model, fault in FAULTS.items():
        spec = fault if "=" in fault else f"{fault}=1"
        args += ["--fault", f"{model}:{spec}"]
    yield from _simulator(*args)


def _child_database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


SCENARIO = ROOT / "tests" / "e2e_scenario.toml"


def e2e_config(
    simulator: SimulatorHandle, slow: SimulatorHandle, faulty: SimulatorHandle
) -> dict[str, Any]:
    """tests/e2e_scenario.toml (the config-file format), its upstreams pointed at the test
    simulators."""
    raw = tomllib.loads(SCENARIO.read_text())
    urls = {"simulator": simulator.url, "slow-sim": slow.url, "faulty": faulty.url}
    for upstream in raw["upstreams"]:
        upstream["base_url"] = f"{urls[upstream['name']]}/v1"
    return raw


@dataclass
class GatewayHandle:
    url: str  # base URL without /v1
    max_body_bytes: int
    pid: int = 0  # uvicorn's process (one worker: the process that serves)


def _gateway(
    database_url: str,
    *,
    workers: int = 1,
    extra_env: dict[str, str] | None = None,
    stderr: Any = None,
) -> Iterator[GatewayHandle]:
    """A gateway under uvicorn; `extra_env` and `stderr` for tests that need their own."""
    port = free_port()
    max_body = 64 * 1024
    env = os.environ | {
        "DATABASE_URL": database_url,
        "SLUICE_SECRET_KEY": "test-" + uuid.uuid4().hex,
        "SLUICE_MAX_BODY_BYTES": str(max_body),
        "SLUICE_AUDIT_FLUSH_SECONDS": "0.05",
        # The browser tests log in often from one address (throttling: tests/accounts).
        "SLUICE_LOGIN_RATE_ADDRESS": "1000/m",
        "SLUICE_LOGIN_RATE_ACCOUNT": "1000/m",
        # Breakers opened by an earlier run must not be seen by this one.
        "SLUICE_REDIS_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
        **(extra_env or {}),
    }
    args = [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-access-log",
        "--log-level",
        "warning",
        # As in production (docs/operations.md): a deadline for request headers.
        "--http",
        "config.http_protocol:SluiceHttpProtocol",
    ]
    proc = _start(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", *args],
        url=f"http://127.0.0.1:{port}/healthz",
        env=env,
        stderr=stderr,
    )
    yield GatewayHandle(f"http://127.0.0.1:{port}", max_body, proc.pid)
    _stop(proc)


@pytest.fixture(scope="session")
def e2e_database(
    django_db_setup: None,
    django_db_blocker: Any,
    simulator: SimulatorHandle,
    slow_simulator: SimulatorHandle,
    faulty_simulator: SimulatorHandle,
) -> str:
    """The test database with the end-to-end config applied; its URL for subprocesses."""
    from routing.config_file import apply_config, validate_config

    with django_db_blocker.unblock():
        apply_config(validate_config(e2e_config(simulator, slow_simulator, faulty_simulator)))
        return _child_database_url()


@pytest.fixture(scope="session")
def gateway(e2e_database: str) -> Iterator[GatewayHandle]:
    yield from _gateway(e2e_database)


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
