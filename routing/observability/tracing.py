"""OpenTelemetry traces of calls, built after the fact from the call's record.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set;
then the standard `OTEL_*` variables apply (service name, headers, sampler, batch delay).
On the request path only two cheap things happen: a client's `traceparent` is read (or a
trace id drawn) into a `CallTrace`, and each upstream attempt draws its span id and sends it
on as the attempt's own `traceparent`. Everything else — the spans, their attributes, the
export — happens once the call is complete: `record()` hands the finished `CallLog` to a
thread that builds one span for the call and one per attempt sent, with the ids and times
the path recorded, and gives them to the SDK's batch processor (which exports from its own
thread). Attributes follow the OpenTelemetry GenAI semantic conventions, Sluice's own facts
are under `sluice.`; no message content is ever recorded.
"""

import logging
import os
import queue
import random
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from core.outcomes import Outcome
from routing.catalog.specs import DeploymentSpec
from routing.observability.audit import AttemptLog, CallLog

log = logging.getLogger("sluice.tracing")

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_SAMPLED = 0x01


@dataclass(slots=True)
class CallTrace:
    """What the path keeps for the call's trace: its ids, and the few facts of the answer
    the audit record does not hold."""

    trace_id: int
    span_id: int  # the call's span
    parent_id: int = 0  # the client's span it continues (0: a new trace)
    sampled: bool = True
    tracestate: str = ""
    # attempt number → (its span id, the deployment it was sent to)
    sent: dict[int, tuple[int, DeploymentSpec]] = field(default_factory=dict)
    finish_reasons: list[str] = field(default_factory=list)
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None

    def upstream_headers(self, attempt: AttemptLog, deployment: DeploymentSpec) -> dict[str, str]:
        """The attempt's trace headers: its span id is drawn here, as its span will have."""
        span_id = random.getrandbits(64) or 1
        self.sent[attempt.number] = (span_id, deployment)
        flags = "01" if self.sampled else "00"
        headers = {"traceparent": f"00-{self.trace_id:032x}-{span_id:016x}-{flags}"}
        if self.tracestate:
            headers["tracestate"] = self.tracestate
        return headers


def parse_traceparent(value: str) -> tuple[int, int, int] | None:
    """(trace id, parent span id, flags) of a W3C `traceparent`, or None when it is not
    one (then the call starts a new trace, as the spec says)."""
    found = _TRACEPARENT.fullmatch(value.strip().lower())
    if found is None:
        return None
    version, trace_id, span_id, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace, span = int(trace_id, 16), int(span_id, 16)
    if not trace or not span:
        return None
    return trace, span, int(flags, 16)


def incoming(headers: Mapping[str, str]) -> CallTrace | None:
    """The call's trace, continuing the client's `traceparent` when it sent a valid one;
    None when tracing is off."""
    tracer = _tracer()
    if tracer is None:
        return None
    parent = parse_traceparent(headers.get("traceparent") or "")
    span_id = random.getrandbits(64) or 1
    if parent is None:
        trace_id = random.getrandbits(128) or 1
        call = CallTrace(trace_id, span_id)
    else:
        trace_id, parent_id, flags = parent
        state = (headers.get("tracestate") or "")[:512]
        call = CallTrace(trace_id, span_id, parent_id, bool(flags & _SAMPLED), state)
    call.sampled = tracer.sampled(call)
    return call


def record(call: CallLog) -> None:
    """Queue a finished call's spans to be built and exported (nothing when not traced)."""
    trace = call.trace
    if trace is not None and trace.sampled:
        tracer = _tracer()
        if tracer is not None:
            tracer.queue.put(call)


def finish_reasons(answer: Any) -> list[str]:
    """Why the answer ended, in any protocol's shape: chat's per choice `finish_reason`,
    Messages' `stop_reason`, a Responses answer's status (its reason when incomplete)."""
    if not isinstance(answer, dict):
        return []
    if isinstance(answer.get("choices"), list):
        return [
            str(c["finish_reason"])[:64]
            for c in answer["choices"]
            if isinstance(c, dict) and c.get("finish_reason")
        ]
    if answer.get("stop_reason"):
        return [str(answer["stop_reason"])[:64]]
    if answer.get("object") == "response" and answer.get("status") == "completed":
        return ["stop"]
    if answer.get("object") == "response" and answer.get("status") == "incomplete":
        details = answer.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return [str(reason or "incomplete")[:64]]
    return []


def cache_tokens(usage: Any) -> tuple[int | None, int | None]:
    """Prompt-cache tokens read and written, as the usage object reports them (None when
    it says nothing): chat's and Responses' `cached_tokens`, Messages' two counts."""
    if not isinstance(usage, dict):
        return None, None
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        return _count(usage.get("cache_read_input_tokens")), _count(
            usage.get("cache_creation_input_tokens")
        )
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    if isinstance(details, dict) and "cached_tokens" in details:
        return _count(details.get("cached_tokens")), None
    return None, None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and value >= 0 else None


