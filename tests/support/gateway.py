"""The gateway under uvicorn as a subprocess, on the test database."""

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connection

from tests.support.processes import free_port, start_process, stop_process


@dataclass
class GatewayHandle:
    url: str  # base URL without /v1
    max_body_bytes: int
    pid: int = 0  # uvicorn's process (one worker: the process that serves)


def child_database_url() -> str:
    """The test database's URL, for a gateway (or runner) subprocess."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def start_gateway(
    database_url: str,
    *,
    workers: int = 1,
    extra_env: dict[str, str] | None = None,
    stderr: Any = None,
) -> Iterator[GatewayHandle]:
    """Yields a running gateway under uvicorn; stops it when resumed (`yield from` it in a
    fixture, or `next()` it twice). `extra_env` and `stderr` for tests that need their own."""
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
        # As in production (docs/operations.md): a deadline for request headers, and idle
        # connections kept 75 s (at uvicorn's 5 s a client that honours a Retry-After of 5 s
        # or more sends its retry on a connection the gateway is closing: Codex CLI then
        # reports "error sending request" instead of the 503 it was told).
        "--http",
        "config.http_protocol:SluiceHttpProtocol",
        "--timeout-keep-alive",
        "75",
    ]
    proc = start_process(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", *args],
        url=f"http://127.0.0.1:{port}/healthz",
        env=env,
        stderr=stderr,
    )
    yield GatewayHandle(f"http://127.0.0.1:{port}", max_body, proc.pid)
    stop_process(proc)
