"""The upstream client against a real socket, streamed and whole: a pooled connection the
upstream closed while we reused it (its idle timeout ran out first) is replaced once,
without an attempt lost; it reuses its connections, reads every way of ending a body, hands
a stream over as it comes (and stops reading one whose reader falls behind), and fails with
aiohttp's errors, so the chain walk classifies its failures as before; the walk's attempt
keeps the answer's status when its body fails, and is `cut` when its own deadline ends it."""

import asyncio
import gzip
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal

import aiohttp
import pytest

from accounts.models import Fallback
from routing.catalog.specs import DeploymentSpec, RetryPolicy, RouteSpec, UpstreamSpec
from routing.deployment_state import Limits
from routing.deployment_state.slot_policy import ANYONE
from routing.observability.audit import AttemptLog, CallLog
from routing.request_path.chain import Answer, ChainWalk, Failure
from routing.request_path.classify import ErrorClass
from routing.request_path.payloads import Endpoint, parse_request
from routing.request_path.upstream import open_response, transport_error_class

ANSWER = b'{"ok": true}'


@dataclass
class Upstream:
    """Answers `answers_per_connection` requests on a connection, then reads the next
    request and closes without a word, as a server whose keep-alive just ran out."""

    answers_per_connection: int
    connections: int = 0
    requests: int = 0
    server: asyncio.Server | None = field(default=None, repr=False)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                self.requests += 1
                if answered == self.answers_per_connection:
                    return
                answered += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    def deployment(self) -> DeploymentSpec:
        port = self.server.sockets[0].getsockname()[1]
        upstream = UpstreamSpec("raw", f"http://127.0.0.1:{port}/v1", None, 5.0, 5.0)
        return DeploymentSpec("raw", "m", upstream, "t", 4, 1000, Decimal(0), Decimal(0), Limits(4))


@pytest.fixture
async def upstream(request: pytest.FixtureRequest, serving) -> Upstream:
    served = Upstream(request.param)
    served.server = await serving(served.handle)
    return served


async def _call(upstream: Upstream, whole: bool = False) -> int:
    response = await open_response(upstream.deployment(), "chat/completions", b"{}", whole=whole)
    await response.read()
    response.release()
    return response.status


@pytest.mark.parametrize("whole", [False, True], ids=["streamed", "whole"])
@pytest.mark.parametrize("upstream", [1], indirect=True)
async def test_a_pooled_connection_the_upstream_dropped_is_replaced_once(upstream, whole):
    assert await _call(upstream, whole) == 200
    # The pooled connection is dropped under the second request: sent again on a new one.
    assert await _call(upstream, whole) == 200
    assert (upstream.connections, upstream.requests) == (2, 3)


@pytest.mark.parametrize("whole", [False, True], ids=["streamed", "whole"])
@pytest.mark.parametrize("upstream", [1], indirect=True)
async def test_a_call_sent_again_after_a_drop_goes_on_a_new_connection(upstream, whole):
    """Two pooled connections went idle together and both were dropped (an upstream's idle
    timeout while a worker stalled): the call sent again must not take the other one."""
    assert await asyncio.gather(_call(upstream, whole), _call(upstream, whole)) == [200, 200]
    assert upstream.connections == 2
    assert await _call(upstream, whole) == 200
    assert (upstream.connections, upstream.requests) == (3, 4)


@pytest.mark.parametrize("whole", [False, True], ids=["streamed", "whole"])
@pytest.mark.parametrize("upstream", [0], indirect=True)
async def test_an_upstream_that_drops_every_request_fails_after_one_more_try(upstream, whole):
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await _call(upstream, whole)
    assert (upstream.connections, upstream.requests) == (2, 2)


@pytest.mark.parametrize("upstream", [100], indirect=True)
async def test_the_lean_client_sends_every_call_on_one_kept_alive_connection(upstream):
    for _ in range(5):
        assert await _call(upstream, whole=True) == 200
    assert (upstream.connections, upstream.requests) == (1, 5)


# --- the lean client against scripted answers --------------------------------------------

