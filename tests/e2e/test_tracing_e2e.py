"""OpenTelemetry traces, end to end: a gateway under uvicorn exporting OTLP/HTTP to a receiver
in this test (parsed with the official protobuf definitions), calls through it to the
simulator, and the spans that arrive: one per call and one per upstream attempt, with the
GenAI attributes and Sluice's own, the client's trace continued and passed on upstream."""

import gzip
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from tests.support import GatewayHandle, SimulatorHandle, start_gateway, start_simulator, wait_until

MESSAGES = [{"role": "user", "content": "A secret prompt that no span may carry."}]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class Receiver:
    """An OTLP/HTTP trace receiver on loopback: every span it was sent, flattened."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.services: set[str] = set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver.take(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            self.services.add(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                            "kind": span.kind,
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "error": span.status.code == Status.STATUS_CODE_ERROR,
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                            "events": [e.name for e in span.events],
                        }
                    )

    def trace_of(self, request_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The call's span (waited for) and its attempt spans, in attempt order."""

        def found() -> dict[str, Any] | None:
            return next(
                (s for s in self.spans if s["attributes"].get("sluice.request_id") == request_id),
                None,
            )

        call = wait_until(found, timeout=10)
        attempts = [s for s in self.spans if s["parent_span_id"] == call["span_id"]]
        return call, sorted(attempts, key=lambda s: s["attributes"]["sluice.attempt"])


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()


@pytest.fixture(scope="module")
def trace_simulator() -> Iterator[SimulatorHandle]:
    """`tr-ok` answers; `tr-full` is always at capacity; `tr-claude` speaks Messages and
    `tr-resp` Responses."""
    yield from start_simulator(
        "--model", "tr-ok:16", "--model", "tr-full:16", "--fault", "tr-full:capacity=1",
        "--model", "tr-claude:16:anthropic", "--model", "tr-resp:16:openai-responses",
    )  # fmt: skip


@pytest.fixture(scope="module")
def traced(
    e2e_database: str,
    trace_simulator: SimulatorHandle,
    receiver: Receiver,
    django_db_blocker: Any,
) -> Iterator[GatewayHandle]:
    """Routes tr-plain (tr-ok) and tr-fallback (tr-full, then tr-ok); application `tracing`
    and `tr-limited` (one request a minute); a gateway exporting to the receiver."""
    from routing.catalog.config_file import apply_config, validate_config

    config = {
        "upstreams": [
            {"name": "trace-sim", "base_url": f"{trace_simulator.url}/v1"},
            {"name": "trace-a", "kind": "anthropic", "base_url": f"{trace_simulator.url}/v1"},
            {
                "name": "trace-r",
                "kind": "openai-responses",
                "base_url": f"{trace_simulator.url}/v1",
            },
        ],
        "deployments": [
            {"name": "tr-ok", "upstream": "trace-sim", "model": "tr-ok"},
            {"name": "tr-claude", "upstream": "trace-a", "model": "tr-claude"},
            {"name": "tr-resp", "upstream": "trace-r", "model": "tr-resp"},
            {
                "name": "tr-full",
                "upstream": "trace-sim",
                "model": "tr-full",
                "breaker_threshold": 1000,
            },
        ],
        "routes": [
            {"name": "tr-plain", "chain": ["tr-ok"]},
            {"name": "tr-fallback", "chain": ["tr-full", "tr-ok"]},
            {"name": "tr-claude", "chain": ["tr-claude"]},
            {"name": "tr-resp", "chain": ["tr-resp"]},
        ],
        "applications": [
            {
                "slug": "tracing",
                "team": "demo",
                "routes": ["tr-plain", "tr-fallback", "tr-claude", "tr-resp"],
            },
            {"slug": "tr-limited", "team": "demo", "routes": ["tr-plain"]},
        ],
        "limits": [{"scope": "application", "name": "tr-limited", "requests_per_minute": 1}],
    }
    with django_db_blocker.unblock():
        apply_config(validate_config(config))
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_SERVICE_NAME": "sluice-under-test",
    }
    yield from start_gateway(e2e_database, extra_env=env)


