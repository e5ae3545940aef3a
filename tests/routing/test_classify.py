"""What an upstream answer means (docs/routing.md), and Retry-After parsing."""

import json
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from routing.request_path.classify import (
    CAPACITY_LIKE,
    MOVE_ON,
    ErrorClass,
    classify_status,
    retry_after_seconds,
)

CAPACITY_MESSAGE = "Selected model is at capacity. Please try a different model."


def _error(message: str, type_: str = "invalid_request_error", code: Any = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "code": code}}).encode()


def _completion(text: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "big",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
        }
    ).encode()


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        # capacity
        (503, b"", ErrorClass.CAPACITY),
        (503, b"Service Unavailable", ErrorClass.CAPACITY),
        (503, _error("upstream down", "server_error"), ErrorClass.CAPACITY),
        (503, _error(CAPACITY_MESSAGE, "server_error"), ErrorClass.CAPACITY),
        (200, _error(CAPACITY_MESSAGE, "server_error"), ErrorClass.CAPACITY),
        (500, _error(CAPACITY_MESSAGE, "server_error"), ErrorClass.CAPACITY),
        (429, _error(CAPACITY_MESSAGE, "server_error"), ErrorClass.CAPACITY),
        (529, _error("Overloaded", "overloaded_error"), ErrorClass.CAPACITY),
        (500, _error("The engine is currently overloaded", "server_error"), ErrorClass.CAPACITY),
        # upstream rate limit
        (429, b"", ErrorClass.RATE_LIMIT),
        (429, _error("Rate limit reached for requests", "requests"), ErrorClass.RATE_LIMIT),
        # auth / config
        (
            401,
            _error("Incorrect API key provided", "invalid_request_error"),
            ErrorClass.AUTH_CONFIG,
        ),
        (403, b"Forbidden", ErrorClass.AUTH_CONFIG),
        (404, _error("The model `nope` does not exist"), ErrorClass.AUTH_CONFIG),
        (404, b"", ErrorClass.AUTH_CONFIG),
        # context too long
        (
            400,
            _error(
                "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in 9000 tokens. Please reduce the length of the messages.",
                code="context_length_exceeded",
            ),
            ErrorClass.CONTEXT_LENGTH,
        ),
        (
            400,
            _error("This model's maximum context length is 8192 tokens"),
            ErrorClass.CONTEXT_LENGTH,
        ),
        (400, _error("bad", code="context_length_exceeded"), ErrorClass.CONTEXT_LENGTH),
        (
            400,
            _error("prompt is too long: 210000 tokens > 200000 maximum"),
            ErrorClass.CONTEXT_LENGTH,
        ),
        (400, _error("Input exceeds the context window of this model"), ErrorClass.CONTEXT_LENGTH),
        (413, _error("too many tokens in request"), ErrorClass.CONTEXT_LENGTH),
        # other client errors
        (400, _error("'messages' must be an array", code="invalid_type"), ErrorClass.BAD_REQUEST),
        (400, b"", ErrorClass.BAD_REQUEST),
        (422, _error("Unprocessable entity"), ErrorClass.BAD_REQUEST),
        (409, b"conflict", ErrorClass.BAD_REQUEST),
        (413, b"payload too large", ErrorClass.BAD_REQUEST),
        # server errors
        (500, b"", ErrorClass.SERVER_ERROR),
        (
            500,
            _error("The server had an error while processing your request", "server_error"),
            ErrorClass.SERVER_ERROR,
        ),
        (502, b"<html>Bad Gateway</html>", ErrorClass.SERVER_ERROR),
        (504, b"Gateway Timeout", ErrorClass.SERVER_ERROR),
        # success
        (200, _completion("Hello! How can I help?"), None),
        (200, b"{}", None),
        (201, b'{"ok": true}', None),
    ],
)
def test_classify_status(status: int, body: bytes, expected: ErrorClass | None) -> None:
    assert classify_status(status, body) == expected


@pytest.mark.parametrize(
    "text",
    [
        "The servers were overloaded during the launch, so we queued the jobs.",
        "The stadium was at capacity by noon.",
    ],
)
def test_successful_completion_mentioning_overload_is_not_capacity(text: str) -> None:
    assert classify_status(200, _completion(text)) is None


def test_error_classes_that_move_on_to_the_next_deployment() -> None:
    assert ErrorClass.BAD_REQUEST not in MOVE_ON
    assert ErrorClass.CONTEXT_LENGTH not in MOVE_ON
    assert {ErrorClass.CAPACITY, ErrorClass.RATE_LIMIT, ErrorClass.SERVER_ERROR} <= MOVE_ON
    assert ErrorClass.AUTH_CONFIG in MOVE_ON
    assert frozenset({ErrorClass.CAPACITY, ErrorClass.RATE_LIMIT}) == CAPACITY_LIKE


# --- retry_after_seconds ---------------------------------------------------------------

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


def _http_date(seconds_from_now: int) -> str:
    return format_datetime(
        datetime.fromtimestamp(NOW.timestamp() + seconds_from_now, tz=UTC), usegmt=True
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "5"}, 5.0),
        ({"retry-after": "0"}, 0.0),
        ({"RETRY-AFTER": "120"}, 120.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"Retry-After": " 2 "}, 2.0),
        ({"Retry-After": "-3"}, 0.0),
        ({"retry-after-ms": "250"}, 0.25),
        ({"Retry-After-Ms": "1500"}, 1.5),
        ({"retry-after-ms": "-100"}, 0.0),
        # milliseconds win over seconds
        ({"retry-after-ms": "200", "retry-after": "10"}, 0.2),
        # bad milliseconds fall back to seconds
        ({"retry-after-ms": "soon", "retry-after": "3"}, 3.0),
        ({"Retry-After": _http_date(30)}, 30.0),
        ({"Retry-After": _http_date(-30)}, 0.0),  # a date in the past: go now
        ({"Retry-After": "Sun, 01 Jun 2025 12:00:00 GMT"}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "5 seconds"}, None),
        ({"Retry-After": ""}, None),
        ({"retry-after-ms": "soon"}, None),
        ({}, None),
        ({"Content-Type": "application/json"}, None),
    ],
)
def test_retry_after_seconds(headers: dict[str, str], expected: float | None) -> None:
    result = retry_after_seconds(httpx.Headers(headers), now=NOW.timestamp())
    if expected is None:
        assert result is None
    else:
        assert result == pytest.approx(expected)


def test_retry_after_http_date_is_relative_to_now() -> None:
    headers = httpx.Headers({"Retry-After": "Sun, 01 Jun 2025 12:01:00 GMT"})
    assert retry_after_seconds(headers, now=NOW.timestamp()) == pytest.approx(60.0)
    assert retry_after_seconds(headers, now=NOW.timestamp() + 45) == pytest.approx(15.0)
