"""ASGI entry point: `config.asgi:application`.

Cheap paths are answered before Django: `/healthz` (liveness and readiness, config/health.py),
`/metrics` (Prometheus, routing/observability/metrics.py) and the proxy's `/v1/…` through a
lean handler without the middleware stack (routing/request_path/proxy_handler.py); the Batch
API's `/v1/files` and `/v1/batches` through the same handler with a larger upload limit.
Everything else (admin, console, management API) goes through Django's full handler, its body
bounded in size and time (config/bounded_handler.py). Lifespan startup imports the URLs and
builds the upstream clients' TLS contexts (left to the first call, each held the loop),
starts the capacity and budget alert loops (and, with Redis, the metrics push, and takes back
the quota reservations that ended workers of this host left) and chains the drain onto the
server's SIGTERM (config/draining.py); shutdown, once the calls in flight ended or were cut
at the drain's bound, writes the audit rows still in memory.
"""

import asyncio
import json
import logging
import os
from typing import Any

import django

from config.open_files import raise_open_files_limit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
raise_open_files_limit()  # two sockets per open stream: the host's hard limit, not 1,024

from django.conf import settings  # noqa: E402
from django.urls import get_resolver  # noqa: E402
from prometheus_client import CONTENT_TYPE_LATEST  # noqa: E402

from batches.handler import PATHS as BATCH_PATHS  # noqa: E402
from batches.handler import BatchApiHandler  # noqa: E402
from config.bounded_handler import BoundedDjangoHandler  # noqa: E402
from config.draining import worker_drain  # noqa: E402
from config.health import HEALTH_PATHS, LIVE_BODY, is_liveness, readiness  # noqa: E402
from core.gc_schedule import hand_back, take_over  # noqa: E402
from quotas.counters import quota_counters  # noqa: E402
from routing.observability.audit import audit_writer  # noqa: E402
from routing.observability.budget_alert import budget_alert_loop  # noqa: E402
from routing.observability.capacity_alert import capacity_alert_loop  # noqa: E402
from routing.observability.loop_lag import loop_lag_probe  # noqa: E402
from routing.observability.metrics import (  # noqa: E402
    metrics_allowed,
    metrics_push_loop,
    metrics_text,
    push_to_redis,
)
from routing.request_path.proxy_handler import ProxyHandler  # noqa: E402
from routing.request_path.upstream import close_sessions, prepare_clients  # noqa: E402

log = logging.getLogger("sluice.worker")

_METRICS_REFUSED = {
    401: b'{"error": "a valid bearer token (SLUICE_METRICS_TOKEN) is required"}',
    403: b'{"error": "/metrics answers loopback clients only (set SLUICE_METRICS_TOKEN)"}',
}
_HEALTH_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
_DRAINING_BODY = json.dumps(
    {
        "error": {
            "message": "This Sluice worker is shutting down; retry (another worker answers).",
            "type": "server_error",
            "code": "worker_draining",
            "param": None,
        }
    }
).encode()
_DRAINING_HEADERS = [*_HEALTH_HEADERS, (b"retry-after", b"1"), (b"connection", b"close")]


class Application:
    def __init__(self) -> None:
        self.django = BoundedDjangoHandler()  # bodies bounded in size and time
        self.proxy = ProxyHandler()
        self.batches = BatchApiHandler()  # /v1/files, /v1/batches: larger uploads
        self._background: list[asyncio.Task[None]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            path = scope["path"]
            if path.startswith("/v1/"):
                # A call that reaches a draining worker (in the moment before uvicorn closes
                # its socket) is served, not refused: behind a load balancer a refusal would
                # be the client's error, and the drain's bound still holds it.
                handler = self.batches if path.startswith(BATCH_PATHS) else self.proxy
                await self._call(handler, scope, receive, send)
            elif path in HEALTH_PATHS:
                if is_liveness(scope):
                    await _answer(send, 200, LIVE_BODY, _HEALTH_HEADERS)
                else:
                    await _answer(send, *await readiness.answer(), _HEALTH_HEADERS)
            elif path == "/metrics":
                await self._metrics(scope, send)
            else:
                await self.django(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _call(self, handler: Any, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """A call the drain's bound may cut: cut before its answer began, it is answered 503
        `worker_draining`; cut mid-answer, its connection is closed (the proxy has recorded
        it as a client that left)."""
        started = False

        async def tracked_send(message: dict[str, Any]) -> None:
            nonlocal started
            started = True
            await send(message)

        with worker_drain.call():
            try:
                await handler(scope, receive, tracked_send)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not worker_drain.draining or task is None:
                    raise
                task.uncancel()
                if not started:
                    await _answer(send, 503, _DRAINING_BODY, _DRAINING_HEADERS)

    async def _metrics(self, scope: dict[str, Any], send: Any) -> None:
        status = metrics_allowed(scope)
        if status == 200:
            body, headers = await metrics_text(), [(b"content-type", CONTENT_TYPE_LATEST.encode())]
        else:
            body = _METRICS_REFUSED[status]
            headers = _HEALTH_HEADERS
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        """Start and stop the worker's own tasks. A failure is logged and told to the server
        here: raised instead, uvicorn (`--lifespan auto`, its default) would take it for an
        application without a lifespan and say so at INFO only, then serve a worker that
        never started its tasks, or stop one without writing its audit rows, silently."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self._start()
                except Exception as exc:
                    log.exception("worker start failed")
                    for task in self._background:
                        task.cancel()
                    hand_back()
                    await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                failed = await self._stop()
                if failed:
                    await send({"type": "lifespan.shutdown.failed", "message": failed})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                return

    def _start(self) -> None:
        # Every app's URLs and views imported now, before the worker serves: imported by its
        # first request, they held the loop (0.3-0.4 s) and every call that came in meanwhile.
        get_resolver().url_patterns  # noqa: B018 - imports on first access
        prepare_clients()
        loop = asyncio.get_running_loop()
        clock = take_over(full_every=settings.SLUICE_GC_FULL_SECONDS)
        if clock is not None:
            self._background.append(clock)
        # Every worker runs it; a Redis lock lets one of them evaluate each round.
        self._background.append(loop.create_task(capacity_alert_loop()))
        self._background.append(loop.create_task(budget_alert_loop()))
        self._background.append(loop.create_task(loop_lag_probe()))
        worker_drain.install(loop)
        audit_writer.start()
        if settings.REDIS_URL:
            self._background.append(loop.create_task(metrics_push_loop()))
            # What workers of this host that ended (killed) left reserved.
            counters = quota_counters()
            self._background.append(loop.create_task(counters.take_back_ended()))

    async def _stop(self) -> str:
        """Every step, whatever an earlier one did (the audit rows first); what failed, ""
        when nothing did."""
        worker_drain.begin()  # also when stopped another way than by a signal
        for task in self._background:
            task.cancel()
        steps = [("audit rows", audit_writer.flush)]
        if settings.REDIS_URL:
            steps.append(("metrics push", push_to_redis))
        steps.append(("upstream connections", close_sessions))
        failed = []
        for name, step in steps:
            try:
                await step()
            except Exception:
                log.exception("worker stop: %s failed", name)
                failed.append(name)
        hand_back()
        return f"worker stop: {', '.join(failed)} failed" if failed else ""


async def _answer(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


application = Application()
