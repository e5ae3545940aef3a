"""One lean, pipelined Redis connection per URL and event loop, for the Lua scripts every
call runs (quota reserve and settle, slot acquire and release).

Through redis-py a script call costs 0.2 to 0.35 ms of CPU (its connection pool, encoders,
stream reader and reply parser), as much as the rest of a call; written and read here in
RESP directly it costs a third of that one at a time and a sixth with several in flight
(bench/redis_scripts.py). Everything else (pub/sub, pipelines, reads for
pages) stays on redis-py (core/redis_client.py), and the errors raised here are redis-py's,
so callers catch one family.

Calls are written as they come and Redis answers in order, so one connection carries all
of a loop's calls at once, none waiting for a free one. A call not answered within
SOCKET_TIMEOUT closes the connection (whatever is left on it can no longer be matched to
its call); the next call connects again, asking the sentinels where the primary is now.
"""

import asyncio
import hashlib
import ssl
from collections import deque
from collections.abc import Sequence
from typing import Any, cast

from redis.asyncio.connection import parse_url
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.exceptions import (
    AuthenticationError,
    DataError,
    NoScriptError,
    ReadOnlyError,
    RedisError,
    ResponseError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

from core.background import observed
from core.redis_client import SOCKET_TIMEOUT, sentinel_target

Arg = bytes | str | int | float
_INCOMPLETE = object()  # the buffer does not hold the whole reply yet


class Script:
    """A Lua script's source and its SHA1 (EVALSHA; EVAL once where the server lacks it)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


# The RESP form of the strings sent again and again (keys, channels, script hashes): a
# call's command is mostly these, and encoding them anew is most of its cost.
_CHUNKS: dict[str, bytes] = {}
_CHUNKS_MAX = 4096


def _chunk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def encode(parts: Sequence[Arg]) -> bytes:
    """One command in RESP, numbers as redis-py writes them."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        if type(part) is str:  # most parts: keys and names sent with every call
            chunk = _CHUNKS.get(part)
            if chunk is None:
                chunk = _chunk(part.encode())
                if len(_CHUNKS) >= _CHUNKS_MAX:
                    _CHUNKS.clear()  # slot ids are new each call: start over now and then
                _CHUNKS[part] = chunk
        else:
            chunk = _chunk(_bytes(part))
        out.append(chunk)
    return b"".join(out)


def _bytes(part: object) -> bytes:
    if isinstance(part, float):
        return repr(part).encode()
    if isinstance(part, int) and not isinstance(part, bool):
        return b"%d" % part
    if isinstance(part, bytes):
        return part
    if isinstance(part, str):
        return part.encode()
    raise DataError(f"cannot send {type(part).__name__} to Redis")


def parse(buffer: bytearray, pos: int) -> tuple[Any, int]:
    """The reply starting at `pos` and where the next one starts; (_INCOMPLETE, pos) when
    the buffer ends first. An error reply comes back as its exception, not raised."""
    end = buffer.find(b"\r\n", pos)
    if end < 0:
        return _INCOMPLETE, pos
    kind, line, after = buffer[pos], bytes(buffer[pos + 1 : end]), end + 2
    if kind == 0x3A:  # ':' integer
        return int(line), after
    if kind == 0x24:  # '$' bulk string
        size = int(line)
        if size < 0:
            return None, after
        if len(buffer) < after + size + 2:
            return _INCOMPLETE, pos
        return bytes(buffer[after : after + size]), after + size + 2
    if kind == 0x2A:  # '*' array
        count = int(line)
        if count < 0:
            return None, after
        items = []
        for _ in range(count):
            item, after = parse(buffer, after)
            if item is _INCOMPLETE:
                return _INCOMPLETE, pos
            items.append(item)
        return items, after
    if kind == 0x2B:  # '+' simple string
        return line, after
    if kind == 0x2D:  # '-' error
        return _error(line.decode("utf-8", "replace")), after
    raise RedisConnectionError(f"Redis sent a reply this client does not read: {kind!r}")


def _error(message: str) -> RedisError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    if message.startswith("READONLY"):
        return ReadOnlyError(message)
    if message.startswith(("NOAUTH", "WRONGPASS", "NOPERM")):
        return AuthenticationError(message)
    return ResponseError(message)


class _Wire(asyncio.Protocol):
    """The connection: replies matched to calls in the order the calls were written."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        # Each call's future and when its answer is overdue (loop time), oldest first.
        self.waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self.buffer = bytearray()
        self.closed = False
        # One timer watches the oldest call, not one per call: a call's own timer costs
        # more than the rest of it.
        self._watch: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        pos = 0
        while self.waiting:
            try:
                reply, pos = parse(self.buffer, pos)
            except (ValueError, RedisError) as exc:  # out of step: nothing after is trusted
                self.close(RedisConnectionError(f"unreadable reply from Redis: {exc}"))
                return
            if reply is _INCOMPLETE:
                break
            future, _ = self.waiting.popleft()
            if not future.done():  # its caller may have stopped waiting (cancelled)
                future.set_result(reply)
        del self.buffer[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.close(RedisConnectionError(f"Redis closed the connection: {exc or 'EOF'}"))

    def send(self, command: bytes) -> asyncio.Future[Any]:
        """The future of the command's reply: an error reply is its result, not raised; a
        connection lost or a reply overdue by SOCKET_TIMEOUT is raised."""
        if self.closed or self.transport is None:
            raise RedisConnectionError("the connection to Redis is closed")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.waiting.append((future, loop.time() + SOCKET_TIMEOUT))
        self.transport.write(command)
        if self._watch is None:
            self._watch = loop.call_later(SOCKET_TIMEOUT, self._overdue)
        return future

    def _overdue(self) -> None:
        """Close the connection if its oldest call is overdue, or look again when it will be."""
        self._watch = None
        if not self.waiting or self.closed:
            return
        loop = asyncio.get_running_loop()
        due = self.waiting[0][1]
        if loop.time() >= due:
            self.close(RedisTimeoutError(f"Redis did not answer within {SOCKET_TIMEOUT} s"))
        else:
            self._watch = loop.call_at(due, self._overdue)

    def close(self, why: RedisError) -> None:
        self.closed = True
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        while self.waiting:
            future, _ = self.waiting.popleft()
            if not future.done():
                future.set_exception(why)
        if self.transport is not None:
            self.transport.abort()


class ScriptWire:
    """The scripts' connection to one Redis, connected at the first call and again after
    one is lost."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._target = sentinel_target(url)
        self._options: dict[str, Any] = (
            self._target.connection_kwargs() if self._target else dict(parse_url(url))
        )
        self._sentinel: AsyncSentinel | None = None
        self._wire: _Wire | None = None
        self._attempt: asyncio.Future[_Wire] | None = None  # connecting now

    async def run(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """The script's reply; redis-py's exceptions for a refusal or a lost Redis."""
        reply = await self.call("EVALSHA", script.sha, len(keys), *keys, *args)
        if isinstance(reply, NoScriptError):  # a restarted or new primary: EVAL loads it
            reply = await self.call("EVAL", script.source, len(keys), *keys, *args)
        if isinstance(reply, RedisError):
            raise reply
        return reply

    async def call(self, *parts: Arg) -> Any:
        """One command's reply; an error reply is returned, a lost connection raised."""
        command = encode(parts)
        wire = self._wire
        if wire is None or wire.closed:
            wire = await self._connect()
        reply = await wire.send(command)
        if isinstance(reply, ReadOnlyError):  # a primary demoted: ask the sentinels again
            wire.close(RedisConnectionError("Redis is a replica now"))
        return reply

    async def _connect(self) -> _Wire:
        """The connection, opened by one attempt that the calls arriving meanwhile share: a
        Redis that does not answer costs them one SOCKET_TIMEOUT together, not one each."""
        if self._attempt is None:
            self._attempt = asyncio.ensure_future(self._open_and_greet())
            self._attempt.add_done_callback(observed)  # its callers may all have left
        return await asyncio.shield(self._attempt)

    async def _open_and_greet(self) -> _Wire:
        wire = None
        try:
            async with asyncio.timeout(SOCKET_TIMEOUT):
                wire = await self._open()
                await self._hello(wire)
        except (TimeoutError, OSError, RedisError) as exc:
            if wire is not None:
                wire.close(RedisConnectionError("the connection's setup failed"))
            if isinstance(exc, TimeoutError):
                raise RedisTimeoutError("connecting to Redis timed out") from None
            if isinstance(exc, OSError):
                raise RedisConnectionError(f"cannot connect to Redis: {exc}") from None
            raise
        finally:
            self._attempt = None
        self._wire = wire
        return wire

    async def _open(self) -> _Wire:
        loop = asyncio.get_running_loop()
        options = self._options
        if self._target is not None:
            if self._sentinel is None:
                self._sentinel = AsyncSentinel(
                    self._target.sentinels,
                    sentinel_kwargs=self._target.sentinel_kwargs(),
                    socket_timeout=SOCKET_TIMEOUT,
                )
            host, port = await self._sentinel.discover_master(self._target.master)
            _, wire = await loop.create_connection(_Wire, host, port)
        elif "path" in options:
            _, wire = await loop.create_unix_connection(_Wire, options["path"])
        else:
            host, port = options.get("host", "localhost"), options.get("port", 6379)
            context = _tls(options) if self.url.lower().startswith("rediss://") else None
            _, wire = await loop.create_connection(
                _Wire, host, port, ssl=context, server_hostname=host if context else None
            )
        return wire

    async def _hello(self, wire: _Wire) -> None:
        """AUTH and SELECT, as the URL asks."""
        options, sent = self._options, []
        if options.get("password"):
            user = [options["username"]] if options.get("username") else []
            sent.append(wire.send(encode(["AUTH", *user, options["password"]])))
        if options.get("db"):
            sent.append(wire.send(encode(["SELECT", int(options["db"])])))
        for future in sent:
            reply = await future
            if isinstance(reply, RedisError):
                raise reply

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close(RedisConnectionError("closed"))
            self._wire = None


def _tls(options: dict[str, Any]) -> ssl.SSLContext:
    """The TLS context `rediss://` asks for (`ssl_cert_reqs`, `ssl_ca_certs`)."""
    context = ssl.create_default_context(cafile=options.get("ssl_ca_certs"))
    if str(options.get("ssl_cert_reqs", "required")).lower() in ("none", "optional"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


_wires: dict[tuple[str, asyncio.AbstractEventLoop], ScriptWire] = {}


def script_wire(url: str) -> ScriptWire:
    """This event loop's connection to `url` (connected at its first call)."""
    key = (url, asyncio.get_running_loop())
    wire = _wires.get(key)
    if wire is None:
        wire = _wires[key] = ScriptWire(url)
    return wire


def close_script_wires(loop: asyncio.AbstractEventLoop) -> None:
    """Close the connections of `loop` (before it closes: tests that make loops of their own)."""
    for key in [k for k in _wires if k[1] is loop]:
        _wires.pop(key).close()
