"""The request path, top to bottom.

key → member, application, priority → request body → route → the shape it travels in →
fallback policy and deadline → limits → the chain walk (routing/request_path/chain.py: for each
deployment, a slot now or a place in its queue → upstream call → classify → answer, retry or
next) → tokens and cost → audit record → response.
Each step lives in its own module; this one only puts them in order. A client speaking
Messages or Responses is read only for its model, stream flag and token ceiling; its body
goes as it came to deployments of its own kind and their answers come back untouched
(routing/request_path/protocols/native.py). Only a chain that crosses kinds gets the body translated
to a chat request (routing/request_path/translation.py) and the answer (or error) translated back at
the end.
"""

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

from accounts.authentication import Principal, authenticate, presented_key
from core.errors import GatewayError, database_unavailable, error_message
from core.outcomes import Outcome
from quotas.priority import priority_for
from quotas.reservation import count_refused_request
from routing.catalog.specs import RouteSpec, catalog
from routing.deployment_state import listen_for_changes
from routing.deployment_state.slot_policy import claim_for
from routing.observability.audit import UNKNOWN_ROUTE, CallLog, new_request_id
from routing.observability.tracing import finish_reasons, incoming
from routing.request_path.cache_replay import replay
from routing.request_path.call_size import enforce_ceilings, reserve_call_quota
from routing.request_path.chain import Answer, ChainWalk
from routing.request_path.finish import complete
from routing.request_path.payloads import ClientRequest, Endpoint, sniff_model
from routing.request_path.policy import deadline_for, fallback_for
from routing.request_path.protocols import OPENAI, ClientProtocol, TranslatedStream
from routing.request_path.relay import EventStream, OpenStream, StreamRelay, settle_usage
from routing.request_path.response_cache import HIT, CacheStep, cache_lookup, cache_store
from routing.request_path.translation import shape_for
from routing.request_path.upstream import account_headers, passed_back

log = logging.getLogger("sluice.proxy")


@dataclass(frozen=True)
class Inbound:
    """What the request path reads of a request: its headers (looked up by lower-case name,
    as Django's `request.headers` or a dict with lower-case keys allows) and its raw body.
    A view builds it from the HTTP request (`handle`); the batch runner from a batch line."""

    headers: Mapping[str, str]
    body: bytes


async def handle(
    request: HttpRequest, endpoint: Endpoint, protocol: ClientProtocol = OPENAI
) -> HttpResponseBase:
    """The views' way in: the HTTP request as an `Inbound`, a new call, `serve`."""
    call = CallLog(
        request_id=new_request_id(),
        endpoint=protocol.endpoint or endpoint.value,
        client_ip=request.META.get("REMOTE_ADDR"),
    )
    return await serve(call, Inbound(request.headers, request.body), endpoint, protocol=protocol)


async def serve(
    call: CallLog,
    inbound: Inbound,
    endpoint: Endpoint,
    principal: Principal | None = None,
    *,
    protocol: ClientProtocol = OPENAI,
    preemptible: bool = False,
) -> HttpResponseBase:
    """The request path: admission, the chain walk (or the cache's answer), the answer. A
    caller without a network request (the batch runner) passes the key's `principal` it
    already checked; a `preemptible` call of class batch (not streamed) gives its slot back
    to a waiting interactive call and ends as 503 `preempted` (the runner runs the line
    again)."""
    listen_for_changes()
    call.client_protocol = protocol.name
    call.user_agent = inbound.headers.get("user-agent", "")
    call.trace = incoming(inbound.headers)  # None unless traces are exported
    try:
        admitted = await _admit(call, inbound, endpoint, principal, protocol, preemptible)
        result = admitted.cache.answer or await admitted.walk.run()  # a hit: no slot, no upstream
    except asyncio.CancelledError:
        # The client went away while Sluice waited on an upstream.
        call.finish(outcome=Outcome.CLIENT_CANCELLED, status=499)
        complete(call)
        raise
    except Exception as exc:
        return _ended_without_answer(call, exc, protocol, inbound.body)
    return await _answer(call, admitted, result, protocol)


@dataclass(frozen=True)
class _Admitted:
    """A call let in: its request, route and cache step, and the walk that will serve it."""

    request: ClientRequest
    route: RouteSpec
    cache: CacheStep
    walk: ChainWalk


