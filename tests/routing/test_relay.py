"""Stream relaying against the real simulator: every way a stream ends is settled once; an
event stream is sent one ASGI message an event."""

import asyncio
import gc
import weakref
from decimal import Decimal

import pytest

from routing.catalog.specs import DeploymentSpec, UpstreamSpec
from routing.deployment_state import Limits, Result
from routing.observability.audit import AttemptLog, CallLog
from routing.request_path.payloads import Endpoint, parse_request, upstream_body
from routing.request_path.proxy_handler import ProxyHandler
from routing.request_path.relay import EventStream, OpenStream, StreamRelay
from routing.request_path.upstream import close_sessions, open_response
from tests.support import SimulatorHandle, wait_until


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[CallLog]:
    calls: list[CallLog] = []
    monkeypatch.setattr("routing.request_path.finish.audit_writer.record", calls.append)
    return calls


def _deployment(simulator: SimulatorHandle) -> DeploymentSpec:
    upstream = UpstreamSpec("sim", f"{simulator.url}/v1", None, 5.0, 30.0)
    return DeploymentSpec("slow", "slow", upstream, "t", 8, 1000, Decimal(1), Decimal(2), Limits(8))


async def _open(simulator: SimulatorHandle, released: list[Result]) -> tuple[StreamRelay, CallLog]:
    request = parse_request(
        Endpoint.CHAT,
        b'{"model": "slow", "stream": true, "messages": [{"role": "user", "content": "hi"}]}',
    )
    deployment = _deployment(simulator)
    call = CallLog(request_id="req_relay", endpoint="chat/completions", client_ip=None)
    attempt = AttemptLog(number=1, deployment="slow", started_at=call.created_at)
    call.attempts.append(attempt)
    response = await open_response(deployment, "chat/completions", upstream_body(request, "slow"))
    assert response.status == 200

    async def release(result: Result, service: float | None) -> None:
        released.append(result)

    stream = OpenStream(deployment, response, attempt, call.started, release)
    return StreamRelay(call, stream, request), call


async def test_stream_never_started_is_settled_as_cancelled_and_frees_upstream(
    slow_simulator: SimulatorHandle, recorded: list[CallLog]
):
    released: list[Result] = []
    relay, call = await _open(slow_simulator, released)
    relay.close()  # the client left before the first chunk
    relay.close()  # closing twice records once
    await asyncio.sleep(0.05)  # the slot is released by a background task
    await close_sessions()

    assert released == [Result.NEUTRAL]  # not the deployment's fault
    assert [c.outcome for c in recorded] == ["client_cancelled"]
    assert call.status_code == 499
    wait_until(lambda: slow_simulator.stats("slow")["in_flight"] == 0, timeout=2)


async def test_stream_read_to_the_end_is_settled_once_with_usage(
    slow_simulator: SimulatorHandle, recorded: list[CallLog]
):
    released: list[Result] = []
    relay, call = await _open(slow_simulator, released)
    body = b"".join([chunk async for chunk in relay])
    relay.close()  # Django's resource closer runs after the body was sent
    await asyncio.sleep(0.05)
    await close_sessions()

    assert released == [Result.SUCCESS]
    assert body.endswith(b"data: [DONE]\n\n")
    assert b'"choices":[]' not in body  # the usage chunk the client did not ask for
    assert [c.outcome for c in recorded] == ["success"]
    assert (call.tokens_out, call.upstream_model) == (40, "slow")
    assert call.cost == Decimal(call.tokens_in * 1 + 40 * 2) / 1_000_000


async def test_a_client_that_hangs_up_on_the_error_event_leaves_the_call_an_upstream_error(
    recorded: list[CallLog],
):
    """The SDK raises on the error event Sluice sends for a malformed one and closes the
    connection: the call failed upstream, whatever the client does next."""
    from aiohttp import web

    async def late_garbage(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        chunk = b'{"model": "slow", "choices": [{"index": 0, "delta": {"content": "Hel"}}]}'
        await response.write(b"data: " + chunk + b"\n\n")
        await response.write(b"data: <html>upstream proxy error</html>\n\n")
        await asyncio.sleep(30)  # the stream stays open
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", late_garbage)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        relay, call = await _open(SimulatorHandle(f"http://127.0.0.1:{port}"), released := [])
        events = aiter(relay)
        received = b""
        while b"malformed_stream" not in received:
            received += await anext(events)
        await events.aclose()  # the client leaves on the error event
        await asyncio.sleep(0.05)
    finally:
        await close_sessions()
        await runner.cleanup()

    assert [c.outcome for c in recorded] == ["upstream_error"]
    assert call.status_code == 502
    assert released == [Result.FAILURE]


class _Events:
    """An event stream's body that remembers whether it was closed."""

    def __init__(self, events: list[bytes]) -> None:
        self.events, self.closed = events, 0

    def close(self) -> None:
        self.closed += 1

    async def __aiter__(self):
        for event in self.events:
            yield event


async def test_an_event_stream_is_sent_one_message_an_event_then_its_end():
    events = _Events([b"data: 1\n\n", b"data: [DONE]\n\n"])
    response = EventStream(events)
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await ProxyHandler().send_response(response, send)
    response.close()  # the handler runs the resource closers after sending
    head = sent[0]
    assert (head["type"], head["status"]) == ("http.response.start", 200)
    headers = [(k.lower(), v) for k, v in head["headers"]]
    assert (b"content-type", b"text/event-stream") in headers
    assert (b"cache-control", b"no-cache") in headers
    assert [(m.get("body"), m.get("more_body", False)) for m in sent[1:]] == [
        (b"data: 1\n\n", True),
        (b"data: [DONE]\n\n", True),
        (None, False),
    ]
    assert events.closed == 1
    sent_answer = weakref.ref(response)
    del response
    gc.collect()
    assert sent_answer() is None  # nothing on the way out keeps an answer (and its call)
