"""What a load balancer asks a worker: is it alive, and should it get calls.

Liveness (`/healthz/live`, `/healthz?live`) is 200 while the process answers. Readiness
(`/healthz`, `/healthz/ready`) is 503 while the worker drains (config/draining.py), or when
the database or Redis (with `REDIS_URL`) has not answered within
`SLUICE_HEALTH_TIMEOUT_SECONDS` for `SLUICE_HEALTH_GRACE_SECONDS` on end. The grace is for
the fleet: the database and Redis are shared, so a Redis failover or a PgBouncer restart
fails every worker's check at once, and a load balancer that took them all out would refuse
every call for a blip the workers ride out (cached keys, per-worker counters); within it the
answer is 200 `degraded`. The body names each check and what failed (an error's class, never
its message: a message may name hosts or users). Checks never block the event loop: the
database is asked from a thread of its own, Redis with the async client, and one result
serves every probe for `SLUICE_HEALTH_CACHE_SECONDS`, however many arrive; past that a probe
gets the last result at once while a new check runs (only the first probe waits for one).
"""

import asyncio
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import connection

from config.draining import worker_drain

OK = "ok"


def _ask_database() -> None:
    """SELECT 1 on this thread's connection, handed back (to the pool) after: a probe that
    holds a connection between checks would take one from the calls."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connection.close()


def _failure(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timeout"
    return f"error: {type(exc).__name__}"


class Readiness:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sluice-health")
        self._database: Future[None] | None = None  # the query still running, if one is
        self._checked_at = -1e9
        self._checks: dict[str, str] = {}
        self._running: asyncio.Task[dict[str, str]] | None = None
        self._failing_since: dict[str, float] = {}  # check -> when it began to fail

    async def _check_database(self) -> str:
        # A query that hangs keeps the thread: later probes report it instead of queueing.
        if self._database is None or self._database.done():
            self._database = self._executor.submit(_ask_database)
        try:
            await asyncio.wait_for(
                asyncio.wrap_future(self._database), settings.SLUICE_HEALTH_TIMEOUT_SECONDS
            )
        except Exception as exc:  # whatever the driver raised: reported, never raised
            return _failure(exc)
        return OK

    async def _check_redis(self) -> str:
        from core.redis_client import redis_client

        try:
            async with asyncio.timeout(settings.SLUICE_HEALTH_TIMEOUT_SECONDS):
                await redis_client(settings.REDIS_URL).ping()
        except Exception as exc:
            return _failure(exc)
        return OK

    async def _check(self) -> dict[str, str]:
        names = ["database"]
        checks = [self._check_database()]
        if settings.REDIS_URL:
            names.append("redis")
            checks.append(self._check_redis())
        results = await asyncio.gather(*checks)
        return dict(zip(names, results, strict=True))

    async def checks(self) -> dict[str, str]:
        """The last result, at once; a stale one starts a new check (one, shared by every
        probe) for the probes after. Only the first probe waits for a check: a probe that
        waited on a database that hangs would take as long as the check's timeout, and a
        load balancer's check timeout shorter than that would take every host out at once,
        the very thing the grace is for."""
        stale = time.monotonic() - self._checked_at >= settings.SLUICE_HEALTH_CACHE_SECONDS
        if stale and (self._running is None or self._running.done()):
            self._running = asyncio.get_running_loop().create_task(self._check())
            self._running.add_done_callback(self._record)
        if self._checks or self._running is None:
            return self._checks
        return await asyncio.shield(self._running)

    def _record(self, task: asyncio.Task[dict[str, str]]) -> None:
        if task.cancelled():
            return
        checks, now = task.result(), time.monotonic()
        for name, result in checks.items():
            if result == OK:
                self._failing_since.pop(name, None)
            else:
                self._failing_since.setdefault(name, now)
        self._checks, self._checked_at = checks, now

    def _past_grace(self, checks: dict[str, str]) -> bool:
        """A check has failed for longer than the grace."""
        now, grace = time.monotonic(), settings.SLUICE_HEALTH_GRACE_SECONDS
        return any(
            now - self._failing_since.get(name, now) >= grace
            for name, result in checks.items()
            if result != OK
        )

    async def answer(self) -> tuple[int, bytes]:
        if worker_drain.draining:
            status, checks = "unavailable", {"worker": "draining"}
        else:
            checks = {"worker": OK} | await self.checks()
            if all(result == OK for result in checks.values()):
                status = OK
            else:
                status = "unavailable" if self._past_grace(checks) else "degraded"
        body = {"status": status, "checks": checks}
        code = 503 if status == "unavailable" else 200
        return code, json.dumps(body, separators=(",", ":")).encode()


def is_liveness(scope: dict[str, Any]) -> bool:
    return scope["path"] == "/healthz/live" or scope.get("query_string") == b"live"


LIVE_BODY = b'{"status":"ok"}'
HEALTH_PATHS = frozenset({"/healthz", "/healthz/live", "/healthz/ready"})
readiness = Readiness()
