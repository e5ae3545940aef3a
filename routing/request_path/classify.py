"""One place decides what an upstream answer means (docs/routing.md, "Routes and error classes")."""

import re
from email.utils import parsedate_to_datetime
from enum import StrEnum
from time import time
from typing import Protocol


class ErrorClass(StrEnum):
    CAPACITY = "capacity"
    RATE_LIMIT = "rate_limit"
    CONTEXT_LENGTH = "context_length"
    AUTH_CONFIG = "auth_config"
    BAD_REQUEST = "bad_request"
    SERVER_ERROR = "server_error"
    CONNECT_TIMEOUT = "connect_timeout"
    READ_TIMEOUT = "read_timeout"
    CONNECTION = "connection"
    MALFORMED = "malformed"


_CAPACITY = re.compile(rb"at capacity|overloaded|over capacity|capacity exceeded", re.I)
_ERROR_BODY = re.compile(rb'\s*\{\s*"error"\s*:')
_CONTEXT = re.compile(
    rb"maximum context length|context[_ ]length[_ ]exceeded|context window|too many tokens"
    rb"|prompt is too long|reduce the length",
    re.I,
)


def classify_status(status: int, body: bytes) -> ErrorClass | None:
    """The class of a complete upstream answer; None when it is a success."""
    if status < 400:
        # Some upstreams answer 200 with an error object; a completion that merely talks
        # about being "overloaded" is still a completion.
        if _ERROR_BODY.match(body) and _CAPACITY.search(body[:4096]):
            return ErrorClass.CAPACITY
        return None
    if _CAPACITY.search(body[:4096]):
        return ErrorClass.CAPACITY
    if status in (503, 529):  # 529: Anthropic's "overloaded_error"
        return ErrorClass.CAPACITY
    if status == 429:
        return ErrorClass.RATE_LIMIT
    if status in (401, 403, 404):
        return ErrorClass.AUTH_CONFIG
    if status in (400, 413) and _CONTEXT.search(body[:4096]):
        return ErrorClass.CONTEXT_LENGTH
    if status < 500:
        return ErrorClass.BAD_REQUEST
    return ErrorClass.SERVER_ERROR


def mentions_capacity(text: str) -> bool:
    """An error message saying the model is full (e.g. an error event inside a stream)."""
    return _CAPACITY.search(text.replace("_", " ").encode()) is not None


# What each class allows the proxy to do next.
MOVE_ON = frozenset(
    {
        ErrorClass.CAPACITY,
        ErrorClass.RATE_LIMIT,
        ErrorClass.AUTH_CONFIG,
        ErrorClass.SERVER_ERROR,
        ErrorClass.CONNECT_TIMEOUT,
        ErrorClass.READ_TIMEOUT,
        ErrorClass.CONNECTION,
        ErrorClass.MALFORMED,
    }
)
CAPACITY_LIKE = frozenset({ErrorClass.CAPACITY, ErrorClass.RATE_LIMIT})


class HeaderLookup(Protocol):
    """Anything with a case-insensitive `.get(name)` (aiohttp's response headers are)."""

    def get(self, name: str) -> str | None: ...


def retry_after_seconds(headers: HeaderLookup, *, now: float | None = None) -> float | None:
    """`retry-after-ms`, then `Retry-After` in seconds or as an HTTP date."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (now if now is not None else time()))
