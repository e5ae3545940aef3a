"""uvicorn's httptools protocol with a deadline for request headers, and the writes of one
event-loop callback sent together (an answer's head and body: one send, not two), a whole
answer as soon as it is complete.

uvicorn closes a connection idle *between* requests (`--timeout-keep-alive`), but not one
that connects and says nothing, nor one that trickles its headers a byte at a time: each
holds a socket and a little memory for ever. This protocol gives every request
`SLUICE_HEADER_TIMEOUT` seconds (10) from its first byte (or from the connection's opening)
to finish its headers; past that it answers 408 and closes. The body has its own bound in
the proxy (`SLUICE_BODY_SECONDS`).

Production: `uvicorn config.asgi:application --http config.http_protocol:SluiceHttpProtocol
--timeout-keep-alive 75 …` (docs/operations.md).
"""

import asyncio
import json
import os
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_TIMED_OUT_BODY = json.dumps(
    {
        "error": {
            "message": "The request headers did not arrive in time.",
            "type": "invalid_request_error",
            "code": "request_timeout",
            "param": None,
        }
    }
).encode()
_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_TIMED_OUT_BODY), _TIMED_OUT_BODY)
)


def header_timeout() -> float:
    return float(os.environ.get("SLUICE_HEADER_TIMEOUT", 10))


class _CorkedTransport:
    """The connection's transport, with the writes of one event-loop callback sent in one
    go: uvicorn writes an answer's head and its body apart, two sends (and two wake-ups of
    the client) where one does; on a small host each send is a large part of a call's CPU."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: Any) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        # Held until the callback ends: a copy of anything its writer could still change.
        self._pending.append(data if isinstance(data, bytes) else bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        if not self._pending:
            return  # sent already, when its answer completed
        pending, self._pending = self._pending, []
        if not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def close(self) -> None:
        self.flush()  # what was written goes before the close
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def is_closing(self) -> bool:  # asked after every answer: not through __getattr__
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:  # everything else: the transport's own
        return getattr(self._transport, name)


class SluiceHttpProtocol(HttpToolsProtocol):
    """One timer a connection rather than one a request: a request's headers only move the
    time they are due (`_headers_due`), and the timer, when it fires, looks at that time
    and sleeps again until it (a timer set and cancelled per request was two event-loop
    calls on every call)."""

    _header_timer: asyncio.TimerHandle | None = None
    _headers_due: float | None = None  # when the headers being read must be in
    _began = False  # a request's first byte arrived: it gets a 408, not a silent close
    _header_seconds = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(cast(asyncio.Transport, _CorkedTransport(transport, self.loop)))
        self._header_seconds = header_timeout()
        self._wait_for_headers()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._began = True
        if self._headers_due is None:
            self._wait_for_headers()

    def on_headers_complete(self) -> None:
        self._headers_due = None  # the timer, if set, finds nothing due and stops
        self._began = False
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        # The answer is whole: sent now. Left to the callback `write` scheduled, it would
        # wait for every callback queued behind this one (the rest of a burst of answers,
        # each with its own audit and accounting) and for the loop's next look at its
        # sockets.
        cast(_CorkedTransport, self.transport).flush()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_due = None
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def _wait_for_headers(self) -> None:
        self._headers_due = self.loop.time() + self._header_seconds
        if self._header_timer is None:
            self._header_timer = self.loop.call_at(self._headers_due, self._check_headers)

    def _check_headers(self) -> None:
        self._header_timer = None
        due = self._headers_due
        if due is None or self.transport.is_closing():
            return
        if self.loop.time() < due:  # headers came, and a later request's are not due yet
            self._header_timer = self.loop.call_at(due, self._check_headers)
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A request is being answered (uvicorn reads no further meanwhile): look again
            # later rather than cut its answer.
            self._wait_for_headers()
            return
        if self._began:
            self.transport.write(_TIMED_OUT)
        self.transport.close()