@pytest.fixture(scope="module")
def call(traced: GatewayHandle, django_db_blocker: Any) -> Callable[..., httpx.Response]:
    """POST a chat completion with a key of the application (one per application: a new
    key takes the gateway a moment to learn)."""
    from accounts.models import Team
    from accounts.services import key_issue, member_ensure

    keys: dict[str, str] = {}

    def post(
        model: str,
        *,
        application: str = "tracing",
        headers: dict[str, str] | None = None,
        path: str = "chat/completions",
        **body: Any,
    ) -> httpx.Response:
        if application not in keys:
            email = f"{uuid.uuid4().hex[:10]}@example.com"
            with django_db_blocker.unblock():
                member_ensure(email=email, team=Team.objects.get(slug="demo"))
                keys[application] = key_issue(member_email=email, application_slug=application)[1]
        content = {"input": MESSAGES} if path == "responses" else {"messages": MESSAGES}
        return httpx.post(
            f"{traced.url}/v1/{path}",
            json={"model": model, **content, **body},
            headers={"Authorization": f"Bearer {keys[application]}", **(headers or {})},
            timeout=30,
        )

    return post


def _no_content(spans: list[dict[str, Any]]) -> None:
    text = json.dumps(spans)
    assert "secret prompt" not in text


def test_a_plain_call_is_a_call_span_and_one_attempt_span(
    call: Callable[..., httpx.Response], receiver: Receiver
) -> None:
    response = call("tr-plain")
    assert response.status_code == 200, response.text
    span, attempts = receiver.trace_of(response.headers["x-sluice-request-id"])

    assert span["name"] == "chat tr-plain"
    assert span["kind"] == ProtoSpan.SPAN_KIND_SERVER
    assert not span["error"]
    a = span["attributes"]
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "tr-plain"
    assert a["gen_ai.response.model"] == "tr-ok"
    assert a["gen_ai.usage.input_tokens"] > 0
    assert a["gen_ai.usage.output_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert a["sluice.application"] == "tracing"
    assert a["sluice.priority"] == "interactive"
    assert a["sluice.served_deployment"] == "tr-ok"
    assert a["sluice.outcome"] == "success"
    assert a["sluice.fell_back"] is False
    assert a["sluice.attempts"] == 1
    assert isinstance(a["sluice.member.id"], int)
    assert "error.type" not in a
    assert "sluice-under-test" in receiver.services

    (attempt,) = attempts
    assert attempt["name"] == "chat tr-ok"
    assert attempt["kind"] == ProtoSpan.SPAN_KIND_CLIENT
    assert attempt["trace_id"] == span["trace_id"]
    b = attempt["attributes"]
    assert b["gen_ai.request.model"] == "tr-ok"
    assert b["gen_ai.response.model"] == "tr-ok"
    assert b["gen_ai.usage.output_tokens"] == a["gen_ai.usage.output_tokens"]
    assert b["sluice.deployment"] == "tr-ok"
    assert b["http.response.status_code"] == 200
    assert b["server.address"] == "127.0.0.1"
    assert span["start"] <= attempt["start"] <= attempt["end"] <= span["end"]
    _no_content([span, attempt])


def test_a_fallback_shows_the_failed_attempt_and_the_one_that_served(
    call: Callable[..., httpx.Response], receiver: Receiver
) -> None:
    response = call("tr-fallback")
    assert response.status_code == 200, response.text
    span, attempts = receiver.trace_of(response.headers["x-sluice-request-id"])

    a = span["attributes"]
    assert a["gen_ai.request.model"] == "tr-fallback"
    assert a["gen_ai.response.model"] == "tr-ok"
    assert a["sluice.served_deployment"] == "tr-ok"
    assert a["sluice.fell_back"] is True
    assert a["sluice.attempts"] == 2
    assert not span["error"]

    first, second = attempts
    assert first["name"] == "chat tr-full"
    assert first["error"]
    assert first["attributes"]["error.type"] == "capacity"
    assert first["attributes"]["http.response.status_code"] == 503
    assert "gen_ai.usage.output_tokens" not in first["attributes"]
    assert second["name"] == "chat tr-ok"
    assert not second["error"]
    assert "error.type" not in second["attributes"]
    assert second["attributes"]["gen_ai.usage.output_tokens"] > 0
    assert first["end"] <= second["start"]


def test_a_refused_call_is_a_call_span_with_its_error_and_no_attempt(
    call: Callable[..., httpx.Response], receiver: Receiver
) -> None:
    assert call("tr-plain", application="tr-limited").status_code == 200
    refused = call("tr-plain", application="tr-limited")
    assert refused.status_code == 429, refused.text
    span, attempts = receiver.trace_of(refused.headers["x-sluice-request-id"])

    assert attempts == []
    assert span["error"]
    a = span["attributes"]
    assert a["error.type"] == "rate_limited"
    assert a["http.response.status_code"] == 429
    assert a["sluice.outcome"] == "rate_limited"
    assert a["sluice.attempts"] == 0
    assert a["gen_ai.request.model"] == "tr-plain"
    assert "sluice.served_deployment" not in a


def test_a_stream_carries_its_usage_and_finish_reason(
    call: Callable[..., httpx.Response], receiver: Receiver
) -> None:
    response = call("tr-plain", stream=True, stream_options={"include_usage": True})
    assert response.status_code == 200
    assert b"data: [DONE]" in response.content
    span, (attempt,) = receiver.trace_of(response.headers["x-sluice-request-id"])

    a = span["attributes"]
    assert a["sluice.stream"] is True
    assert a["gen_ai.usage.input_tokens"] > 0
    assert a["gen_ai.usage.output_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert attempt["attributes"]["gen_ai.usage.output_tokens"] == a["gen_ai.usage.output_tokens"]
    _no_content([span, attempt])


def test_the_clients_trace_is_continued_and_passed_on_upstream(
    call: Callable[..., httpx.Response], receiver: Receiver, trace_simulator: SimulatorHandle
) -> None:
    trace_id, parent_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    response = call("tr-fallback", headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
    assert response.status_code == 200
    span, attempts = receiver.trace_of(response.headers["x-sluice-request-id"])

    assert span["trace_id"] == trace_id
    assert span["parent_span_id"] == parent_id
    assert [s["trace_id"] for s in attempts] == [trace_id, trace_id]
    # Each upstream request carried the traceparent of its own attempt span.
    seen = trace_simulator.stats("tr-full")["traceparents"]
    assert f"00-{trace_id}-{attempts[0]['span_id']}-01" in seen
    seen = trace_simulator.stats("tr-ok")["traceparents"]
    assert f"00-{trace_id}-{attempts[1]['span_id']}-01" in seen


def test_a_call_without_a_traceparent_starts_its_own_trace(
    call: Callable[..., httpx.Response], receiver: Receiver, trace_simulator: SimulatorHandle
) -> None:
    response = call("tr-plain", headers={"traceparent": "not-a-traceparent"})
    assert response.status_code == 200
    span, (attempt,) = receiver.trace_of(response.headers["x-sluice-request-id"])
    assert span["parent_span_id"] == ""
    assert len(span["trace_id"]) == 32 and int(span["trace_id"], 16)
    seen = trace_simulator.stats("tr-ok")["traceparents"]
    assert f"00-{span['trace_id']}-{attempt['span_id']}-01" in seen


def test_a_messages_stream_to_anthropic_is_traced_as_anthropic(
    call: Callable[..., httpx.Response], receiver: Receiver
) -> None:
    response = call("tr-claude", path="messages", max_tokens=16, stream=True)
    assert response.status_code == 200, response.text
    assert b"message_stop" in response.content
    span, (attempt,) = receiver.trace_of(response.headers["x-sluice-request-id"])

    a = span["attributes"]
    assert span["name"] == "chat tr-claude"
    assert a["gen_ai.provider.name"] == "anthropic"
    assert a["sluice.client_protocol"] == "anthropic"
    assert a["gen_ai.usage.output_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert attempt["attributes"]["gen_ai.provider.name"] == "anthropic"
    _no_content([span, attempt])


def test_a_responses_call_reports_its_cache_tokens(
    call: Callable[..., httpx.Response], receiver: Receiver
) -> None:
    response = call("tr-resp", path="responses")
    assert response.status_code == 200, response.text
    span, (attempt,) = receiver.trace_of(response.headers["x-sluice-request-id"])

    a = span["attributes"]
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.usage.cache_read.input_tokens"] == 0
    assert a["gen_ai.usage.input_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert attempt["attributes"]["gen_ai.usage.cache_read.input_tokens"] == 0


def test_calls_are_served_while_the_collector_is_away(
    e2e_database: str, traced: GatewayHandle, call: Callable[..., httpx.Response]
) -> None:
    """An endpoint nobody listens on: the export fails (logged), the calls do not."""
    from tests.support import free_port

    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
    }
    gateway = start_gateway(e2e_database, extra_env=env)
    handle = next(gateway)
    try:
        key = call("tr-plain").request.headers["authorization"]  # a key the gateways know
        for _ in range(5):
            response = httpx.post(
                f"{handle.url}/v1/chat/completions",
                json={"model": "tr-plain", "messages": MESSAGES},
                headers={"Authorization": key},
                timeout=30,
            )
            assert response.status_code == 200, response.text
    finally:
        next(gateway, None)
