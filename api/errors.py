"""One error shape for the whole management API, the one /v1/ uses too:
`{"error": {"message", "type", "code", "param"}}`, plus `fields` (every field's messages)
on a 400 about several fields. Domain errors from the services (a clear message naming
what is wrong) answer 400; nothing answers a 500 page or a stack trace."""

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DatabaseError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from accounts.services import AccountError
from core.errors import DATABASE_RETRY_AFTER
from quotas.services import LimitError
from routing.catalog.config_file import ConfigError

log = logging.getLogger(__name__)

DOMAIN_ERRORS: tuple[type[Exception], ...] = (AccountError, LimitError, ConfigError)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    406: "invalid_request_error",
    409: "conflict_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}


def register_domain_error(cls: type[Exception]) -> None:
    """Services of other apps add their error class here (answered 400)."""
    global DOMAIN_ERRORS
    if cls not in DOMAIN_ERRORS:
        DOMAIN_ERRORS = (*DOMAIN_ERRORS, cls)


def error_body(
    status_code: int, message: str, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": _TYPES.get(status_code, "server_error"),
            "code": code,
            "param": param,
        }
    }


def _flatten(detail: Any, path: str = "") -> list[tuple[str, str]]:
    """(field path, message) pairs from DRF's nested error detail."""
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            name = "" if key in ("non_field_errors", "detail") else str(key)
            out += _flatten(value, f"{path}.{name}" if path and name else path or name)
        return out
    if isinstance(detail, list):
        out = []
        for i, value in enumerate(detail):
            sub = path if not isinstance(value, (dict, list)) else f"{path}[{i}]"
            out += _flatten(value, sub)
        return out
    return [(path, str(detail))]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    if isinstance(exc, DOMAIN_ERRORS):
        exc = exceptions.ValidationError(str(exc))
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    if isinstance(exc, DatabaseError):  # an outage, not the caller's fault: say when to retry
        log.warning("management API: the database failed: %s", type(exc).__name__)
        _render_as_json(context)
        return Response(
            error_body(
                503,
                "Sluice cannot reach its database right now. Retry after the time in Retry-After.",
                code="database_unavailable",
            ),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER)},
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        log.exception("management API: unexpected error", exc_info=exc)
        _render_as_json(context)
        return Response(
            error_body(500, "Internal error; it has been logged.", code="internal_error"),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    assert isinstance(exc, exceptions.APIException)
    pairs = _flatten(exc.detail)
    param = next((p for p, _ in pairs if p), None)
    message = "; ".join(f"{p}: {m}" if p else m for p, m in pairs) or "Error."
    codes = exc.get_codes()
    code = codes if isinstance(codes, str) else None
    if isinstance(exc, exceptions.ValidationError):
        code = "invalid"
    body = error_body(response.status_code, message, code=code, param=param)
    if isinstance(exc, exceptions.ValidationError) and isinstance(exc.detail, dict):
        body["error"]["fields"] = {p or "non_field_errors": m for p, m in pairs}
    response.data = body
    _render_as_json(context)
    return response


def _render_as_json(context: dict[str, Any]) -> None:
    """Errors are JSON whatever format the success would have been (TOML, CSV)."""
    request = context.get("request")
    if request is not None:
        request.accepted_renderer = JSONRenderer()
        request.accepted_media_type = "application/json"


# --- the schema: every operation documents the errors it may answer ----------------------

ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "code": {"type": "string", "nullable": True},
                "param": {"type": "string", "nullable": True},
                "fields": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "Every invalid field with its message (400 only).",
                },
            },
            "required": ["message", "type", "code", "param"],
        }
    },
    "required": ["error"],
}
_DOCUMENTED = {
    "400": "Bad input: wrong type, unknown field, too long, unknown object named in the body.",
    "401": "No management token or console session, or an invalid, revoked or expired one.",
    "403": "The caller's role may not do this.",
    "404": "No such object in the caller's scope.",
    "405": "Method not allowed.",
    "406": "Not acceptable (asked for a format this endpoint does not give).",
    "415": "Unsupported media type (send JSON).",
    "429": "Too many requests to the management API; see Retry-After.",
}


def document_errors(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for methods in result.get("paths", {}).values():
        for operation in methods.values():
            responses = operation.setdefault("responses", {})
            for status_code, description in _DOCUMENTED.items():
                responses.setdefault(status_code, {"description": description, "content": ref})
    return result