async def _admit(
    call: CallLog,
    inbound: Inbound,
    endpoint: Endpoint,
    principal: Principal | None,
    protocol: ClientProtocol,
    preemptible: bool,
) -> _Admitted:
    """Key, body, route, fallback policy and deadline, limits and the cache: a refusal on
    the way is a GatewayError."""
    headers = inbound.headers
    if principal is None:
        principal = await authenticate(presented_key(headers))
    _identify(call, principal)
    client_request = await _parse(protocol, endpoint, inbound.body)
    client_request.account_headers = account_headers(headers)
    call.requested_model, call.stream = client_request.model, client_request.stream
    call.priority = priority_for(
        application_default=principal.default_priority,
        requested=headers.get("x-sluice-priority"),
    )
    route = await _route_for(call, principal, client_request.model)
    route = shape_for(route, protocol, client_request)  # native, or chat when crossing
    call.degraded = client_request.degraded
    fallback = fallback_for(
        application_default=principal.fallback,
        requested=headers.get("x-sluice-fallback"),
    )
    deadline = deadline_for(route.policy, headers.get("x-sluice-max-wait"))
    enforce_ceilings(principal, client_request)
    call.quota = await reserve_call_quota(
        principal,
        client_request,
        route,
        len(inbound.body),
        call.request_id,
        priority=call.priority,
    )
    cache = await cache_lookup(
        ttl=principal.cache_ttl_seconds,
        application_id=principal.application_id,
        route=route,
        request=client_request,
        cache_control=headers.get("cache-control"),
    )
    call.cache = cache.status
    claim = claim_for(
        priority=call.priority,
        member=str(principal.member_id),
        raw_size=len(inbound.body),
        preemptible=preemptible and not client_request.stream,
    )
    walk = ChainWalk(call, route, client_request, fallback, deadline, claim)
    return _Admitted(client_request, route, cache, walk)


def _ended_without_answer(
    call: CallLog, exc: Exception, protocol: ClientProtocol, raw: bytes
) -> HttpResponseBase:
    """A call that ended before the walk gave an answer: recorded, audited and answered as
    an error in the client's shape."""
    if isinstance(exc, GatewayError):  # refused: a key, a limit, a body, a full chain
        error, message = exc, exc.message
    elif isinstance(exc, DatabaseError):
        # The database is away and the call needs it (a route or limits no worker cached).
        log.warning("%s: database unavailable", call.request_id)
        error = database_unavailable()
        message = error.code or ""
    else:
        # A bug, not an answer: the call is still recorded, the client gets the shape.
        log.exception("%s: internal error", call.request_id)
        error = GatewayError(
            500,
            "Sluice hit an internal error.",
            type="server_error",
            code="internal_error",
            outcome=Outcome.INTERNAL_ERROR,
        )
        message = type(exc).__name__
    call.finish(outcome=error.outcome, status=error.status, error_message=message)
    if error is exc:
        _refused(call, raw)
    complete(call)
    return _stamp(_error_response(error, protocol), call)


