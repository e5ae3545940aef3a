"""uvicorn's httptools protocol with a deadline for request headers.

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


class SluiceHttpProtocol(HttpToolsProtocol):
    _header_timer: asyncio.TimerHandle | None = None
    _began = False  # a request's first byte arrived: it gets a 408, not a silent close

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._began = True
        if self._header_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        self._began = False
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(header_timeout(), self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A request is being answered (uvicorn reads no further meanwhile): look again
            # later rather than cut its answer.
            self._arm()
            return
        if self._began:
            self.transport.write(_TIMED_OUT)
        self.transport.close()
