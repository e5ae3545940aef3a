"""ASGI entry point: `config.asgi:application`.

Cheap paths are answered before Django: `/healthz`, and the proxy's `/v1/…` through a lean
handler without the middleware stack (routing/proxy_handler.py); the Batch API's
`/v1/files` and `/v1/batches` through the same handler with a larger upload limit.
Everything else (admin, console) goes through Django's full handler. Lifespan shutdown
writes the audit rows still in memory.
"""

import gc
import os
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from django.core.handlers.asgi import ASGIHandler  # noqa: E402

from batches.handler import PATHS as BATCH_PATHS  # noqa: E402
from batches.handler import BatchApiHandler  # noqa: E402
from routing.audit import audit_writer  # noqa: E402
from routing.proxy_handler import ProxyHandler  # noqa: E402
from routing.upstream import close_sessions  # noqa: E402

_HEALTH_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]


class Application:
    def __init__(self) -> None:
        self.django = ASGIHandler()
        self.proxy = ProxyHandler()
        self.batches = BatchApiHandler()  # /v1/files, /v1/batches: larger uploads

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            path = scope["path"]
            if path.startswith("/v1/"):
                if path.startswith(BATCH_PATHS):
                    await self.batches(scope, receive, send)
                else:
                    await self.proxy(scope, receive, send)
            elif path == "/healthz":
                await send(
                    {"type": "http.response.start", "status": 200, "headers": _HEALTH_HEADERS}
                )
                await send({"type": "http.response.body", "body": b'{"status":"ok"}'})
            else:
                await self.django(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # Everything loaded so far lives as long as the process: keep the garbage
                # collector from scanning it again and again under load.
                gc.collect()
                gc.freeze()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await audit_writer.flush()
                await close_sessions()
                await send({"type": "lifespan.shutdown.complete"})
                return


application = Application()
