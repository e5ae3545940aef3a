"""The request path, top to bottom.

key → member, application, priority → request body → route → for each deployment in the
chain: upstream call → classify → answer or next → tokens and cost → audit record.
Each step lives in its own module; this one only puts them in order.
"""

import asyncio
import json
import logging
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from accounts.authentication import Principal, authenticate, presented_key
from quotas.priority import priority_for
from routing.audit import AttemptLog, CallLog, audit_writer, new_request_id
from routing.catalog import DeploymentSpec, RouteSpec, catalog
from routing.classify import (
    CAPACITY_LIKE,
    MOVE_ON,
    ErrorClass,
    classify_status,
    retry_after_seconds,
)
from routing.errors import GatewayError, capacity_exhausted, error_body
from routing.models import Outcome
from routing.payloads import ClientRequest, Endpoint, parse_request, upstream_body
from routing.relay import OpenStream, StreamRelay, settle_usage
from routing.upstream import UpstreamError, open_response, transport_error_class

log = logging.getLogger("sluice.proxy")


@dataclass
class Answer:
    """A complete upstream answer to hand back as it is."""

    deployment: DeploymentSpec
    status: int
    body: bytes
    payload: dict[str, Any] | None  # parsed body of a success


async def handle(request: HttpRequest, endpoint: Endpoint) -> HttpResponseBase:
    call = CallLog(
        request_id=new_request_id(),
        endpoint=endpoint.value,
        client_ip=request.META.get("REMOTE_ADDR"),
    )
    try:
        principal = await authenticate(presented_key(request.headers))
        _identify(call, principal)
        client_request = parse_request(endpoint, request.body)
        call.requested_model, call.stream = client_request.model, client_request.stream
        route = await _route_for(principal, client_request.model)
        call.priority = priority_for(
            application_default=principal.default_priority,
            requested=request.headers.get("x-sluice-priority"),
        )
        result = await _walk_chain(call, route, client_request)
    except GatewayError as error:
        call.finish(outcome=error.outcome, status=error.status, error_message=error.message)
        audit_writer.record(call)
        return _stamp(error.response(), call)
    except asyncio.CancelledError:
        # The client went away while Sluice waited on an upstream.
        call.finish(outcome=Outcome.CLIENT_CANCELLED, status=499)
        audit_writer.record(call)
        raise
    except Exception as exc:
        # A bug, not an answer: the call is still recorded, the client gets the shape.
        log.exception("%s: internal error", call.request_id)
        error = GatewayError(
            500,
            "Sluice hit an internal error.",
            type="server_error",
            code="internal_error",
            outcome=Outcome.INTERNAL_ERROR,
        )
        call.finish(outcome=error.outcome, status=500, error_message=type(exc).__name__)
        audit_writer.record(call)
        return _stamp(error.response(), call)

    call.served_deployment = result.deployment.name
    if isinstance(result, OpenStream):
        response = StreamingHttpResponse(
            StreamRelay(call, result, client_request), content_type="text/event-stream"
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return _stamp(response, call)

    if result.payload is not None:
        settle_usage(call, result.deployment, result.payload.get("usage"))
        call.upstream_model = str(result.payload.get("model") or "")
        call.finish(outcome=Outcome.SUCCESS, status=200)
    else:
        call.finish(
            outcome=Outcome.UPSTREAM_CLIENT_ERROR,
            status=result.status,
            error_message=_error_message(result.body),
        )
    audit_writer.record(call)
    return _stamp(
        HttpResponse(result.body, status=result.status, content_type="application/json"), call
    )


def _identify(call: CallLog, principal: Principal) -> None:
    call.member_id = principal.member_id
    call.member_email = principal.member_email
    call.application_id = principal.application_id
    call.application_slug = principal.application_slug
    call.key_prefix = principal.prefix


async def _route_for(principal: Principal, model: str) -> RouteSpec:
    route = (await catalog.routes()).get(model)
    if route is None:
        raise GatewayError(
            404,
            f"The model `{model}` does not exist.",
            code="model_not_found",
            param="model",
        )
    if model not in principal.allowed_routes:
        raise GatewayError(
            403,
            f"Application {principal.application_slug} may not use the model `{model}`.",
            type="permission_error",
            code="model_not_allowed",
            param="model",
            outcome=Outcome.FORBIDDEN,
        )
    return route


async def _walk_chain(
    call: CallLog, route: RouteSpec, request: ClientRequest
) -> Answer | OpenStream:
    """Try each deployment in order until one answers. Capacity, rate limits, server and
    transport errors move on; a request the upstream calls bad goes back to the client;
    a prompt too long for one deployment goes only to deployments with a larger window."""
    failures: list[ErrorClass] = []
    retry_hints: list[float] = []
    context_refusal: Answer | None = None
    for deployment in route.chain:
        if (
            context_refusal
            and deployment.context_window <= context_refusal.deployment.context_window
        ):
            continue
        attempt = AttemptLog(
            number=len(call.attempts) + 1,
            deployment=deployment.name,
            started_at=datetime.now(UTC),
        )
        call.attempts.append(attempt)
        started = time.perf_counter()
        body = upstream_body(request, deployment.model)
        try:
            response = await open_response(deployment, request.endpoint.value, body)
        except UpstreamError as exc:
            attempt.error_class = transport_error_class(exc).value
            attempt.duration_ms = (time.perf_counter() - started) * 1000
            failures.append(ErrorClass(attempt.error_class))
            log.warning("%s: %s from %s", call.request_id, attempt.error_class, deployment.name)
            continue
        attempt.status_code = response.status
        if response.status == 200 and request.stream:
            return OpenStream(deployment, response, attempt, started)
        try:
            content = await response.read()
        except UpstreamError as exc:
            error_class: ErrorClass | None = transport_error_class(exc)
            content = b""
        else:
            error_class = classify_status(response.status, content)
        finally:
            response.release()
        attempt.duration_ms = (time.perf_counter() - started) * 1000

        payload = None
        if error_class is None:
            payload = _json_object(content)
            if payload is None:
                error_class = ErrorClass.MALFORMED
        if error_class is None:
            call.ttfb_ms = call.elapsed_ms()
            return Answer(deployment, 200, content, payload)

        attempt.error_class = error_class.value
        failures.append(error_class)
        if error_class is ErrorClass.CONTEXT_LENGTH:
            context_refusal = Answer(deployment, response.status, content, None)
        elif error_class not in MOVE_ON:
            return Answer(deployment, response.status, _openai_error(content), None)
        elif error_class in CAPACITY_LIKE:
            hint = retry_after_seconds(response.headers)
            if hint is not None:
                retry_hints.append(hint)
        elif error_class is ErrorClass.AUTH_CONFIG:
            log.error(
                "deployment %s looks misconfigured: upstream %s answered %d",
                deployment.name,
                deployment.upstream.name,
                response.status,
            )
    if context_refusal is not None:
        return Answer(
            context_refusal.deployment,
            context_refusal.status,
            _openai_error(context_refusal.body),
            None,
        )
    raise _exhausted(route, failures, retry_hints)


def _exhausted(route: RouteSpec, failures: list[ErrorClass], hints: list[float]) -> GatewayError:
    if not failures:
        return GatewayError(
            503,
            f"The model `{route.name}` has no enabled deployment.",
            type="server_error",
            code="no_deployment",
            outcome=Outcome.UPSTREAM_ERROR,
            headers={"Retry-After": str(settings.SLUICE_CAPACITY_RETRY_AFTER)},
        )
    if any(f in CAPACITY_LIKE for f in failures):
        wait = min(hints) if hints else settings.SLUICE_CAPACITY_RETRY_AFTER
        return capacity_exhausted(max(1, math.ceil(wait)))
    if all(f in (ErrorClass.CONNECT_TIMEOUT, ErrorClass.READ_TIMEOUT) for f in failures):
        return GatewayError(
            504,
            f"Every deployment for `{route.name}` timed out.",
            type="server_error",
            code="upstream_timeout",
            outcome=Outcome.UPSTREAM_TIMEOUT,
        )
    return GatewayError(
        502,
        f"Every deployment for `{route.name}` failed ({', '.join(f.value for f in failures)}).",
        type="server_error",
        code="upstream_error",
        outcome=Outcome.UPSTREAM_ERROR,
    )


def _json_object(content: bytes) -> dict[str, Any] | None:
    try:
        payload = json.loads(content)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def _openai_error(content: bytes) -> bytes:
    """An upstream's refusal, passed on in OpenAI's shape even if the upstream's is not."""
    payload = _json_object(content)
    if payload is not None and isinstance(payload.get("error"), dict):
        return content
    text = content.decode("utf-8", "replace")[:500] or "The upstream refused the request."
    return error_body(text, type="invalid_request_error", code="upstream_rejected")


def _error_message(content: bytes) -> str:
    payload = _json_object(content)
    error = payload.get("error") if payload else None
    return str(error.get("message", ""))[:500] if isinstance(error, dict) else ""


def _stamp(response: HttpResponseBase, call: CallLog) -> HttpResponseBase:
    response["X-Sluice-Request-Id"] = call.request_id
    response["X-Sluice-Served-Model"] = call.served_deployment
    response["X-Sluice-Attempts"] = str(len(call.attempts))
    return response
