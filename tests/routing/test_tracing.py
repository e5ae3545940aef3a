"""The pieces of tracing that need no server: reading a `traceparent`, the answer's finish
reasons and cache tokens in each protocol's shape, and the spans a finished call's record
becomes (built by the real SDK into its in-memory exporter)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from core.outcomes import Outcome
from routing.catalog.specs import DeploymentSpec, UpstreamSpec
from routing.deployment_state import Limits
from routing.observability.audit import AttemptLog, CallLog
from routing.observability.tracing import (
    CallTrace,
    _Tracer,
    cache_tokens,
    finish_reasons,
    parse_traceparent,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("header", "parsed"),
    [
        (f"00-{TRACE}-{PARENT}-01", (int(TRACE, 16), int(PARENT, 16), 1)),
        (f"00-{TRACE}-{PARENT}-00", (int(TRACE, 16), int(PARENT, 16), 0)),
        (f" 00-{TRACE.upper()}-{PARENT}-01 ", (int(TRACE, 16), int(PARENT, 16), 1)),
        (f"01-{TRACE}-{PARENT}-01-later", (int(TRACE, 16), int(PARENT, 16), 1)),  # a later version
        (f"00-{TRACE}-{PARENT}-01-extra", None),  # version 00 has exactly four fields
        (f"ff-{TRACE}-{PARENT}-01", None),  # version ff is invalid
        (f"00-{'0' * 32}-{PARENT}-01", None),  # all-zero ids are invalid
        (f"00-{TRACE}-{'0' * 16}-01", None),
        (f"00-{TRACE[:-1]}-{PARENT}-01", None),
        ("", None),
        ("garbage", None),
    ],
)
def test_traceparent_is_read_as_w3c_says(header: str, parsed: tuple | None) -> None:
    assert parse_traceparent(header) == parsed


@pytest.mark.parametrize(
    ("answer", "reasons"),
    [
        ({"choices": [{"finish_reason": "stop"}, {"finish_reason": "length"}]}, ["stop", "length"]),
        ({"choices": [{"finish_reason": None}]}, []),
        ({"type": "message", "stop_reason": "end_turn"}, ["end_turn"]),
        ({"object": "response", "status": "completed"}, ["stop"]),
        (
            {
                "object": "response",
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
            },
            ["max_output_tokens"],
        ),
        ({"data": []}, []),
        (None, []),
    ],
)
def test_finish_reasons_in_each_protocols_shape(answer: object, reasons: list[str]) -> None:
    assert finish_reasons(answer) == reasons


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        ({"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}}, (4, None)),
        ({"input_tokens": 9, "input_tokens_details": {"cached_tokens": 0}}, (0, None)),
        (
            {"input_tokens": 9, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 5},
            (3, 5),
        ),
        ({"prompt_tokens": 9}, (None, None)),
        (None, (None, None)),
    ],
)
def test_cache_tokens_in_each_protocols_shape(usage: object, tokens: tuple) -> None:
    assert cache_tokens(usage) == tokens


def _deployment(name: str, kind: str = "openai") -> DeploymentSpec:
    upstream = UpstreamSpec(f"up-{name}", "http://models.example:8080/v1", None, 5, 30, kind=kind)
    return DeploymentSpec(
        name, f"m-{name}", upstream, "t", 8, 1000, Decimal(0), Decimal(0), Limits(8)
    )


def _fallback_call(trace: CallTrace) -> CallLog:
    """A call that fell back from `a` (at capacity) to `b` (an Anthropic upstream), after
    passing `c` by (its breaker was open)."""
    call = CallLog(request_id="req_t", endpoint="chat/completions", client_ip=None)
    call.trace = trace
    call.requested_model, call.route, call.priority = "r", "r", "batch"
    first = AttemptLog(1, "a", call.created_at, duration_ms=5, status_code=503)
    first.error_class = "capacity"
    skipped = AttemptLog(2, "c", call.created_at + timedelta(milliseconds=6), skipped="breaker")
    second = AttemptLog(3, "b", call.created_at + timedelta(milliseconds=7), duration_ms=20)
    second.status_code = 200
    call.attempts += [first, skipped, second]
    trace.upstream_headers(first, _deployment("a"))
    trace.upstream_headers(second, _deployment("b", "anthropic"))
    trace.finish_reasons, trace.cache_read_tokens = ["end_turn"], 2
    call.served_deployment, call.upstream_model, call.upstream_protocol = "b", "m-b-1", "anthropic"
    call.fell_back, call.tokens_in, call.tokens_out, call.queue_ms = True, 11, 7, 1.5
    call.finish(outcome=Outcome.SUCCESS, status=200)
    call.latency_ms = 30
    return call


def test_a_finished_call_becomes_its_span_and_one_per_attempt_sent() -> None:
    exporter = InMemorySpanExporter()
    tracer = _Tracer(exporter)
    trace = CallTrace(int(TRACE, 16), 0x1111, parent_id=int(PARENT, 16))
    call = _fallback_call(trace)
    tracer.build(call)
    tracer.flush()

    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"chat r", "chat m-a", "chat m-b"}
    root, failed, served = spans["chat r"], spans["chat m-a"], spans["chat m-b"]
    assert root.context.trace_id == int(TRACE, 16)
    assert root.context.span_id == 0x1111
    assert root.parent is not None and root.parent.span_id == int(PARENT, 16)
    assert root.kind is SpanKind.SERVER
    # The attempt spans have the ids their upstream requests were sent with.
    assert failed.context.span_id == trace.sent[1][0]
    assert served.context.span_id == trace.sent[3][0]
    assert {failed.parent.span_id, served.parent.span_id} == {0x1111}
    assert failed.kind is served.kind is SpanKind.CLIENT

    assert root.attributes["gen_ai.provider.name"] == "anthropic"
    assert root.attributes["gen_ai.request.model"] == "r"
    assert root.attributes["gen_ai.response.model"] == "m-b-1"
    assert root.attributes["gen_ai.usage.cache_read.input_tokens"] == 2
    assert root.attributes["sluice.priority"] == "batch"
    assert root.attributes["sluice.queue_ms"] == 1.5
    assert root.events[0].name == "sluice.deployment_skipped"
    assert root.events[0].attributes["sluice.skip_reason"] == "breaker"
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "capacity"
    assert failed.attributes["gen_ai.provider.name"] == "openai"
    assert failed.attributes["server.address"] == "models.example"
    assert failed.attributes["server.port"] == 8080
    assert "gen_ai.usage.input_tokens" not in failed.attributes
    assert served.attributes["gen_ai.provider.name"] == "anthropic"
    assert served.attributes["gen_ai.usage.input_tokens"] == 11
    assert served.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert root.start_time <= failed.start_time <= failed.end_time <= served.start_time
    assert served.end_time <= root.end_time


def test_a_refused_call_is_one_span_with_its_error() -> None:
    exporter = InMemorySpanExporter()
    tracer = _Tracer(exporter)
    call = CallLog(request_id="req_r", endpoint="messages", client_ip=None)
    call.trace = CallTrace(0xABC, 0x2)
    call.client_protocol, call.requested_model = "anthropic", "claude"
    call.finish(outcome=Outcome.RATE_LIMITED, status=429, error_message="over")
    tracer.build(call)
    tracer.flush()

    (span,) = exporter.get_finished_spans()
    assert span.name == "chat claude"
    assert span.parent is None and span.context.trace_id == 0xABC
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "rate_limited"
    assert span.attributes["gen_ai.provider.name"] == "anthropic"
    assert span.attributes["http.response.status_code"] == 429
