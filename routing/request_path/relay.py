"""Relaying an upstream stream to the client, and settling the call whatever ends it."""

import asyncio
import json
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from django.http import StreamingHttpResponse

from core import fast_json
from core.background import spawn
from core.errors import error_body
from core.outcomes import Outcome
from routing.catalog.specs import DeploymentSpec
from routing.deployment_state import Result
from routing.deployment_state.slot_policy import weighted_tokens
from routing.observability.audit import AttemptLog, CallLog
from routing.observability.tracing import cache_tokens
from routing.request_path.classify import mentions_capacity
from routing.request_path.finish import complete
from routing.request_path.payloads import ClientRequest
from routing.request_path.protocols.native import NativeTap
from routing.request_path.stream_tap import StreamTap, data_of
from routing.request_path.upstream import UpstreamError, transport_error_class


@dataclass
class OpenStream:
    """An upstream that answered 200 to a streaming request; its body is not read yet."""

    deployment: DeploymentSpec
    response: aiohttp.ClientResponse
    attempt: AttemptLog
    started: float  # perf_counter() when the attempt began
    # Frees the deployment's slot, tells its breaker how the stream went and its queue the
    # weighted tokens served.
    release: Callable[[Result, float | None], Awaitable[object]] | None = None
    first: bytes = b""  # read before the stream was accepted (its first event), to relay


_FIRST_EVENT_LIMIT = 64 * 1024


async def first_event(response: aiohttp.ClientResponse) -> bytes | None:
    """The stream's bytes up to its first `data:` event, or None when that event is not
    JSON (an HTML error page from a proxy, say) or the stream ends without one: checked
    before any byte reaches the client, so such an answer can still fall back."""
    buffer = b""
    while True:
        chunk = await response.content.readany()
        if not chunk:
            return None
        buffer += chunk
        for event in buffer.split(b"\n\n")[:-1]:
            data = data_of(event)
            if data is None:
                continue  # a comment or keep-alive
            if data == b"[DONE]":
                return buffer
            try:
                fast_json.loads(data)
            except ValueError:
                return None
            return buffer
        if len(buffer) > _FIRST_EVENT_LIMIT:
            return None


class EventStream(StreamingHttpResponse):
    """A server-sent-event answer whose `events` the proxy handler sends itself, one ASGI
    message each (Django's own sending wraps every chunk in three generators more).
    `events.close()`, when it has one, is a resource closer: it runs once the answer
    ended, sent or not."""

    def __init__(self, events: AsyncIterable[bytes]) -> None:
        super().__init__((), content_type="text/event-stream")
        self.events = events
        closer = getattr(events, "close", None)
        if closer is not None:
            self._resource_closers.append(closer)
        self["Cache-Control"] = "no-cache"