async def _answer(
    call: CallLog, admitted: _Admitted, result: Answer | OpenStream, protocol: ClientProtocol
) -> HttpResponseBase:
    """The walk's (or the cache's) answer to the client: a stream relayed, a stored answer
    replayed, or a whole answer with its tokens settled and stored for the cache."""
    client_request, route, cache = admitted.request, admitted.route, admitted.cache
    call.served_deployment = result.deployment.name
    call.upstream_protocol = result.deployment.upstream.kind
    first = route.chain[0].name if route.chain else None
    call.fell_back = call.cache != HIT and first is not None and result.deployment.name != first
    native = client_request.passes_through(call.upstream_protocol)
    if isinstance(result, OpenStream):
        relay = StreamRelay(call, result, client_request)
        translator = None if native else protocol.stream(client_request)
        response = EventStream(relay if translator is None else TranslatedStream(relay, translator))
        response["X-Accel-Buffering"] = "no"
        return _stamp(response, call, passed_back(result.response.headers))
    if call.cache == HIT and client_request.stream:  # a stored answer, replayed as a stream
        call.upstream_model = str((result.payload or {}).get("model") or "")
        call.finish(outcome=Outcome.SUCCESS, status=200)
        complete(call)
        replayed = replay(result.payload or {}, client_request, protocol.stream(client_request))
        return _stamp(EventStream(replayed), call)

    content = result.body
    if result.payload is not None:
        if call.cache != HIT:  # an answer from the cache used no tokens
            settle_usage(call, result.deployment, result.payload.get("usage"))
        await cache_store(cache, result)
        call.upstream_model = str(result.payload.get("model") or "")
        if call.trace is not None:
            call.trace.finish_reasons = finish_reasons(result.payload)
        call.finish(outcome=Outcome.SUCCESS, status=200)
        if protocol.translates and not native:
            content = protocol.answer(result.payload, client_request)
    else:
        call.finish(
            outcome=Outcome.UPSTREAM_CLIENT_ERROR,
            status=result.status,
            error_message=error_message(result.body),
        )
        content = result.body if native else protocol.error(result.status, result.body)
    complete(call)
    return _stamp(
        HttpResponse(content, status=result.status, content_type="application/json"),
        call,
        result.headers,
    )


def _refused(call: CallLog, raw: bytes) -> None:
    """A call refused before the chain walk: one log line, and what it asked for on its
    audit row also when its body could not be read as a whole."""
    if not call.requested_model and raw:
        call.requested_model, call.stream = sniff_model(raw)
    log.info(
        "%s: refused %s (%s %s, model %r): %s",
        call.request_id,
        call.status_code,
        call.client_protocol,
        call.user_agent[:80] or "no user agent",
        call.requested_model[:80],
        call.error_message[:200],
    )


def _identify(call: CallLog, principal: Principal) -> None:
    call.member_id = principal.member_id
    call.member_email = principal.member_email
    call.application_id = principal.application_id
    call.application_slug = principal.application_slug
    call.key_prefix = principal.prefix
    call.team_id = principal.team_id


async def _route_for(call: CallLog, principal: Principal, model: str) -> RouteSpec:
    """The route the model names. Nothing is keyed on a name that is no route (the call's
    `route` is then UNKNOWN_ROUTE), and a refused call still costs the key a request."""
    route = (await catalog.routes()).get(model)
    call.route = route.name if route is not None else UNKNOWN_ROUTE
    if route is not None and model in principal.allowed_routes:
        return route
    headers = await count_refused_request(principal, priority=call.priority)  # 429 if over
    if route is None:
        raise GatewayError(
            404,
            f"The model `{model}` does not exist.",
            code="model_not_found",
            param="model",
            headers=headers,
        )
    raise GatewayError(
        403,
        f"Application {principal.application_slug} may not use the model `{model}`.",
        type="permission_error",
        code="model_not_allowed",
        param="model",
        outcome=Outcome.FORBIDDEN,
        headers=headers,
    )


# Bodies past this size are parsed on a thread: the event loop keeps serving other calls
# (json's parser in C holds the GIL, but the float and constant hooks let it switch).
_PARSE_INLINE_BYTES = 256 * 1024


async def _parse(protocol: ClientProtocol, endpoint: Endpoint, raw: bytes) -> ClientRequest:
    if len(raw) <= _PARSE_INLINE_BYTES:
        return protocol.parse(endpoint, raw)
    return await asyncio.to_thread(protocol.parse, endpoint, raw)


def _error_response(error: GatewayError, protocol: ClientProtocol) -> HttpResponse:
    response = error.response()
    if protocol.translates:
        response.content = protocol.error(error.status, response.content)
    return response


def _stamp(
    response: HttpResponseBase, call: CallLog, upstream: dict[str, str] | None = None
) -> HttpResponseBase:
    for name, value in (upstream or {}).items():
        response[name] = value
    response["X-Sluice-Request-Id"] = call.request_id
    response["X-Sluice-Served-Model"] = call.served_deployment
    response["X-Sluice-Attempts"] = str(call.attempt_count)
    response["X-Sluice-Queue-Ms"] = str(round(call.queue_ms or 0))
    if call.cache:
        response["X-Sluice-Cache"] = call.cache
    if call.quota is not None:
        for name, value in call.quota.headers.items():
            response[name] = value
    return response
