"""Checking a batch's input file before anything is sent (OpenAI's rules).

Every line must be a JSON object `{"custom_id", "method": "POST", "url", "body"}` with a
unique `custom_id`, the batch's endpoint as `url`, and a body the live endpoint would
accept (routing/request_path/payloads.py), not streamed, for a model the application may use. Errors
name their line (1-based), as OpenAI's `errors.data` does.

A line is read by the live endpoint's own reader (routing/request_path/payloads.py: too deep a
nesting, a number out of range, NaN are a 400 there and a line error here). Whatever a line does, it
fails its own batch and nothing else: a line the checks themselves trip on is reported as
`unreadable_line` with its number, and logged once per file.
"""

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from core.errors import GatewayError
from routing.request_path.payloads import Endpoint, load_body, parse_body

log = logging.getLogger("sluice.batches")

ENDPOINTS = {f"/v1/{e.value}": e for e in Endpoint}
MAX_ERRORS = 1000  # enough to fix a file by; the rest of a broken file adds nothing


@dataclass(frozen=True)
class LineSpec:
    number: int
    custom_id: str
    model: str
    offset: int
    length: int


@dataclass(frozen=True)
class LineError:
    line: int | None
    code: str
    message: str
    param: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


def read_lines(raw: Iterable[bytes]) -> Iterable[tuple[int, int, bytes]]:
    """(number, offset, bytes) of each non-blank line of a file read line by line."""
    offset = 0
    for number, line in enumerate(raw, start=1):
        if line.strip():
            yield number, offset, line
        offset += len(line)


def check_lines(
    lines: Iterable[tuple[int, int, bytes]],
    *,
    endpoint: str,
    routes: set[str],
    allowed: frozenset[str] | set[str],
    max_lines: int,
) -> tuple[list[LineSpec], list[LineError]]:
    specs: list[LineSpec] = []
    errors: list[LineError] = []
    seen: set[str] = set()
    tripped = 0
    for number, offset, raw in lines:
        if len(specs) + len(errors) >= max_lines:
            errors.append(
                LineError(None, "too_many_lines", f"A batch takes at most {max_lines} lines.")
            )
            break
        try:
            spec, error = _check_line(number, offset, raw, endpoint, routes, allowed, seen)
        except Exception as exc:  # a bug of ours the line found: it fails its batch only
            if not tripped:
                log.warning("batch line %s tripped the checks (%r)", number, type(exc).__name__)
            tripped += 1
            message = f"Line {number} could not be read as a request."
            spec, error = None, LineError(number, "unreadable_line", message)
        if error is not None:
            errors.append(error)
        elif spec is not None:
            specs.append(spec)
        if len(errors) >= MAX_ERRORS:
            break
    if not specs and not errors:
        errors.append(LineError(None, "empty_file", "The input file has no lines."))
    return specs, errors


def _check_line(
    number: int,
    offset: int,
    raw: bytes,
    endpoint: str,
    routes: set[str],
    allowed: frozenset[str] | set[str],
    seen: set[str],
) -> tuple[LineSpec | None, LineError | None]:
    def error(code: str, message: str, param: str | None = None) -> tuple[None, LineError]:
        return None, LineError(number, code, message, param)

    try:
        item = load_body(raw)  # the live reader: nesting, huge numbers, NaN are a 400 there
    except GatewayError as exc:
        return error("invalid_json_line", f"Line {number}: {_lower_first(exc.message)}")
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > 200:
        return error(
            "missing_custom_id",
            f"Line {number}: 'custom_id' must be a string of 1 to 200 characters.",
            "custom_id",
        )
    if custom_id in seen:
        return error(
            "duplicate_custom_id",
            f"Line {number}: the custom_id {custom_id!r} is used by an earlier line.",
            "custom_id",
        )
    seen.add(custom_id)
    if item.get("method") != "POST":
        return error("invalid_method", f"Line {number}: 'method' must be \"POST\".", "method")
    url = item.get("url")
    if url != endpoint:
        return error(
            "mismatched_endpoint",
            f"Line {number}: 'url' is {url!r}, but the batch's endpoint is {endpoint!r}.",
            "url",
        )
    body = item.get("body")
    if not isinstance(body, dict):
        return error("invalid_request", f"Line {number}: 'body' must be an object.", "body")
    try:
        request = parse_body(ENDPOINTS[endpoint], body)
    except GatewayError as exc:
        return error("invalid_request", f"Line {number}: {exc.message}", exc.param)
    if request.stream:
        return error("invalid_request", f"Line {number}: a batch line cannot stream.", "stream")
    if request.model not in routes:
        return error(
            "model_not_found",
            f"Line {number}: the model `{request.model}` does not exist.",
            "model",
        )
    if request.model not in allowed:
        return error(
            "model_not_allowed",
            f"Line {number}: this application may not use the model `{request.model}`.",
            "model",
        )
    return LineSpec(number, custom_id, request.model, offset, len(raw)), None


def _lower_first(message: str) -> str:
    """ "The request body is not valid JSON…" reads "Line 3: the line is not valid JSON…"."""
    return message.replace("The request body", "the line", 1)
