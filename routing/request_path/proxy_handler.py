"""A lean ASGI handler for the proxy's own paths (/v1/…).

Django's ASGIHandler runs every request through the middleware stack, a new thread for its
thread-sensitive context, and the request_started/finished signals, each a thread hop. The
proxy needs none of them (it opens no session, renders no template and closes the database
connections it uses itself), so this handler reads the body (refusing an oversized one
early), resolves the URL and awaits the async view directly. It keeps Django's URL resolver
and disconnect handling. A proxied call's request is a `ProxyRequest` (what the views read,
built in one pass over the scope) and a whole answer is sent as two ASGI messages; the
Batch API's uploads keep Django's request class and its body spooled to a file.
"""

import asyncio
import contextlib
import functools
import io
import logging
import tempfile
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import Resolver404, ResolverMatch, get_resolver

from core.errors import GatewayError, database_unavailable
from routing.observability.audit import new_request_id
from routing.request_path.relay import EventStream

log = logging.getLogger("sluice.proxy")


class BodyTooLarge(Exception):
    pass


class BodyTooSlow(Exception):
    pass


def _too_slow() -> HttpResponse:
    seconds = settings.SLUICE_BODY_SECONDS
    response = GatewayError(
        408,
        f"The request body did not arrive within {seconds:g} seconds.",
        code="request_timeout",
    ).response()
    response["Connection"] = "close"
    return response


def _with_request_id(response: HttpResponseBase) -> HttpResponseBase:
    """Every answer carries a request id, also those that never reach the proxy's path
    (401 from /v1/models, unknown paths, wrong methods, 408, 413)."""
    if "X-Sluice-Request-Id" not in response:
        response["X-Sluice-Request-Id"] = new_request_id()
    return response


def _too_large(limit: int) -> HttpResponse:
    return GatewayError(
        413,
        f"The request body is larger than the limit of {limit} bytes.",
        code="request_too_large",
    ).response()


class ProxyRequest(HttpRequest):
    """What the proxy's views read of a request: `method`, `path`, `headers` (a dict by
    lower-case name, repeated headers joined with commas and names with an underscore left
    out, as Django does), `body` and `META["REMOTE_ADDR"]`. Django's ASGIRequest builds a
    META entry per header, its query dicts and content type for every call (about 20 µs
    of CPU); this is one pass over the scope's headers."""

    def __init__(self, scope: dict[str, Any], body: bytes) -> None:  # no super(): see above
        self.scope = scope
        self.method = scope["method"].upper()
        self.path = self.path_info = scope["path"]
        self.resolver_match = None
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", ()):
            name = raw_name.decode("latin-1").lower()
            if "_" in name:  # ambiguous with a hyphen: Django drops it too
                continue
            value = raw_value.decode("latin-1")
            headers[name] = f"{headers[name]},{value}" if name in headers else value
        self.headers = headers  # type: ignore[assignment]
        client = scope.get("client")
        self.META = {"REMOTE_ADDR": client[0]} if client else {}
        self._body = body
        self._read_started = True


def _head(response: HttpResponseBase) -> dict[str, Any]:
    """The answer's status and headers as an ASGI message (the proxy sets no cookies)."""
    # As stored, (name, value) each: the mapping's items() looks every name up again.
    stored = response.headers._store.values()
    headers = [(k.encode("ascii"), v.encode("latin-1")) for k, v in stored]
    return {"type": "http.response.start", "status": response.status_code, "headers": headers}


@functools.lru_cache(maxsize=256)
def _resolve(path: str) -> ResolverMatch:
    """The proxy's few paths, resolved once each rather than on every request."""
    return get_resolver().resolve(path)


