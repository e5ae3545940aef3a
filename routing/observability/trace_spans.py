"""What a finished call's record becomes in a trace: its span, and one per upstream attempt
sent, as OTLP protobuf (routing/observability/otlp_wire.py), with the ids and times the
request path recorded. Attributes follow the OpenTelemetry GenAI semantic conventions;
Sluice's own facts are under `sluice.`. No message content, ever."""

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from core.outcomes import Outcome
from routing.catalog.specs import DeploymentSpec
from routing.observability import otlp_wire
from routing.observability.audit import AttemptLog, CallLog

_OPERATIONS = {"completions": "text_completion", "embeddings": "embeddings"}  # others: chat
_PROVIDERS = {"anthropic": "anthropic"}  # "openai" and "openai-responses": openai


def operation_of(endpoint: str) -> str:
    return _OPERATIONS.get(endpoint, "chat")


def provider_of(kind: str) -> str:
    """gen_ai.provider.name of an upstream kind (or of the client's protocol)."""
    return _PROVIDERS.get(kind, "openai")


def _answer(call: CallLog) -> tuple[tuple[str, Any], ...]:
    """What the answer reported: the served model, why it ended (few distinct values)."""
    trace = call.trace
    items: tuple[tuple[str, Any], ...] = ()
    if call.upstream_model:
        items += (("gen_ai.response.model", call.upstream_model[:200]),)
    if trace.finish_reasons:
        items += (("gen_ai.response.finish_reasons", tuple(trace.finish_reasons)),)
    return items


def _usage(call: CallLog) -> list[tuple[str, Any]]:
    """The tokens the answer used (different for every call)."""
    trace = call.trace
    items: list[tuple[str, Any]] = []
    if call.tokens_in or call.tokens_out:
        items += [
            ("gen_ai.usage.input_tokens", call.tokens_in),
            ("gen_ai.usage.output_tokens", call.tokens_out),
        ]
    if trace.cache_read_tokens is not None:
        items.append(("gen_ai.usage.cache_read.input_tokens", trace.cache_read_tokens))
    if trace.cache_write_tokens is not None:
        items.append(("gen_ai.usage.cache_creation.input_tokens", trace.cache_write_tokens))
    return items


def call_shared(call: CallLog) -> tuple[tuple[str, Any], ...]:
    """The call span's attributes that repeat from call to call (encoded once per set)."""
    served = call.upstream_protocol
    shared: tuple[tuple[str, Any], ...] = (
        ("gen_ai.operation.name", operation_of(call.endpoint)),
        ("gen_ai.provider.name", provider_of(served or call.client_protocol)),
        ("gen_ai.request.model", call.requested_model[:200]),
        ("http.response.status_code", call.status_code),
        ("sluice.route", call.route),
        ("sluice.outcome", call.outcome),
        ("sluice.stream", call.stream),
        ("sluice.attempts", call.attempt_count),
        ("sluice.retries", call.retries),
        ("sluice.fell_back", call.fell_back),
        ("sluice.client_protocol", call.client_protocol),
    )
    if call.outcome != Outcome.SUCCESS:
        shared += (("error.type", call.outcome),)
    if call.member_id is not None:
        shared += (("sluice.member.id", call.member_id),)
    if call.application_slug:
        shared += (("sluice.application", call.application_slug),)
    if call.key_prefix:
        shared += (("sluice.key_prefix", call.key_prefix),)
    if call.priority:
        shared += (("sluice.priority", call.priority),)
    if call.served_deployment:
        shared += (("sluice.served_deployment", call.served_deployment),)
    if call.cache:
        shared += (("sluice.cache", call.cache),)
    if call.degraded:
        shared += (("sluice.degraded", tuple(call.degraded)),)
    return shared + _answer(call)


def _call_key(call: CallLog) -> tuple[Any, ...]:
    """Everything `call_shared` reads, flat (cheap to hash): the key of its encoded block."""
    return (
        call.endpoint,
        call.upstream_protocol,
        call.client_protocol,
        call.requested_model,
        call.status_code,
        call.route,
        call.outcome,
        call.stream,
        call.attempt_count,
        call.retries,
        call.fell_back,
        call.member_id,
        call.application_slug,
        call.key_prefix,
        call.priority,
        call.served_deployment,
        call.cache,
        tuple(call.degraded),
        call.upstream_model,
        tuple(call.trace.finish_reasons),
    )


def call_own(call: CallLog) -> list[tuple[str, Any]]:
    """The call span's attributes of this call alone."""
    own = [("sluice.request_id", call.request_id), *_usage(call)]
    if call.queue_ms is not None:
        own.append(("sluice.queue_ms", round(call.queue_ms, 3)))
    if call.batch_id:
        own.append(("sluice.batch_id", call.batch_id))
    return own


def _served(call: CallLog, attempt: AttemptLog, deployment: DeploymentSpec) -> bool:
    return not attempt.ended_by and deployment.name == call.served_deployment