# --- building the spans -------------------------------------------------------------------

_OPERATIONS = {"completions": "text_completion", "embeddings": "embeddings"}  # others: chat
_PROVIDERS = {"anthropic": "anthropic"}  # "openai" and "openai-responses": openai
_CLIENT_PROVIDERS = {"anthropic": "anthropic"}  # the client's protocol, when none served


def operation_of(endpoint: str) -> str:
    return _OPERATIONS.get(endpoint, "chat")


def provider_of(kind: str) -> str:
    return _PROVIDERS.get(kind, "openai")


def _usage(attributes: dict[str, Any], call: CallLog, trace: CallTrace) -> None:
    if call.tokens_in or call.tokens_out:
        attributes["gen_ai.usage.input_tokens"] = call.tokens_in
        attributes["gen_ai.usage.output_tokens"] = call.tokens_out
    if trace.cache_read_tokens is not None:
        attributes["gen_ai.usage.cache_read.input_tokens"] = trace.cache_read_tokens
    if trace.cache_write_tokens is not None:
        attributes["gen_ai.usage.cache_creation.input_tokens"] = trace.cache_write_tokens
    if trace.finish_reasons:
        attributes["gen_ai.response.finish_reasons"] = list(trace.finish_reasons)
    if call.upstream_model:
        attributes["gen_ai.response.model"] = call.upstream_model


def call_attributes(call: CallLog) -> dict[str, Any]:
    """The call span's attributes: what the client asked, what served it, Sluice's facts."""
    trace = call.trace
    assert trace is not None
    served = call.upstream_protocol
    provider = provider_of(served) if served else _CLIENT_PROVIDERS.get(call.client_protocol)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation_of(call.endpoint),
        "gen_ai.provider.name": provider or "openai",
        "gen_ai.request.model": call.requested_model[:200],
        "http.response.status_code": call.status_code,
        "sluice.request_id": call.request_id,
        "sluice.route": call.route,
        "sluice.outcome": call.outcome,
        "sluice.stream": call.stream,
        "sluice.attempts": call.attempt_count,
        "sluice.retries": call.retries,
        "sluice.fell_back": call.fell_back,
        "sluice.client_protocol": call.client_protocol,
    }
    if call.outcome != Outcome.SUCCESS:
        attributes["error.type"] = call.outcome
    if call.member_id is not None:
        attributes["sluice.member.id"] = call.member_id
    if call.application_slug:
        attributes["sluice.application"] = call.application_slug
    if call.key_prefix:
        attributes["sluice.key_prefix"] = call.key_prefix
    if call.priority:
        attributes["sluice.priority"] = call.priority
    if call.queue_ms is not None:
        attributes["sluice.queue_ms"] = round(call.queue_ms, 3)
    if call.served_deployment:
        attributes["sluice.served_deployment"] = call.served_deployment
    if call.cache:
        attributes["sluice.cache"] = call.cache
    if call.batch_id:
        attributes["sluice.batch_id"] = call.batch_id
    if call.degraded:
        attributes["sluice.degraded"] = list(call.degraded)
    _usage(attributes, call, trace)
    return attributes


def attempt_attributes(
    call: CallLog, attempt: AttemptLog, deployment: DeploymentSpec
) -> dict[str, Any]:
    """An upstream attempt's span attributes; the one that served carries the answer's."""
    trace = call.trace
    assert trace is not None
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation_of(call.endpoint),
        "gen_ai.provider.name": provider_of(deployment.upstream.kind),
        "gen_ai.request.model": deployment.model,
        "sluice.deployment": deployment.name,
        "sluice.upstream": deployment.upstream.name,
        "sluice.attempt": attempt.number,
    }
    host = urlsplit(deployment.upstream.base_url)
    if host.hostname:
        attributes["server.address"] = host.hostname
        if host.port:
            attributes["server.port"] = host.port
    if attempt.status_code is not None:
        attributes["http.response.status_code"] = attempt.status_code
    if attempt.ended_by:
        attributes["error.type"] = attempt.ended_by
    if attempt.retry_delay_ms is not None:
        attributes["sluice.retry.delay_ms"] = round(attempt.retry_delay_ms, 3)
        attributes["sluice.retry.reason"] = attempt.retry_reason
    if not attempt.ended_by and deployment.name == call.served_deployment:
        _usage(attributes, call, trace)
    return attributes


def _ns(call: CallLog, attempt: AttemptLog | None = None) -> tuple[int, int]:
    """A span's start and end, in ns since the epoch."""
    if attempt is None:
        start, ms = call.created_at.timestamp(), call.latency_ms
    else:
        start, ms = attempt.started_at.timestamp(), attempt.duration_ms
    begin = int(start * 1e9)
    return begin, begin + int(ms * 1e6)


