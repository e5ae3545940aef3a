"""OpenTelemetry traces of calls, built after the fact from the call's record.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set;
then the standard `OTEL_*` variables apply (service name and resource attributes, the
exporter's headers, TLS, compression and timeout, the sampler, the batch delay and sizes).
On the request path only two cheap things happen: a client's `traceparent` is read (or a
trace id drawn) into a `CallTrace`, and each upstream attempt draws its span id and sends it
on as the attempt's own `traceparent`. Everything else happens once the call is complete:
`record()` queues the finished `CallLog` for a thread that writes its spans
(routing/observability/trace_spans.py) and exports them in batches with the SDK's OTLP/HTTP
exporter. No message content is ever recorded.
"""

import atexit
import logging
import os
import random
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from routing.catalog.specs import DeploymentSpec
from routing.observability import otlp_wire
from routing.observability.audit import AttemptLog, CallLog
from routing.observability.trace_spans import spans_of

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
    call.sampled = tracer.sampler.sampled(trace_id, None if parent is None else call.sampled)
    return call


def record(call: CallLog) -> None:
    """Queue a finished call's spans to be built and exported (nothing when not traced)."""
    trace = call.trace
    if trace is not None and trace.sampled:
        tracer = _tracer()
        if tracer is not None:
            tracer.take(call)


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


class Sampler:
    """The standard samplers OTEL_TRACES_SAMPLER names (the SDK's rules, decided here on the
    request path so the upstream's traceparent says the same): always_on, always_off,
    traceidratio and their parentbased_ forms (the default: parentbased_always_on)."""

    def __init__(self, name: str, argument: str) -> None:
        name = name.strip().lower() or "parentbased_always_on"
        self.parent_based = name.startswith("parentbased_")
        root = name.removeprefix("parentbased_")
        if root not in ("always_on", "always_off", "traceidratio"):
            log.warning("OTEL_TRACES_SAMPLER=%s is not supported here: parentbased_always_on", name)
            self.parent_based, root = True, "always_on"
        rate = 1.0
        if root == "traceidratio":
            try:
                rate = min(1.0, max(0.0, float(argument or 1.0)))
            except ValueError:
                log.warning("OTEL_TRACES_SAMPLER_ARG=%r is no rate: 1.0", argument)
        elif root == "always_off":
            rate = 0.0
        # As the SDK's TraceIdRatioBased: the trace id's low 64 bits below the bound.
        self.bound = round(rate * (1 << 64))

    def sampled(self, trace_id: int, parent_sampled: bool | None) -> bool:
        """`parent_sampled`: the client's traceparent's flag (None: no parent)."""
        if self.parent_based and parent_sampled is not None:
            return parent_sampled
        return trace_id & 0xFFFFFFFFFFFFFFFF < self.bound


class _Tracer:
    """The process's exporter and the thread that writes and sends the spans in batches
    (OTEL_BSP_SCHEDULE_DELAY ms apart, at most OTEL_BSP_MAX_EXPORT_BATCH_SIZE spans each;
    past OTEL_BSP_MAX_QUEUE_SIZE calls waiting, new ones are dropped, as the SDK does)."""

    def __init__(self, send: Callable[[bytes], object] | None = None) -> None:
        """`send`: posts an encoded export request; the SDK's OTLP/HTTP exporter's client
        (with its retries, headers, TLS and compression from the OTEL_* variables) unless
        another is given (tests)."""
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource

        env = os.environ
        self.sampler = Sampler(
            env.get("OTEL_TRACES_SAMPLER", ""), env.get("OTEL_TRACES_SAMPLER_ARG", "")
        )
        resource = Resource.create()
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: "sluice"}))
        self.resource = otlp_wire.resource(resource.attributes.items())
        self.scope = otlp_wire.scope("sluice", _version())
        self.send = send or _otlp_http()
        self.delay = _env_number("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self.batch_size = max(1, int(_env_number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)))
        self.max_queue = max(1, int(_env_number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)))
        self.calls: deque[CallLog] = deque()  # appended by the loop, taken by the thread
        self.wake_at = max(1, self.batch_size // 2)  # calls: about two spans each
        self.dropped = 0
        self._wake = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._run, name="sluice-tracing", daemon=True).start()
        atexit.register(self.flush)

    def take(self, call: CallLog) -> None:
        """Queue a finished call (nothing is woken for it: the thread comes for the queue
        every OTEL_BSP_SCHEDULE_DELAY, or once a batch is waiting)."""
        calls = self.calls
        if len(calls) >= self.max_queue:
            self.dropped += 1
            if self.dropped in (1, 1000) or self.dropped % 100_000 == 0:
                log.warning("tracing queue full: %d calls' spans dropped so far", self.dropped)
            return
        calls.append(call)
        if len(calls) == self.wake_at:
            self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.delay)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Write and send every call queued so far (also at exit, and in tests)."""
        with self._lock:
            spans: list[bytes] = []
            calls = self.calls
            while calls:
                call = calls.popleft()
                try:
                    spans += spans_of(call)
                except Exception:  # a bug here must cost a trace, never the thread
                    log.exception("could not write the trace of %s", call.request_id)
            for start in range(0, len(spans), self.batch_size):
                batch = spans[start : start + self.batch_size]
                try:
                    self.send(otlp_wire.export_request(self.resource, self.scope, batch))
                except Exception:
                    log.exception("could not export %d spans", len(batch))


def _otlp_http() -> Callable[[bytes], object]:
    """The OpenTelemetry SDK's OTLP/HTTP protobuf exporter, as configured by the OTEL_*
    variables, sending bytes already encoded."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # Its HTTP client, for bytes already encoded: the exporter's own export() takes SDK
    # spans. A private name (pyproject.toml pins the range it is known in); if it moves,
    # tracing turns itself off at start, loudly, and tests/e2e/test_tracing_e2e.py fails.
    client = OTLPSpanExporter()._client

    def send(data: bytes) -> object:
        result = client.export(data)
        if not result.success:
            log.warning("trace export failed (%s): %s", result.status_code, result.error)
        return result

    return send


def _env_number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        log.warning("%s is not a number: %s", name, default)
        return default


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sluice")
    except PackageNotFoundError:
        return ""


def enabled() -> bool:
    """Traces are exported when an OTLP endpoint is set (and the SDK not disabled)."""
    env = os.environ
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return bool(endpoint) and env.get("OTEL_SDK_DISABLED", "").lower() != "true"


_state: dict[str, _Tracer | None] = {}
# A forked child (uvicorn's workers) makes its own tracer: the parent's thread is not in it.
os.register_at_fork(after_in_child=_state.clear)


def _tracer() -> _Tracer | None:
    """The process's tracer, made on first use; None when tracing is off."""
    try:
        return _state["tracer"]
    except KeyError:
        pass
    found = None
    if enabled():
        try:
            found = _Tracer()
        except Exception:  # a broken exporter setup costs the traces, never a call
            log.exception("OpenTelemetry tracing could not start; no traces are exported")
    _state["tracer"] = found
    return found
