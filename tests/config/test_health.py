"""/healthz as a load balancer reads it: liveness while the process answers, readiness that
fails while the worker drains or when the database or Redis does not answer, with a body that
names the failed check and never a secret."""

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from config.asgi import application
from config.draining import worker_drain
from tests.support import free_port, start_process, stop_process, wait_until


async def _get(path: str, query: bytes = b"") -> tuple[int, dict[str, str], Any]:
    """One request through the ASGI application, in this process."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST" if path.startswith("/v1/") else "GET",
        "path": path,
        "query_string": query,
        "headers": [],
        "client": ("127.0.0.1", 1),
    }
    await application(scope, receive, send)
    headers = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    return sent[0]["status"], headers, json.loads(sent[1]["body"])


@pytest.fixture
def draining() -> Iterator[None]:
    worker_drain.since = 0.0
    try:
        yield
    finally:
        worker_drain.since = None


async def test_a_draining_worker_is_not_ready_but_alive(draining):
    status, _, body = await _get("/healthz")
    assert (status, body) == (503, {"status": "unavailable", "checks": {"worker": "draining"}})
    assert (await _get("/healthz/ready"))[0] == 503
    assert (await _get("/healthz/live"))[:3:2] == (200, {"status": "ok"})
    assert (await _get("/healthz", b"live"))[0] == 200


async def test_the_drain_bound_cuts_a_call_not_yet_answered_with_a_503(settings):
    """A call still waiting when the bound passes is answered 503, not left hanging."""
    settings.SLUICE_DRAIN_SECONDS = 0.05
    sent: list[dict[str, Any]] = []
    gate = asyncio.Event()

    async def stuck(scope: Any, receive: Any, send: Any) -> None:
        await gate.wait()  # a call queued for a slot that never comes

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    call = asyncio.create_task(application._call(stuck, {}, None, send))
    await asyncio.sleep(0)
    assert worker_drain.in_flight() == 1
    loop = asyncio.get_running_loop()
    worker_drain._loop = loop
    try:
        worker_drain.begin()
        await asyncio.wait_for(call, 2)
    finally:
        worker_drain.since = None
    assert sent[0]["status"] == 503
    headers = dict(sent[0]["headers"])
    assert (headers[b"retry-after"], headers[b"connection"]) == (b"1", b"close")
    assert json.loads(sent[1]["body"])["error"]["code"] == "worker_draining"
    assert worker_drain.in_flight() == 0


def test_readiness_names_the_unreachable_database_and_redis_without_their_secrets():
    """A gateway whose PostgreSQL and Redis do not answer: alive, not ready, and the body
    says which check failed without the URLs' passwords."""
    port = free_port()
    nothing = free_port()  # nothing listens there
    env = os.environ | {
        "DATABASE_URL": f"postgres://sluice:hunter2-db@127.0.0.1:{nothing}/sluice",
        "REDIS_URL": f"redis://:hunter2-redis@127.0.0.1:{nothing}/0",
        "SLUICE_SECRET_KEY": "test-" + uuid.uuid4().hex,
        "SLUICE_AUDIT_SPOOL_DIR": "",
        "SLUICE_HEALTH_GRACE_SECONDS": "0",
    }
    args = ["config.asgi:application", "--port", str(port), "--log-level", "critical"]
    url = f"http://127.0.0.1:{port}"
    proc = start_process(
        [sys.executable, "-m", "uvicorn", *args], url=f"{url}/healthz/live", env=env
    )
    try:
        ready = httpx.get(f"{url}/healthz", timeout=5)
        assert ready.status_code == 503
        checks = ready.json()["checks"]
        assert checks["worker"] == "ok"
        assert checks["database"] != "ok" and checks["redis"] != "ok"
        assert "hunter2" not in ready.text and str(nothing) not in ready.text
        assert httpx.get(f"{url}/healthz?live", timeout=5).status_code == 200
    finally:
        stop_process(proc)


def test_a_shared_dependency_failing_briefly_degrades_and_only_then_fails(tmp_path):
    """Redis away for less than the grace: 200 `degraded`, so a failover does not take every
    worker out of the load balancer at once; longer: 503; back: ready again."""
    port, redis_port = free_port(), free_port()  # no Redis there yet
    env = os.environ | {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'health.sqlite3'}",
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "SLUICE_SECRET_KEY": "test-" + uuid.uuid4().hex,
        "SLUICE_AUDIT_SPOOL_DIR": "",
        "SLUICE_HEALTH_GRACE_SECONDS": "1.5",
        "SLUICE_HEALTH_CACHE_SECONDS": "0",
    }
    args = ["config.asgi:application", "--port", str(port), "--log-level", "critical"]
    url = f"http://127.0.0.1:{port}/healthz"
    proc = start_process([sys.executable, "-m", "uvicorn", *args], url=f"{url}/live", env=env)
    redis = None
    try:
        first = httpx.get(url, timeout=5)
        assert (first.status_code, first.json()["status"]) == (200, "degraded")
        assert first.json()["checks"]["database"] == "ok"
        assert first.json()["checks"]["redis"] != "ok"
        wait_until(lambda: httpx.get(url, timeout=5).status_code == 503, timeout=5)
        assert httpx.get(url, timeout=5).json()["status"] == "unavailable"
        redis = subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", ""],
            stdout=subprocess.DEVNULL,
        )
        wait_until(lambda: httpx.get(url, timeout=5).json()["status"] == "ok", timeout=10)
    finally:
        stop_process(proc)
        if redis is not None:
            stop_process(redis)


def test_a_probe_never_waits_on_a_dependency_that_hangs(tmp_path):
    """Redis frozen (SIGSTOP: connections open, no answer): every probe still answers at
    once with the last result while a check runs behind it, then reports the timeout. A
    probe that waited the check's timeout would miss a load balancer's shorter one, and
    every host would leave the pool at once."""
    import signal
    import time

    port, redis_port = free_port(), free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    env = os.environ | {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'health.sqlite3'}",
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "SLUICE_SECRET_KEY": "test-" + uuid.uuid4().hex,
        "SLUICE_AUDIT_SPOOL_DIR": "",
        "SLUICE_HEALTH_TIMEOUT_SECONDS": "1",
        "SLUICE_HEALTH_CACHE_SECONDS": "0",
    }
    args = ["config.asgi:application", "--port", str(port), "--log-level", "critical"]
    url = f"http://127.0.0.1:{port}/healthz/ready"
    proc = start_process([sys.executable, "-m", "uvicorn", *args], url=f"{url[:-6]}/live", env=env)
    try:
        wait_until(lambda: httpx.get(url, timeout=5).json()["status"] == "ok", timeout=10)
        redis.send_signal(signal.SIGSTOP)
        slowest, seen = 0.0, set()
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            began = time.monotonic()
            answer = httpx.get(url, timeout=5)
            slowest = max(slowest, time.monotonic() - began)
            seen.add(answer.json()["checks"]["redis"])
            time.sleep(0.1)
        assert slowest < 0.5, f"a probe took {slowest:.2f} s"
        assert seen == {"ok", "timeout"}, seen  # the last result, then the check's own
    finally:
        redis.send_signal(signal.SIGCONT)
        stop_process(proc)
        stop_process(redis)
