"""Fixtures of the end-to-end tests (a real gateway under uvicorn, the openai SDK): gateways
with several workers, and for the Batch API a simulator whose answers take a while (so a batch
is still running when a test cancels it, kills its runner or closes its window), a gateway
sharing one batch-file folder and one Redis prefix with the runners the tests start. The
single-worker gateway, the simulators and the scenario stay in tests/conftest.py (their helpers
in tests/support): console, accounts and routing tests outside this folder use them too."""

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.support import (
    ROOT,
    GatewayHandle,
    SimulatorHandle,
    start_gateway,
    start_simulator,
    wait_until,
)


@pytest.fixture(scope="session")
def gateway_two_workers(e2e_database: str) -> Iterator[GatewayHandle]:
    """Two uvicorn workers behind one port: what they share must live in Redis."""
    yield from start_gateway(e2e_database, workers=2)


@pytest.fixture(scope="session")
def gateway_four_workers(e2e_database: str) -> Iterator[GatewayHandle]:
    """Four workers: limits must hold across processes (through Redis)."""
    yield from start_gateway(e2e_database, workers=4)


LAG_MS = 300


@pytest.fixture(scope="session")
def lag_simulator() -> Iterator[SimulatorHandle]:
    """Model `lag`: 8 in flight, each answer after 300 ms."""
    yield from start_simulator("--model", "lag:8", "--latency-ms", str(LAG_MS))


@pytest.fixture(scope="session")
def batch_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return {
        "SLUICE_BATCH_FILES_DIR": str(tmp_path_factory.mktemp("batch-files")),
        "SLUICE_BATCH_LEASE_SECONDS": "2",
        "SLUICE_REDIS_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
        "SLUICE_AUDIT_FLUSH_SECONDS": "0.05",
    }


@pytest.fixture(scope="session")
def batch_apps(
    e2e_database: str, lag_simulator: SimulatorHandle, django_db_blocker: Any
) -> dict[str, str]:
    """Route `lag` (deployment lag: 8 slots, 2 kept for interactive calls) and three
    applications with routes fast and lag: `batchapp`, `nightly` (the tests set its batch
    window) and `limited` (2 calls in flight at most); and `rivalapp`, of another team."""
    from routing.catalog.config_file import apply_config, validate_config

    config = {
        "upstreams": [{"name": "lag-sim", "base_url": f"{lag_simulator.url}/v1"}],
        "deployments": [
            {
                "name": "lag",
                "upstream": "lag-sim",
                "model": "lag",
                "max_concurrency": 8,
                "breaker_threshold": 1000,
            }
        ],
        "routes": [{"name": "lag", "chain": ["lag"]}],
        "teams": [{"slug": "rival", "name": "Rival team"}],
        "applications": [
            {"slug": "rivalapp", "team": "rival", "routes": ["fast"]},
            {"slug": "batchapp", "team": "demo", "routes": ["fast", "lag"]},
            {"slug": "nightly", "team": "demo", "routes": ["fast", "lag"]},
            {"slug": "limited", "team": "demo", "routes": ["fast", "lag"]},
        ],
        # Two calls at a time: a batch of `limited` meets its limit at once.
        "limits": [{"scope": "application", "name": "limited", "max_concurrency": 2}],
    }
    with django_db_blocker.unblock():
        apply_config(validate_config(config))
    return {"batchapp": "batchapp", "nightly": "nightly"}


@pytest.fixture(scope="session")
def batch_gateway(
    e2e_database: str, batch_apps: dict[str, str], batch_env: dict[str, str]
) -> Iterator[GatewayHandle]:
    yield from start_gateway(e2e_database, extra_env=batch_env)


@pytest.fixture
def start_runner(
    e2e_database: str, batch_env: dict[str, str], tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start `manage.py run_batches` processes; all are stopped after the test."""
    procs: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        """A runner, once it is ready (its log says so)."""
        env = os.environ | batch_env | {"DATABASE_URL": e2e_database, "SLUICE_LOG_LEVEL": "INFO"}
        log = tmp_path / f"runner-{len(procs)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "run_batches", *args],
                cwd=ROOT,
                env=env,
                stderr=out,
            )
        procs.append(proc)
        wait_until(lambda: proc.poll() is None and b"started" in log.read_bytes(), timeout=30)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def batch_client(
    batch_gateway: GatewayHandle, issue_key: Callable[..., Any]
) -> Callable[[str], OpenAI]:
    """An SDK client with a new key of the given application."""

    def client(application: str = "batchapp", team: str = "demo") -> OpenAI:
        key = issue_key(application=application, team=team)
        return OpenAI(base_url=f"{batch_gateway.url}/v1", api_key=key.plaintext, max_retries=0)

    return client
