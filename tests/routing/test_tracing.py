"""The pieces of tracing that need no server: reading a `traceparent`, the sampler, the
answer's finish reasons and cache tokens in each protocol's shape, and the spans a finished
call's record becomes (written as OTLP protobuf, read back with the official classes)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from core.outcomes import Outcome
from routing.catalog.specs import DeploymentSpec, UpstreamSpec
from routing.deployment_state import Limits
from routing.observability import otlp_wire
from routing.observability.audit import AttemptLog, CallLog
from routing.observability.trace_spans import spans_of
from routing.observability.tracing import (
    CallTrace,
    Sampler,
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


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind)


def _read(data: bytes) -> tuple[dict[str, object], list[Span]]:
    """An encoded export request, read with the official classes: its resource's attributes
    and its spans."""
    request = ExportTraceServiceRequest.FromString(data)
    (resource_spans,) = request.resource_spans
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "sluice"
    resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
    return resource, list(scope_spans.spans)


def _attributes(span: Span) -> dict[str, object]:
    return {a.key: _value(a.value) for a in span.attributes}


def _decoded(call: CallLog) -> dict[str, Span]:
    data = otlp_wire.export_request(b"", otlp_wire.scope("sluice", ""), spans_of(call))
    return {span.name: span for span in _read(data)[1]}


@pytest.mark.parametrize(
    "value",
    [
        "",
        "chat",
        "café ☕",
        0,
        1,
        127,
        128,
        2**40,
        -1,
        -(2**63),
        True,
        False,
        0.25,
        ["a", "b"],
        [1, 2],
    ],
)
def test_every_attribute_value_reads_back_as_written(value: object) -> None:
    data = otlp_wire.attributes([("k", value)], b"\x0a")  # a Resource's attributes
    request = otlp_wire.export_request(
        otlp_wire.resource([("k", value)]), otlp_wire.scope("sluice", "1"), []
    )
    assert data in request
    resource, _ = _read(request)
    assert resource == {"k": value}


def test_a_finished_call_becomes_its_span_and_one_per_attempt_sent() -> None:
    trace = CallTrace(int(TRACE, 16), 0x1111, parent_id=int(PARENT, 16), tracestate="k=v")
    call = _fallback_call(trace)
    spans = _decoded(call)

    assert set(spans) == {"chat r", "chat m-a", "chat m-b"}
    root, failed, served = spans["chat r"], spans["chat m-a"], spans["chat m-b"]
    assert root.trace_id.hex() == TRACE
    assert root.span_id.hex() == "0000000000001111"
    assert root.parent_span_id.hex() == PARENT
    assert root.trace_state == "k=v"
    assert root.kind == Span.SPAN_KIND_SERVER
    assert root.flags == 0x301  # sampled, its parent remote
    # The attempt spans have the ids their upstream requests were sent with.
    assert int.from_bytes(failed.span_id, "big") == trace.sent[1][0]
    assert int.from_bytes(served.span_id, "big") == trace.sent[3][0]
    assert failed.parent_span_id == served.parent_span_id == root.span_id
    assert failed.trace_id == served.trace_id == root.trace_id
    assert failed.kind == served.kind == Span.SPAN_KIND_CLIENT
    assert failed.flags == 0x101

    a = _attributes(root)
    assert a["gen_ai.provider.name"] == "anthropic"
    assert a["gen_ai.request.model"] == "r"
    assert a["gen_ai.response.model"] == "m-b-1"
    assert a["gen_ai.usage.cache_read.input_tokens"] == 2
    assert a["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert a["sluice.priority"] == "batch"
    assert a["sluice.queue_ms"] == 1.5
    assert a["sluice.fell_back"] is True
    assert "error.type" not in a
    assert root.status.code == Status.STATUS_CODE_UNSET
    (event,) = root.events
    assert event.name == "sluice.deployment_skipped"
    assert {x.key: _value(x.value) for x in event.attributes}["sluice.skip_reason"] == "breaker"

    f = _attributes(failed)
    assert failed.status.code == Status.STATUS_CODE_ERROR
    assert f["error.type"] == "capacity"
    assert f["gen_ai.provider.name"] == "openai"
    assert f["server.address"] == "models.example"
    assert f["server.port"] == 8080
    assert "gen_ai.usage.input_tokens" not in f
    s = _attributes(served)
    assert s["gen_ai.provider.name"] == "anthropic"
    assert s["gen_ai.usage.input_tokens"] == 11
    assert s["gen_ai.response.finish_reasons"] == ["end_turn"]
    times = [root.start_time_unix_nano, failed.start_time_unix_nano, failed.end_time_unix_nano]
    times += [served.start_time_unix_nano, served.end_time_unix_nano, root.end_time_unix_nano]
    assert times == sorted(times)
    assert root.end_time_unix_nano - root.start_time_unix_nano == 30_000_000


def test_spans_of_calls_alike_share_their_encoded_attributes_yet_keep_their_own() -> None:
    first = _fallback_call(CallTrace(1, 2))
    second = _fallback_call(CallTrace(3, 4))
    second.request_id, second.tokens_out = "req_other", 99
    a, b = _decoded(first)["chat r"], _decoded(second)["chat r"]
    assert _attributes(a)["sluice.request_id"] == "req_t"
    assert _attributes(b)["sluice.request_id"] == "req_other"
    assert _attributes(b)["gen_ai.usage.output_tokens"] == 99
    assert a.parent_span_id == b"" and a.flags == 0x101  # a new trace


def test_a_refused_call_is_one_span_with_its_error() -> None:
    call = CallLog(request_id="req_r", endpoint="messages", client_ip=None)
    call.trace = CallTrace(0xABC, 0x2)
    call.client_protocol, call.requested_model = "anthropic", "claude"
    call.finish(outcome=Outcome.RATE_LIMITED, status=429, error_message="over")
    (span,) = _decoded(call).values()

    assert span.name == "chat claude"
    assert span.parent_span_id == b""
    assert span.trace_id == (0xABC).to_bytes(16, "big")
    assert span.status.code == Status.STATUS_CODE_ERROR
    a = _attributes(span)
    assert a["error.type"] == "rate_limited"
    assert a["gen_ai.provider.name"] == "anthropic"
    assert a["http.response.status_code"] == 429
    assert "gen_ai.usage.input_tokens" not in a


def test_the_tracer_sends_queued_calls_in_one_request_with_its_resource(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # only flush() sends
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    sent: list[bytes] = []
    tracer = _Tracer(sent.append)
    for n in range(3):
        call = _fallback_call(CallTrace(n + 1, n + 100))
        tracer.take(call)
    tracer.flush()
    (request,) = sent
    resource, spans = _read(request)
    assert resource["service.name"] == "sluice"
    assert len(spans) == 9


@pytest.mark.parametrize(
    ("name", "argument", "trace_id", "parent", "sampled"),
    [
        ("", "", 5, None, True),  # parentbased_always_on
        ("", "", 5, False, False),
        ("always_on", "", 5, False, True),
        ("always_off", "", 5, None, False),
        ("parentbased_always_off", "", 5, True, True),
        ("traceidratio", "0.5", 2**62, None, True),
        ("traceidratio", "0.5", 2**63 + 1, None, False),
        ("traceidratio", "0.5", (2**63 + 1) | (1 << 100), None, False),  # the low 64 bits
        ("parentbased_traceidratio", "0", 5, True, True),
        ("traceidratio", "nonsense", 5, None, True),
        ("jaeger_remote", "", 5, False, False),  # unsupported: parentbased_always_on
    ],
)
def test_the_sampler_follows_the_sdks_rules(
    name: str, argument: str, trace_id: int, parent: bool | None, sampled: bool
) -> None:
    assert Sampler(name, argument).sampled(trace_id, parent) is sampled


@pytest.mark.parametrize(
    ("change", "attribute", "value"),
    [
        (lambda c: setattr(c, "outcome", Outcome.UPSTREAM_ERROR), "error.type", "upstream_error"),
        (lambda c: setattr(c, "status_code", 502), "http.response.status_code", 502),
        (lambda c: setattr(c, "priority", "interactive"), "sluice.priority", "interactive"),
        (lambda c: setattr(c, "served_deployment", "a"), "sluice.served_deployment", "a"),
        (lambda c: setattr(c, "upstream_model", "m-2"), "gen_ai.response.model", "m-2"),
        (lambda c: setattr(c, "application_slug", "other"), "sluice.application", "other"),
        (lambda c: setattr(c, "cache", "miss"), "sluice.cache", "miss"),
        (lambda c: c.degraded.append("tools"), "sluice.degraded", ["tools"]),
        (
            lambda c: setattr(c.trace, "finish_reasons", ["length"]),
            "gen_ai.response.finish_reasons",
            ["length"],
        ),
    ],
)
def test_a_call_that_differs_never_gets_another_calls_encoded_attributes(
    change: object, attribute: str, value: object
) -> None:
    _decoded(_fallback_call(CallTrace(1, 2)))  # its block encoded, and kept
    other = _fallback_call(CallTrace(3, 4))
    change(other)  # type: ignore[operator]
    assert _attributes(_decoded(other)["chat r"])[attribute] == value
