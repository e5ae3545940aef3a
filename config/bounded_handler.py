"""Django's ASGI handler with bounds on the request body, for every path outside /v1/ (the
console, the management API, the Django admin).

Django reads the whole body into a temporary file (memory, then disk) before any view or
middleware runs, and `DATA_UPLOAD_MAX_MEMORY_SIZE` only bites later, when a form is parsed
(and not for file uploads at all). So the bounds are enforced here, while the body arrives:

- size: a body over `SLUICE_CONSOLE_MAX_BODY_BYTES` (4 MB) is answered 413 before it is read
  when its Content-Length says so, or as soon as the bytes received pass the limit (chunked
  bodies); the rest is never read and the connection is closed;
- time: the whole body must arrive within `SLUICE_BODY_SECONDS` (30) of the headers; a body
  trickled slower is answered 408 and the connection closed.

The Batch API's uploads (/v1/files) never come here: they have their own, larger limit
(batches/handler.py), as every other /v1/ path has the proxy's
(routing/request_path/proxy_handler.py).
"""

import asyncio
import json
import tempfile
import time
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler


class _BodyTooLarge(Exception):
    pass


class _BodyTooSlow(Exception):
    pass


def _refusal(path: str, status: int, message: str, code: str) -> tuple[list[Any], bytes]:
    """The answer in the management API's error shape under /api/, plain text elsewhere."""
    if path.startswith("/api/"):
        error = {"message": message, "type": "invalid_request_error", "code": code, "param": None}
        body, kind = json.dumps({"error": error}).encode(), b"application/json"
    else:
        body, kind = message.encode(), b"text/plain; charset=utf-8"
    headers = [
        (b"content-type", kind),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    return headers, body


class BoundedDjangoHandler(ASGIHandler):
    def body_limit(self) -> int:
        return settings.SLUICE_CONSOLE_MAX_BODY_BYTES

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        limit = self.body_limit()
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await self._refuse(scope, send, 413, _too_large(limit), "request_too_large")
                return
        try:
            await super().handle(scope, receive, send)
        except _BodyTooLarge:
            await self._refuse(scope, send, 413, _too_large(limit), "request_too_large")
        except _BodyTooSlow:
            seconds = settings.SLUICE_BODY_SECONDS
            message = f"The request body did not arrive within {seconds:g} seconds."
            await self._refuse(scope, send, 408, message, "request_timeout")

    async def read_body(self, receive: Any) -> Any:
        """Django's read_body, bounded in size and time (nothing is sent until it returns)."""
        limit = self.body_limit()
        deadline = time.monotonic() + settings.SLUICE_BODY_SECONDS
        body_file = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - the request owns it
            max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b"
        )
        size = 0
        try:
            while True:
                try:
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        message = await receive()
                except TimeoutError:
                    raise _BodyTooSlow from None
                if message["type"] == "http.disconnect":
                    raise RequestAborted()
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise _BodyTooLarge
                body_file.write(chunk)
                if not message.get("more_body", False):
                    break
        except BaseException:
            body_file.close()
            raise
        body_file.seek(0)
        return body_file

    @staticmethod
    async def _refuse(
        scope: dict[str, Any], send: Any, status: int, message: str, code: str
    ) -> None:
        headers, body = _refusal(scope.get("path", ""), status, message, code)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _too_large(limit: int) -> str:
    return f"The request body is larger than the limit of {limit} bytes."