Answering = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Scripted:
    """A server that reads each request whole and lets `answer` write what it likes."""

    answer: Answering
    connections: int = 0
    server: asyncio.Server | None = field(default=None, repr=False)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                await self.answer(reader, writer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    def deployment(self, read_timeout: float = 5.0) -> DeploymentSpec:
        port = self.server.sockets[0].getsockname()[1]
        upstream = UpstreamSpec("raw", f"http://127.0.0.1:{port}/v1", None, 5.0, read_timeout)
        return DeploymentSpec("raw", "m", upstream, "t", 4, 1000, Decimal(0), Decimal(0), Limits(4))


@pytest.fixture
def scripted(serving) -> Callable[[Answering], Awaitable[Scripted]]:
    async def start(answer: Answering) -> Scripted:
        served = Scripted(answer)
        served.server = await serving(served.handle)
        return served

    return start


async def _whole(served: Scripted, read_timeout: float = 5.0) -> tuple[int, bytes, str | None]:
    deployment = served.deployment(read_timeout)
    response = await open_response(deployment, "chat/completions", b"{}", whole=True)
    try:
        return response.status, await response.read(), response.headers.get("X-Request-Id")
    finally:
        response.release()


async def test_a_chunked_answer_is_read_whole_and_its_connection_kept(scripted):
    async def chunked(reader, writer):
        writer.write(
            b"HTTP/1.1 429 Too Many Requests\r\nx-request-id: r1\r\n"
            b"transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        )

    served = await scripted(chunked)
    assert await _whole(served) == (429, b"hello world", "r1")
    assert await _whole(served) == (429, b"hello world", "r1")
    assert served.connections == 1


async def test_an_answer_that_says_close_or_ends_with_the_connection_is_not_reused(scripted):
    async def closing(reader, writer):
        writer.write(b'HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n{"a": 1}')
        writer.close()

    served = await scripted(closing)
    assert await _whole(served) == (200, b'{"a": 1}', None)
    assert await _whole(served) == (200, b'{"a": 1}', None)
    assert served.connections == 2


async def test_a_gzipped_answer_is_decoded(scripted):
    body = gzip.compress(b'{"ok": true}')

    async def gzipped(reader, writer):
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n%s"
            % (len(body), body)
        )

    assert await _whole(await scripted(gzipped)) == (200, b'{"ok": true}', None)


async def test_an_upstream_silent_past_its_read_timeout_is_a_read_timeout(scripted):
    async def silent(reader, writer):
        await asyncio.sleep(5)

    with pytest.raises(aiohttp.ClientError) as caught:
        await _whole(await scripted(silent), read_timeout=0.2)
    assert transport_error_class(caught.value) is ErrorClass.READ_TIMEOUT


async def test_a_body_cut_short_is_a_connection_error(scripted):
    async def cut(reader, writer):
        writer.write(b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"partial')
        await writer.drain()
        writer.transport.abort()

    with pytest.raises(aiohttp.ClientPayloadError) as caught:
        await _whole(await scripted(cut))
    assert transport_error_class(caught.value) is ErrorClass.CONNECTION


async def test_an_answer_that_is_not_http_is_malformed(scripted):
    async def garbage(reader, writer):
        writer.write(b"SMTP ready\r\n\r\n")

    with pytest.raises(aiohttp.ClientResponseError) as caught:
        await _whole(await scripted(garbage))
    assert transport_error_class(caught.value) is ErrorClass.MALFORMED


async def test_a_refused_connection_is_a_connection_error(scripted):
    served = await scripted(lambda reader, writer: asyncio.sleep(0))
    deployment = served.deployment()
    served.server.close()
    await served.server.wait_closed()
    with pytest.raises(aiohttp.ClientError) as caught:
        await open_response(deployment, "chat/completions", b"{}", whole=True)
    assert transport_error_class(caught.value) is ErrorClass.CONNECTION


async def test_a_call_cancelled_while_waiting_closes_its_connection(scripted):
    async def slow_then_fast(reader, writer):
        await asyncio.sleep(0.3)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    served = await scripted(slow_then_fast)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await _whole(served)
    # The late answer of the cancelled call is never read as the next call's.
    assert await _whole(served) == (200, b"ok", None)
    assert served.connections == 2


# --- streamed answers ------------------------------------------------------------------

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _stream(served: Scripted, read_timeout: float = 5.0) -> aiohttp.ClientResponse:
    deployment = served.deployment(read_timeout)
    return await open_response(deployment, "chat/completions", b"{}", whole=False)


async def test_a_stream_is_handed_over_as_it_comes_and_its_connection_kept(scripted):
    second = asyncio.Event()

    async def trickle(reader, writer):
        writer.write(STREAM_HEAD + b"\r\n" + _chunk(b"data: 1\n\n"))
        await writer.drain()
        await second.wait()  # the next chunk only once the first was handed over
        second.clear()
        writer.write(_chunk(b"data: 2\n\n") + _chunk(b""))

    served = await scripted(trickle)
    for _ in range(2):
        response = await _stream(served)
        assert await response.content.readany() == b"data: 1\n\n"
        second.set()
        assert await response.content.readany() == b"data: 2\n\n"
        assert await response.content.readany() == b""
        response.release()
    assert served.connections == 1


async def test_a_stream_cut_short_hands_over_what_came_then_a_connection_error(scripted):
    async def cut(reader, writer):
        writer.write(STREAM_HEAD + b"\r\n" + _chunk(b"data: 1\n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.transport.abort()

    response = await _stream(await scripted(cut))
    assert await response.content.readany() == b"data: 1\n\n"
    with pytest.raises(aiohttp.ClientPayloadError) as caught:
        await response.content.readany()
    response.close()
    assert transport_error_class(caught.value) is ErrorClass.CONNECTION


async def test_a_stream_silent_past_its_read_timeout_between_chunks_is_a_read_timeout(scripted):
    async def stalls(reader, writer):
        writer.write(STREAM_HEAD + b"\r\n" + _chunk(b"data: 1\n\n"))
        await writer.drain()
        await asyncio.sleep(0.15)
        writer.write(_chunk(b"data: 2\n\n"))  # in time: the timeout counts from each read
        await writer.drain()
        await asyncio.sleep(5)

    response = await _stream(await scripted(stalls), read_timeout=0.3)
    assert await response.content.readany() == b"data: 1\n\n"
    assert await response.content.readany() == b"data: 2\n\n"
    with pytest.raises(asyncio.TimeoutError) as caught:
        await response.content.readany()
    response.close()
    assert transport_error_class(caught.value) is ErrorClass.READ_TIMEOUT


async def test_a_stream_whose_reader_falls_behind_is_no_longer_read_until_it_catches_up(
    scripted,
):
    piece = b"x" * 65536
    pieces = 64  # 4 MiB: more than the client's buffer and both sockets' buffers
    written = []

    async def flood(reader, writer):
        writer.write(STREAM_HEAD + b"\r\n")
        for n in range(pieces):
            writer.write(_chunk(piece))
            await writer.drain()
            written.append(n)
        writer.write(_chunk(b""))

    response = await _stream(await scripted(flood))
    await asyncio.sleep(0.3)  # the reader is away
    assert len(written) < pieces  # the upstream's writes wait for it
    received = b""
    while data := await response.content.readany():
        received += data
    response.release()
    assert received == piece * pieces


async def test_a_gzipped_stream_is_decoded(scripted):
    events = gzip.compress(b"data: 1\n\ndata: [DONE]\n\n")

    async def gzipped(reader, writer):
        writer.write(STREAM_HEAD + b"content-encoding: gzip\r\n\r\n" + _chunk(events[:10]))
        await writer.drain()
        await asyncio.sleep(0.05)  # the gzip header alone first: nothing to hand over yet
        writer.write(_chunk(events[10:]) + _chunk(b""))

    response = await _stream(await scripted(gzipped))
    received = b""
    while data := await response.content.readany():
        received += data
    response.release()
    assert received == b"data: 1\n\ndata: [DONE]\n\n"


async def _attempt(served: Scripted, within: float) -> tuple[Answer | Failure, AttemptLog]:
    """One attempt of a chain walk at the scripted upstream, its answer due `within` s."""
    deployment = served.deployment()
    call = CallLog(request_id="req_test", endpoint="chat/completions", client_ip=None)
    request = parse_request(
        Endpoint.CHAT, b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    )
    policy = RetryPolicy(60.0, 1, 0.1, 1.0, 1.0)
    route = RouteSpec("raw", (deployment,), policy)
    due = time.monotonic() + within
    walk = ChainWalk(call, route, request, Fallback.ANY, due, ANYONE)
    attempt = AttemptLog(1, deployment.name, call.created_at)
    return await walk._send(deployment, attempt, due), attempt


@pytest.mark.parametrize(
    ("script", "status", "error_class", "cut"),
    [
        # The head, then the body ends early: the upstream failed, and answered 200 first.
        (b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"partial', 200, "connection", False),
        # The head, then a body that never comes: the attempt's own deadline ends it.
        (b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n", 200, "read_timeout", True),
        # Nothing at all: no status, the deadline again.
        (b"", None, "read_timeout", True),
    ],
    ids=["body cut", "body late", "head late"],
)
async def test_a_whole_answer_failing_after_its_head_keeps_its_status_and_knows_who_ended_it(
    scripted, script, status, error_class, cut
):
    async def answer(reader, writer):
        writer.write(script)
        await writer.drain()
        if script.endswith(b"partial"):
            writer.transport.abort()
        else:
            await asyncio.sleep(5)

    failure, attempt = await _attempt(await scripted(answer), within=0.3)
    assert isinstance(failure, Failure)
    assert (failure.status, attempt.status_code) == (status, status)
    assert (failure.error_class.value, attempt.error_class) == (error_class, error_class)
    assert failure.cut is cut