class _Tracer:
    """The SDK's provider with its batch exporter, and the thread that builds spans."""

    def __init__(self, exporter: Any = None) -> None:
        """`exporter`: the SDK's span exporter; OTLP over HTTP (as the OTEL_* variables say)
        unless another is given (tests: the SDK's in-memory one)."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create()
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: "sluice"}))
        self.ids = _PresetIds()
        self.provider = TracerProvider(resource=resource, id_generator=self.ids)
        self.provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter()))
        self.tracer = self.provider.get_tracer("sluice")
        self.queue: queue.SimpleQueue[CallLog] = queue.SimpleQueue()
        self._pid = os.getpid()
        threading.Thread(target=self._build_forever, name="sluice-tracing", daemon=True).start()

    def sampled(self, trace: CallTrace) -> bool:
        """The sampler's word (OTEL_TRACES_SAMPLER), asked on the path so the upstream is
        told the same; the standard samplers answer the same again when the spans are
        built."""
        result = self.provider.sampler.should_sample(_parent(trace), trace.trace_id, "call")
        return result.decision.is_sampled()

    def _build_forever(self) -> None:
        while True:
            call = self.queue.get()
            try:
                self.build(call)
            except Exception:  # a bug here must cost a trace, never the thread
                log.exception("could not build the trace of %s", call.request_id)

    def build(self, call: CallLog) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

        trace = call.trace
        assert trace is not None
        start, end = _ns(call)
        operation = operation_of(call.endpoint)
        self.ids.preset(trace.trace_id, trace.span_id)
        span = self.tracer.start_span(
            f"{operation} {call.requested_model[:200]}".strip(),
            context=_parent(trace),
            kind=SpanKind.SERVER,
            attributes=call_attributes(call),
            start_time=start,
        )
        if call.outcome != Outcome.SUCCESS:
            span.set_status(Status(StatusCode.ERROR, call.outcome))
        inside = set_span_in_context(span)
        for attempt in call.attempts:
            if attempt.skipped:
                span.add_event(
                    "sluice.deployment_skipped",
                    {
                        "sluice.deployment": attempt.deployment,
                        "sluice.skip_reason": attempt.skipped,
                    },
                    timestamp=_ns(call, attempt)[0],
                )
                continue
            sent = trace.sent.get(attempt.number)
            if sent is None:
                continue
            span_id, deployment = sent
            begin, finish = _ns(call, attempt)
            self.ids.preset(trace.trace_id, span_id)
            child = self.tracer.start_span(
                f"{operation} {deployment.model}",
                context=inside,
                kind=SpanKind.CLIENT,
                attributes=attempt_attributes(call, attempt, deployment),
                start_time=begin,
            )
            if attempt.ended_by:
                child.set_status(Status(StatusCode.ERROR, attempt.ended_by))
            child.end(end_time=max(begin, finish))
        span.end(end_time=end)

    def flush(self, timeout_ms: int = 5000) -> None:
        self.provider.force_flush(timeout_ms)


def _parent(trace: CallTrace) -> Any:
    """The context a call's span starts in: the client's span, or none."""
    from opentelemetry.context import Context
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        TraceFlags,
        TraceState,
        set_span_in_context,
    )

    if not trace.parent_id:
        return Context()
    state = TraceState.from_header([trace.tracestate]) if trace.tracestate else None
    flags = TraceFlags(_SAMPLED if trace.sampled else 0)
    remote = SpanContext(trace.trace_id, trace.parent_id, True, flags, state)
    return set_span_in_context(NonRecordingSpan(remote), Context())


class _PresetIds:
    """The SDK's id generator, answering with the ids the request path already drew (and
    sent upstream) for the span about to start; random ones otherwise."""

    def __init__(self) -> None:
        self._trace_id = 0
        self._span_id = 0

    def preset(self, trace_id: int, span_id: int) -> None:
        self._trace_id, self._span_id = trace_id, span_id  # only the builder thread calls

    def generate_span_id(self) -> int:
        span_id, self._span_id = self._span_id, 0
        return span_id or random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        trace_id, self._trace_id = self._trace_id, 0
        return trace_id or random.getrandbits(128) or 1

    def is_trace_id_random(self) -> bool:
        return False


def enabled() -> bool:
    """Traces are exported when an OTLP endpoint is set (and the SDK not disabled)."""
    env = os.environ
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return bool(endpoint) and env.get("OTEL_SDK_DISABLED", "").lower() != "true"


_state: dict[str, _Tracer | None] = {}


def _tracer() -> _Tracer | None:
    """The process's tracer, made on first use (after uvicorn forked its workers); None when
    tracing is off."""
    try:
        found = _state["tracer"]
    except KeyError:
        found = _state["tracer"] = _Tracer() if enabled() else None
    if found is not None and found._pid != os.getpid():  # a forked child: its own thread
        found = _state["tracer"] = _Tracer()
    return found