class ProxyHandler(ASGIHandler):
    # Requests as ProxyRequest; the Batch API's handler (multipart uploads) says False.
    lean_requests = True

    def body_limit(self) -> int:
        """Bytes a request body may have; a handler for uploads may allow more."""
        return settings.SLUICE_MAX_BODY_BYTES

    def load_middleware(self, is_async: bool = False) -> None:
        self._middleware_chain = self._respond  # no middleware on the proxy path

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.handle(scope, receive, send)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            body_file = await self.read_body(receive, scope)
        except RequestAborted:
            return
        except BodyTooLarge:
            await self.send_response(_with_request_id(_too_large(self.body_limit())), send)
            return
        except BodyTooSlow:
            await self.send_response(_with_request_id(_too_slow()), send)
            return
        if self.lean_requests and not scope.get("root_path") and not settings.FORCE_SCRIPT_NAME:
            request, error_response = ProxyRequest(scope, body_file.read()), None
        else:  # Django's request: uploads, or a path under a script prefix
            request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(_with_request_id(error_response), send)
            return

        async def respond() -> None:
            response = _with_request_id(await self._respond(request))
            try:
                with contextlib.suppress(asyncio.CancelledError):  # client left mid-answer
                    await self.send_response(response, send)
            finally:
                # What response.close() would do, without its request_finished signal,
                # whose receivers would close database connections from the event loop
                # (the proxy holds none there). A stream never started settles here.
                for closer in response._resource_closers:
                    closer()
                # And what Django's handler does: an upload's temporary file is closed (and
                # removed) now, quietly when the storage moved it, not at collection time.
                request.close()

        # Like Django's handler, a client that disconnects cancels the view. Unlike it, the
        # view runs in this task (one task a call, not two) and the watcher returns rather
        # than raises: a task that ended in an exception held the call's frames in a
        # reference cycle, and under load those cycles cost full collections of tens of
        # milliseconds that stalled every call on the worker.
        handler = asyncio.current_task()
        assert handler is not None
        answered = False

        async def watch_for_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if not answered:
                handler.cancel()

        watcher = asyncio.create_task(watch_for_disconnect())
        try:
            await respond()
        except asyncio.CancelledError:
            if not (watcher.done() and handler.uncancel() == 0):
                raise  # cancelled from outside (the server stopping), not by the client
        finally:
            answered = True
            watcher.cancel()
            body_file.close()

    async def send_response(self, response: Any, send: Any) -> None:
        """A whole answer without cookies: its head and its body as one message each (what
        Django's send_response does, without its chunking generator); an event stream: each
        of its events as a message, as it comes."""
        if isinstance(response, EventStream):
            await send(_head(response))
            async with contextlib.aclosing(aiter(response.events)) as events:  # type: ignore[type-var]
                async for event in events:
                    await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body"})
            return
        if response.streaming or response.cookies:
            await super().send_response(response, send)
            return
        await send(_head(response))
        await send({"type": "http.response.body", "body": response.content})

    async def read_body(self, receive: Any, scope: dict[str, Any] | None = None) -> Any:
        limit = self.body_limit()
        if scope is not None:
            for name, value in scope.get("headers", ()):
                if name == b"content-length" and value.isdigit() and int(value) > limit:
                    raise BodyTooLarge
        # A proxied call's body is read whole into memory anyway (at most body_limit()).
        body_file: Any = (
            io.BytesIO()
            if self.lean_requests
            else tempfile.SpooledTemporaryFile(  # noqa: SIM115 - the request owns it
                max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b"
            )
        )
        size = 0
        # A client that announces more than it sends holds a connection and a task: bounded
        # in time like a slow upload. When uvicorn's request cycle (receive's owner) already
        # holds the whole body, as for almost every call, nothing can be slow: no timer (a
        # timer costs a call about 5 µs).
        whole = getattr(getattr(receive, "__self__", None), "more_body", True) is False
        bound = contextlib.nullcontext() if whole else asyncio.timeout(settings.SLUICE_BODY_SECONDS)
        try:
            async with bound:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise RequestAborted
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise BodyTooLarge
                    body_file.write(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            body_file.close()
            raise BodyTooSlow from None
        except BaseException:
            body_file.close()
            raise
        body_file.seek(0)
        return body_file

    async def _respond(self, request: Any) -> HttpResponseBase:
        try:
            match = _resolve(request.path_info)
        except Resolver404:
            return GatewayError(
                404, f"Unknown endpoint: {request.path}", code="unknown_url"
            ).response()
        try:
            return await match.func(request, *match.args, **match.kwargs)
        except asyncio.CancelledError:
            raise
        except DatabaseError:
            log.warning("database unavailable on %s %s", request.method, request.path)
            return database_unavailable().response()
        except Exception:
            # Logged with its traceback here; the client gets the shape, never the trace.
            log.exception("unhandled error on %s %s", request.method, request.path)
            return GatewayError(
                500, "Sluice hit an internal error.", type="server_error", code="internal_error"
            ).response()
