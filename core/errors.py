"""Errors Sluice answers itself, in OpenAI's shape: {"error": {message, type, code, param}}."""

import json
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpResponse

from core import fast_json
from core.outcomes import Outcome


@dataclass
class GatewayError(Exception):
    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    outcome: str = Outcome.INVALID_REQUEST
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message

    def body(self) -> bytes:
        return error_body(self.message, type=self.type, code=self.code, param=self.param)

    def response(self) -> HttpResponse:
        response = HttpResponse(self.body(), status=self.status, content_type="application/json")
        for name, value in self.headers.items():
            response[name] = value
        return response


def error_body(message: str, *, type: str, code: str | None, param: str | None = None) -> bytes:
    payload = {"error": {"message": message, "type": type, "code": code, "param": param}}
    return json.dumps(payload).encode()


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, code=code, param=param)


def unauthorized(message: str) -> GatewayError:
    return GatewayError(
        401,
        message,
        type="authentication_error",
        code="invalid_api_key",
        outcome=Outcome.UNAUTHORIZED,
    )


def capacity_exhausted(
    retry_after: int, model: str | None = None, *, rate_limited: bool = False
) -> GatewayError:
    what = "rate-limited by its upstream" if rate_limited else "at capacity"
    subject = f"`{model}`" if model else "this model"
    return GatewayError(
        503,
        f"Every deployment for {subject} is {what}. Retry after the time in Retry-After.",
        type="server_error",
        code="capacity_exhausted",
        outcome=Outcome.CAPACITY_EXHAUSTED,
        headers={"Retry-After": str(retry_after)},
    )


DATABASE_RETRY_AFTER = 5  # seconds


def database_unavailable() -> GatewayError:
    """The database did not answer in time for something the call needs (a key no worker
    has cached, say): Sluice's outage, not the client's fault, and short-lived."""
    return GatewayError(
        503,
        "Sluice cannot reach its database right now. Retry after the time in Retry-After.",
        type="server_error",
        code="database_unavailable",
        outcome=Outcome.DATABASE_UNAVAILABLE,
        headers={"Retry-After": str(DATABASE_RETRY_AFTER)},
    )


def json_object(content: bytes) -> dict[str, Any] | None:
    try:
        payload = fast_json.loads(content)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def openai_error(content: bytes) -> bytes:
    """An upstream's refusal, passed on in OpenAI's shape even if the upstream's is not."""
    payload = json_object(content)
    if payload is not None and isinstance(payload.get("error"), dict):
        return content
    text = content.decode("utf-8", "replace")[:500] or "The upstream refused the request."
    return error_body(text, type="invalid_request_error", code="upstream_rejected")


def error_message(content: bytes) -> str:
    """The message of an OpenAI-shaped error body, for the audit trail."""
    payload = json_object(content)
    error = payload.get("error") if payload else None
    return str(error.get("message", ""))[:500] if isinstance(error, dict) else ""
