"""HTTP/2 to an upstream set to it: many calls in flight on one connection.

A worker holding 10,000 streamed calls over HTTP/1.1 holds 10,000 upstream connections, a
file descriptor and a connection's buffers each, and opens one more for every call beyond
those idle in the pool; over HTTP/2 a connection carries as many calls at once as the
upstream allows (`SETTINGS_MAX_CONCURRENT_STREAMS`: 100 to a few hundred), so the worker's
own descriptors are about one a call. The protocol's state machine is `h2`'s; the
connections, their pool and the answers are this module's, read by the same `Response` and
`BodyStream` as an HTTP/1.1 answer (`upstream_http`), with the same errors and timeouts,
so the chain walk cannot tell the two apart:

- a stream the upstream refused (`REFUSED_STREAM`) or left unprocessed when it went away
  (`GOAWAY`) is `ServerDisconnectedError`: not processed, so sent once more, as a pooled
  HTTP/1.1 connection dropped on reuse;
- a stream reset once its answer began, or cut by the connection's loss, is
  `ClientPayloadError`; a connection that does not speak HTTP/2, `ClientResponseError`;
- a streamed answer's reader that falls `BUFFER_LIMIT` behind stops its stream (its window
  is not handed back) and no other: the connection's window is as large as the protocol
  allows, so one slow reader never holds up the calls beside it;
- over TLS the upstream chooses (ALPN): one that answers HTTP/1.1 is called over HTTP/1.1
  from then on.
"""

import asyncio
import contextlib
import ssl
import time
from functools import lru_cache

import aiohttp
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from routing.request_path import upstream_http
from routing.request_path.upstream_http import (
    BUFFER_LIMIT,
    IDLE_SECONDS,
    Answering,
    BodyStream,
    Response,
)

# Until the upstream's settings arrive: the fewest concurrent streams RFC 9113 recommends a
# server allow, so that a new connection's first calls are not refused.
FIRST_STREAMS = 100
# Flow control is per stream (BUFFER_LIMIT): the connection's window is the largest there
# is, its bytes handed back as they arrive, a MiB at a time.
CONNECTION_WINDOW = 2**31 - 1
CONNECTION_STEP = 1024 * 1024
# A stream's bytes are handed back as its reader takes them, 64 KiB at a time (a frame per
# 64 KiB rather than per chunk): the upstream keeps three quarters of the window to send in.
STREAM_STEP = BUFFER_LIMIT // 4
# Headers HTTP/2 forbids (RFC 9113 8.2.2): the connection's own in HTTP/1.1.
_HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host")
)
_H2_CONFIG = h2.config.H2Configuration(client_side=True, header_encoding=None)

Key = tuple[str, int, bool]


class _Stream(Answering):
    """One request on a connection and its answer (an `Exchange`, as an HTTP/1.1
    connection is to the Response reading it)."""

    __slots__ = (
        "_status",
        "body",
        "chunks",
        "closed",
        "complete",
        "conn",
        "done",
        "head",
        "headers",
        "id",
        "last_read",
        "loop",
        "read_timeout",
        "started",
        "timer",
        "unacked",
        "unsent",
    )

    def __init__(self, conn: "_H2Connection", stream_id: int, stream: bool) -> None:
        self.conn, self.id, self.loop = conn, stream_id, conn.loop
        self.head: asyncio.Future[int] = self.loop.create_future()
        self.done: asyncio.Future[bytes] | None = self.loop.create_future()
        self.body: BodyStream | None = BodyStream(self) if stream else None
        self.headers: list[tuple[str, str]] = []
        self.chunks: list[bytes] = []
        self.unsent = b""  # the request's body the upstream's window has no room for yet
        self.unacked = 0  # bytes taken, not yet handed back to the windows
        self._status = 0
        self.started = self.complete = self.closed = False
        self.read_timeout: float | None = None
        self.last_read = 0.0
        self.timer: asyncio.TimerHandle | None = None

    # --- what the connection tells it --------------------------------------------------

    def answered(self, headers: list[tuple[bytes, bytes]]) -> None:
        for name, value in headers:
            if name == b":status":
                self._status = int(value)
            elif not name.startswith(b":"):
                self.headers.append((name.decode("latin-1"), value.decode("latin-1")))
        if not self.head.done():
            self.head.set_result(self._status)

    def data(self, data: bytes, flow_controlled: int) -> None:
        self.last_read = self.loop.time()
        if self.body is not None:
            if flow_controlled > len(data):  # padding: nothing to take, so taken now
                self.taken(flow_controlled - len(data))
            if data:
                self.body.feed(data)
        else:  # read whole: taken as it comes
            self.chunks.append(data)
            self.taken(flow_controlled)

    def ended(self) -> None:
        self.complete = self.closed = True
        self.settle(None)
        if not self.head.done():  # ended without an answer's head: not HTTP as it should be
            self.fail(aiohttp.ClientResponseError(None, (), message="a stream with no answer"))

    def fail(self, exc: BaseException) -> None:
        self.closed = True
        self.settle(exc)

    def timed_out(self, exc: BaseException) -> None:
        self.fail(exc)
        self.conn.reset(self)

    # --- what a Response and its BodyStream ask of it ---------------------------------

    @property
    def status(self) -> int:
        return self._status

    def pause_reading(self) -> None:
        """Nothing to do: the window not handed back stops the upstream's sending."""

    def taken(self, size: int) -> None:
        self.unacked += size
        if self.unacked >= STREAM_STEP and not self.complete:
            self.conn.open_window(self.id, self.unacked)
            self.unacked = 0

    def release(self) -> None:
        if not self.complete:
            self.abort()

    def abort(self) -> None:
        if not self.closed:
            self.fail(aiohttp.ClientPayloadError("the answer was abandoned"))
            self.conn.reset(self)