class StreamRelay:
    """The body of a streaming answer. The handler iterates it; `close()` is registered as
    the response's resource closer and settles a stream that was never started (the client
    left between the headers and the first chunk), so every such call is still recorded
    and its upstream request cancelled."""

    def __init__(self, call: CallLog, stream: OpenStream, request: ClientRequest) -> None:
        self.call, self.stream, self.request = call, stream, request
        kind = stream.deployment.upstream.kind
        # A deployment of the client's own protocol: its events go on as they came.
        self.tap: StreamTap | NativeTap = (
            NativeTap(kind)
            if request.passes_through(kind)
            else StreamTap(forward_usage=request.wants_usage)
        )
        if call.trace is not None and isinstance(self.tap, StreamTap):
            self.tap.finish_reasons = []  # looked for only when the call is traced
        self._started = False
        self._settled = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        self._started = True
        return self._relay()

    def close(self) -> None:
        if not self._started:
            self._settle(Outcome.CLIENT_CANCELLED, 499, "")

    async def _relay(self) -> AsyncIterator[bytes]:
        outcome, status, message = Outcome.SUCCESS, 200, ""
        try:
            if self.stream.first:
                self.call.ttfb_ms = self.call.elapsed_ms()
                out = self.tap.feed(self.stream.first)
                if out:
                    yield out
            content = self.stream.response.content
            while data := await content.readany():
                if self.call.ttfb_ms is None:
                    self.call.ttfb_ms = self.call.elapsed_ms()
                out = self.tap.feed(data)
                if out:
                    yield out
                if self.tap.error is not None:
                    break  # the client was told the stream failed: nothing more to relay
            else:
                rest = self.tap.flush()
                if rest:
                    yield rest
            if self.tap.error is not None:
                outcome, status = Outcome.UPSTREAM_ERROR, 502
                message = str(self.tap.error.get("message", ""))
        except (asyncio.CancelledError, GeneratorExit):
            if self.tap.error is None:
                outcome, status = Outcome.CLIENT_CANCELLED, 499
            else:  # a client that hangs up on the error event it was sent
                outcome, status = Outcome.UPSTREAM_ERROR, 502
                message = str(self.tap.error.get("message", ""))
            raise
        except UpstreamError as exc:
            # Bytes already reached the client, so no fallback: end the stream with an
            # error event it can recognise.
            error_class = transport_error_class(exc)
            self.stream.attempt.error_class = error_class.value
            outcome, status = Outcome.UPSTREAM_ERROR, 502
            message = f"The upstream stream broke off ({error_class.value})."
            yield self._broken_off(message)
        finally:
            self._settle(outcome, status, message)

    def _broken_off(self, message: str) -> bytes:
        """The event that ends a stream cut short, in the shape the client reads."""
        if isinstance(self.tap, NativeTap) and self.tap.kind == "anthropic":
            error = {"type": "error", "error": {"type": "api_error", "message": message}}
            return b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n"
        event = error_body(message, type="server_error", code="stream_interrupted")
        if isinstance(self.tap, NativeTap):  # Responses: an `error` event
            detail = {"type": "error", "code": "stream_interrupted", "message": message}
            return b"event: error\ndata: " + json.dumps(detail).encode() + b"\n\n"
        return b"data: " + event + b"\n\n"

    def _settle(self, outcome: str, status: int, message: str) -> None:
        if self._settled:
            return
        self._settled = True
        response, call = self.stream.response, self.call
        if outcome == Outcome.SUCCESS:
            response.release()  # read to the end: the connection goes back to the pool
        else:
            response.close()  # cut short: drop the connection, cancelling upstream work
        self.stream.attempt.duration_ms = (time.perf_counter() - self.stream.started) * 1000
        call.upstream_model = self.tap.model
        if call.trace is not None:
            call.trace.finish_reasons = list(self.tap.finish_reasons or [])
        usage = self.tap.usage or estimated_usage(self.request, self.tap.chunks)
        settle_usage(call, self.stream.deployment, usage)
        if self.stream.release is not None:
            served = weighted_tokens(call.tokens_in, call.tokens_out)
            spawn(self.stream.release(self._result(outcome), served))
        call.finish(outcome=outcome, status=status, error_message=message)
        complete(call)

    def _result(self, outcome: str) -> Result:
        """How the stream went, for the deployment's breaker and adaptive limit."""
        if outcome == Outcome.SUCCESS:
            return Result.SUCCESS
        if outcome == Outcome.CLIENT_CANCELLED:
            return Result.NEUTRAL
        error = self.tap.error or {}
        text = f"{error.get('message', '')} {error.get('code', '')}"
        return Result.CAPACITY if mentions_capacity(text) else Result.FAILURE


def usage_tokens(usage: Any) -> tuple[int, int] | None:
    """Tokens in and out from an upstream's `usage` object (None when there is none), in
    any protocol's shape: chat's prompt/completion tokens, or Messages' and Responses'
    input/output tokens (Messages counts cache reads and writes apart: added in, so quotas
    and cost count every token read)."""
    if not isinstance(usage, dict):
        return None
    if "input_tokens" in usage and "prompt_tokens" not in usage:
        read = _count(usage.get("cache_read_input_tokens"))
        written = _count(usage.get("cache_creation_input_tokens"))
        return _count(usage.get("input_tokens")) + read + written, _count(
            usage.get("output_tokens")
        )
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def settle_usage(call: CallLog, deployment: DeploymentSpec, usage: Any) -> None:
    """Tokens and cost from an upstream's `usage` object."""
    tokens = usage_tokens(usage)
    if tokens is None:
        return
    call.tokens_in, call.tokens_out = tokens
    if call.trace is not None:
        call.trace.cache_read_tokens, call.trace.cache_write_tokens = cache_tokens(usage)
    call.cost = deployment.cost(call.tokens_in, call.tokens_out)


def estimated_usage(request: ClientRequest, chunks: int) -> dict[str, int]:
    """When a stream ends before its usage chunk: about 4 characters a prompt token, one
    token per content chunk relayed."""
    body = request.body
    text = json.dumps(body.get("messages") or body.get("prompt") or body.get("input") or "")
    return {"prompt_tokens": len(text) // 4 + 1, "completion_tokens": chunks}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