def attempt_shared(
    call: CallLog, attempt: AttemptLog, deployment: DeploymentSpec
) -> tuple[tuple[str, Any], ...]:
    """An upstream attempt span's attributes that repeat; the attempt that served carries
    the answer's."""
    upstream = deployment.upstream
    shared: tuple[tuple[str, Any], ...] = (
        ("gen_ai.operation.name", operation_of(call.endpoint)),
        ("gen_ai.provider.name", provider_of(upstream.kind)),
        ("gen_ai.request.model", deployment.model),
        ("sluice.deployment", deployment.name),
        ("sluice.upstream", upstream.name),
        ("sluice.attempt", attempt.number),
    )
    shared += _server(upstream.base_url)
    if attempt.status_code is not None:
        shared += (("http.response.status_code", attempt.status_code),)
    if attempt.ended_by:
        shared += (("error.type", attempt.ended_by),)
    if attempt.retry_reason:
        shared += (("sluice.retry.reason", attempt.retry_reason),)
    return shared + (_answer(call) if _served(call, attempt, deployment) else ())


def _attempt_key(call: CallLog, attempt: AttemptLog, deployment: DeploymentSpec) -> tuple[Any, ...]:
    """Everything `attempt_shared` reads, flat: the key of its encoded block."""
    upstream = deployment.upstream
    served = _served(call, attempt, deployment)
    return (
        call.endpoint,
        deployment.name,
        deployment.model,
        upstream.name,
        upstream.kind,
        upstream.base_url,
        attempt.number,
        attempt.status_code,
        attempt.ended_by,
        attempt.retry_reason,
        served,
        call.upstream_model if served else "",
        tuple(call.trace.finish_reasons) if served else (),
    )


def attempt_own(
    call: CallLog, attempt: AttemptLog, deployment: DeploymentSpec
) -> list[tuple[str, Any]]:
    """An attempt span's attributes of its own: the retry's wait, the answer's usage."""
    own: list[tuple[str, Any]] = []
    if attempt.retry_delay_ms is not None:
        own.append(("sluice.retry.delay_ms", round(attempt.retry_delay_ms, 3)))
    if _served(call, attempt, deployment):
        own += _usage(call)
    return own


_blocks: dict[tuple[Any, ...], bytes] = {}
_MAX_BLOCKS = 4096


def _block(
    key: tuple[Any, ...], items: Callable[..., tuple[tuple[str, Any], ...]], *args: Any
) -> bytes:
    """The encoded attributes `items(*args)` lists, by a key of what they are made of
    (bounded: a flood of distinct values empties the cache instead of growing it)."""
    found = _blocks.get(key)
    if found is None:
        if len(_blocks) >= _MAX_BLOCKS:
            _blocks.clear()
        found = _blocks[key] = otlp_wire.attributes(items(*args))
    return found


@functools.lru_cache(maxsize=1024)
def _server(base_url: str) -> tuple[tuple[str, Any], ...]:
    """server.address and server.port of an upstream's base URL."""
    address = urlsplit(base_url)
    if not address.hostname:
        return ()
    items: tuple[tuple[str, Any], ...] = (("server.address", address.hostname),)
    return items + ((("server.port", address.port),) if address.port else ())


def _ns(call: CallLog, attempt: AttemptLog | None = None) -> tuple[int, int]:
    """A span's start and end, in ns since the epoch."""
    if attempt is None:
        start, ms = call.created_at.timestamp(), call.latency_ms
    else:
        start, ms = attempt.started_at.timestamp(), attempt.duration_ms
    begin = int(start * 1e9)
    return begin, begin + max(0, int(ms * 1e6))


def spans_of(call: CallLog) -> list[bytes]:
    """The call's span and its attempts', encoded; a deployment passed by (breaker, limit,
    drain) is an event of the call's span, not a span."""
    trace = call.trace
    operation = operation_of(call.endpoint)
    spans: list[bytes] = []
    events: list[bytes] = []
    for attempt in call.attempts:
        if attempt.skipped:
            skipped = (
                ("sluice.deployment", attempt.deployment),
                ("sluice.skip_reason", attempt.skipped),
            )
            events.append(
                otlp_wire.event(_ns(call, attempt)[0], "sluice.deployment_skipped", skipped)
            )
            continue
        sent = trace.sent.get(attempt.number)
        if sent is None:
            continue
        span_id, deployment = sent
        shared = _block(
            ("attempt", *_attempt_key(call, attempt, deployment)),
            attempt_shared,
            call,
            attempt,
            deployment,
        )
        own = attempt_own(call, attempt, deployment)
        begin, end = _ns(call, attempt)
        spans.append(
            otlp_wire.span(
                trace_id=trace.trace_id,
                span_id=span_id,
                parent_id=trace.span_id,
                remote_parent=False,
                tracestate=trace.tracestate,
                name=f"{operation} {deployment.model}",
                kind=otlp_wire.CLIENT,
                start_ns=begin,
                end_ns=end,
                attributes=shared + otlp_wire.attributes(own),
                error=attempt.ended_by,
            )
        )
    shared = _block(("call", *_call_key(call)), call_shared, call)
    own = call_own(call)
    begin, end = _ns(call)
    spans.append(
        otlp_wire.span(
            trace_id=trace.trace_id,
            span_id=trace.span_id,
            parent_id=trace.parent_id,
            remote_parent=True,
            tracestate=trace.tracestate,
            name=f"{operation} {call.requested_model[:200]}".strip(),
            kind=otlp_wire.SERVER,
            start_ns=begin,
            end_ns=end,
            attributes=shared + otlp_wire.attributes(own),
            events=b"".join(events),
            error="" if call.outcome == Outcome.SUCCESS else call.outcome,
        )
    )
    return spans