class _H2Connection(asyncio.Protocol):
    """One HTTP/2 connection and the streams open on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, key: Key) -> None:
        self.loop, self.key = loop, key
        self.h2 = h2.connection.H2Connection(_H2_CONFIG)
        self.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: BUFFER_LIMIT,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, _Stream] = {}
        self.unacked = 0  # bytes received, not yet handed back to the connection's window
        self.closed = self.going_away = self.settled = False
        self.idle_since = time.monotonic()

    def has_room(self) -> bool:
        if self.closed or self.going_away:
            return False
        limit = self.h2.remote_settings.max_concurrent_streams if self.settled else FIRST_STREAMS
        return len(self.streams) < limit

    # --- the transport -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(CONNECTION_WINDOW - 65_535)
        self._flush()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self._lose(aiohttp.ClientResponseError(None, (), message=f"not HTTP/2: {exc}"))
            return
        for event in events:
            self._on(event)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for stream in list(self.streams.values()):
            stream.fail(
                aiohttp.ClientPayloadError("the answer was cut short")
                if stream.started
                else aiohttp.ServerDisconnectedError()
            )
        self.streams.clear()

    def _on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):  # the most frequent first
            size = event.flow_controlled_length or 0
            self.unacked += size
            if self.unacked >= CONNECTION_STEP:
                self.h2.increment_flow_control_window(self.unacked)
                self.unacked = 0
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.data(event.data or b"", size)
        elif isinstance(event, h2.events.ResponseReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.started = True
                stream.last_read = self.loop.time()
                stream.answered(event.headers)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                stream.ended()
                self._idle_check()
        elif isinstance(event, h2.events.StreamReset):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                stream.fail(_reset_error(stream, event.error_code))
                self._idle_check()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._going_away(event.last_stream_id or 0)
        elif isinstance(event, (h2.events.RemoteSettingsChanged, h2.events.WindowUpdated)):
            self.settled = self.settled or isinstance(event, h2.events.RemoteSettingsChanged)
            self._send_bodies()

    def _going_away(self, last_stream_id: int) -> None:
        """The upstream takes no new streams: those past `last_stream_id` were never
        processed (sent again elsewhere); the others finish."""
        self.going_away = True
        for stream_id in [i for i in self.streams if i > last_stream_id]:
            self.streams.pop(stream_id).fail(aiohttp.ServerDisconnectedError())
        self._idle_check()

    def _lose(self, exc: BaseException) -> None:
        for stream in list(self.streams.values()):
            stream.fail(exc)
        self.streams.clear()
        self.close()

    # --- requests ----------------------------------------------------------------------

    def send(
        self,
        authority: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        read_timeout: float | None,
        *,
        stream: bool,
    ) -> _Stream:
        tls = self.key[2]
        fields = [
            (":method", "POST"),
            (":scheme", "https" if tls else "http"),
            (":authority", authority),
            (":path", path),
        ]
        for name, value in headers.items():
            name = name.lower()
            if name in _HOP_BY_HOP or name == "content-length":
                continue
            upstream_http.check_header(name, value)
            fields.append((name, value))
        fields.append(("content-length", str(len(body))))
        try:
            stream_id = self.h2.get_next_available_stream_id()
            self.h2.send_headers(stream_id, fields, end_stream=not body)
        except h2.exceptions.ProtocolError:  # the connection can take no new stream
            self.going_away = True
            raise aiohttp.ServerDisconnectedError() from None  # not sent: send it elsewhere
        call = _Stream(self, stream_id, stream)
        self.streams[stream_id] = call
        call.unsent = body
        if body:
            self._send_body(call)
        call.start_timer(read_timeout)
        self._flush()
        return call

    def _send_body(self, call: _Stream) -> None:
        """As much of the body as the upstream's windows allow; the rest when it opens
        them (`WindowUpdated`, or its settings)."""
        while call.unsent:
            room = min(
                self.h2.local_flow_control_window(call.id),
                self.h2.max_outbound_frame_size,
                len(call.unsent),
            )
            if room <= 0:
                return
            piece, call.unsent = call.unsent[:room], call.unsent[room:]
            self.h2.send_data(call.id, piece, end_stream=not call.unsent)

    def _send_bodies(self) -> None:
        for call in list(self.streams.values()):
            if call.unsent:
                try:
                    self._send_body(call)
                except h2.exceptions.StreamClosedError:
                    call.unsent = b""  # reset meanwhile: its answer says so

    def open_window(self, stream_id: int, size: int) -> None:
        """Hand `size` bytes of a stream's window back to the upstream."""
        if self.closed:
            return
        with contextlib.suppress(h2.exceptions.NoSuchStreamError):  # it ended meanwhile
            self.h2.increment_flow_control_window(size, stream_id=stream_id)
            self._flush()

    def reset(self, call: _Stream) -> None:
        """Give up a stream (cancelled, timed out, abandoned): the upstream stops sending."""
        call.cancel_timer()
        if self.streams.pop(call.id, None) is None or self.closed:
            return
        with contextlib.suppress(h2.exceptions.StreamClosedError):  # it ended meanwhile
            self.h2.reset_stream(call.id, ErrorCodes.CANCEL)
        self._flush()
        self._idle_check()

    def _idle_check(self) -> None:
        if not self.streams:
            self.idle_since = time.monotonic()
            if self.going_away:
                self.close()

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.closed:
            self.transport.write(data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()


def _reset_error(stream: _Stream, code: int) -> BaseException:
    if code == ErrorCodes.REFUSED_STREAM and not stream.started:
        return aiohttp.ServerDisconnectedError()  # not processed: safe to send again
    if not stream.started:
        return aiohttp.ClientOSError(None, f"the upstream reset the stream ({code})")
    return aiohttp.ClientPayloadError(f"the upstream reset the stream ({code})")


@lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


class _Pool:
    """The HTTP/2 connections of one event loop, per upstream (host, port, TLS)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.conns: dict[Key, list[_H2Connection]] = {}
        self.opening: dict[Key, asyncio.Future[_H2Connection]] = {}
        self.http1: set[Key] = set()  # upstreams whose TLS chose HTTP/1.1
        self.closed = False

    async def connection(self, key: Key, within: float | None, fresh: bool) -> _H2Connection:
        """One with room for a stream more: an open one, the one being opened, or a new one."""
        while True:
            if not fresh:
                found = self._with_room(key)
                if found is not None:
                    return found
            opening = self.opening.get(key)
            if opening is None or fresh:
                return await self._open(key, within)
            conn = await asyncio.shield(opening)
            if conn.has_room():
                return conn

    def _with_room(self, key: Key) -> _H2Connection | None:
        conns = self.conns.get(key)
        if not conns:
            return None
        now = time.monotonic()
        for conn in conns[:]:
            if conn.closed or (not conn.streams and now - conn.idle_since > IDLE_SECONDS):
                conn.close()
                conns.remove(conn)
            elif conn.has_room():
                return conn
        return None

    async def _open(self, key: Key, within: float | None) -> _H2Connection:
        opening: asyncio.Future[_H2Connection] = self.loop.create_future()
        self.opening[key] = opening
        try:
            conn = await self._connect(key, within)
        except BaseException as exc:
            opening.set_exception(exc)
            opening.exception()
            raise
        finally:
            if self.opening.get(key) is opening:
                del self.opening[key]
        opening.set_result(conn)
        self.conns.setdefault(key, []).append(conn)
        return conn

    async def _connect(self, key: Key, within: float | None) -> _H2Connection:
        transport, conn = await upstream_http.open_connection(
            self.loop, lambda: _H2Connection(self.loop, key), key, within, tls_context()
        )
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None and ssl_object.selected_alpn_protocol() != "h2":
            self.http1.add(key)
            conn.close()
            raise _Http1Chosen
        return conn

    def close(self) -> None:
        self.closed = True
        for conns in self.conns.values():
            for conn in conns:
                conn.close()
        self.conns.clear()


class _Http1Chosen(Exception):
    """The upstream's TLS chose HTTP/1.1."""


_pools = upstream_http.PerLoop(_Pool)
_pool = _pools.get
close_pool = _pools.close


async def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    connect_timeout: float | None,
    read_timeout: float | None,
    stream: bool = False,
    fresh: bool = False,
) -> Response:
    """As `upstream_http.post`, over HTTP/2 (cleartext: with prior knowledge; TLS: if the
    upstream chooses it, else over HTTP/1.1)."""
    key, authority, path = upstream_http.url_parts(url)
    pool = _pool()
    if key not in pool.http1:
        try:
            conn = await pool.connection(key, connect_timeout, fresh)
        except _Http1Chosen:
            pass
        else:
            call = conn.send(authority, path, headers, body, read_timeout, stream=stream)
            try:
                await call.head
            except BaseException:  # failed, timed out or cancelled: the stream is given up
                conn.reset(call)
                raise
            return Response(call)
    return await upstream_http.post(
        url,
        body,
        headers,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        stream=stream,
        fresh=fresh,
    )
