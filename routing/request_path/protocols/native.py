"""Passthrough: a client's body sent as it came to a deployment that speaks its protocol,
and the answer relayed as it comes.

Sluice reads from such a body only what the request path needs (model, stream flag, token
ceiling: routing/request_path/payloads.py `native_request`) and from the answer only its model,
usage and whether it failed. The body sent upstream is the client's bytes with the top-level fields
Sluice must set (the deployment's model name, a clamped token ceiling) rewritten in place:
every other byte, `thinking`, `cache_control`, `include`, encrypted reasoning and whatever
the provider adds next month included, is the client's.
"""

import json
import re
from collections.abc import Callable
from typing import Any

from core import fast_json
from routing.request_path.payloads import NativeBody
from routing.request_path.stream_tap import data_of

ANTHROPIC_KIND = "anthropic"
RESPONSES_KIND = "openai-responses"
# The path under the upstream's base URL a native body goes to.
NATIVE_PATHS = {ANTHROPIC_KIND: "messages", RESPONSES_KIND: "responses"}

_SPACE = re.compile(r"[ \t\n\r]*")
_SPACE_BYTES = re.compile(rb"[ \t\n\r]*")
_decoder = json.JSONDecoder()


def _spans(
    text: str, wanted: set[str], last_here: Callable[[int], bool] = lambda end: False
) -> dict[str, tuple[int, int]]:
    """Where the values of the top-level keys in `wanted` sit in a JSON object's text (the
    last of a repeated key, as json.loads reads it); ValueError for text that is not a JSON
    object. Once all are found it stops where `last_here(end)` says none of them can repeat
    after text position `end`: a coding agent's turn is 100 KB and more, its model first,
    and decoding the rest only to skip it cost more than reading the whole body."""
    spans: dict[str, tuple[int, int]] = {}
    i = _SPACE.match(text, 0).end()  # type: ignore[union-attr]
    if text[i : i + 1] != "{":
        raise ValueError("not an object")
    i = _SPACE.match(text, i + 1).end()  # type: ignore[union-attr]
    if text[i : i + 1] == "}":
        return spans
    while True:
        if text[i : i + 1] != '"':
            raise ValueError("expected a key")
        key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
        i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
        if text[i : i + 1] != ":":
            raise ValueError("expected ':'")
        start = _SPACE.match(text, i + 1).end()  # type: ignore[union-attr]
        _, end = _decoder.raw_decode(text, start)
        if key in wanted:
            spans[key] = (start, end)
            if len(spans) == len(wanted) and last_here(end):
                return spans
        i = _SPACE.match(text, end).end()  # type: ignore[union-attr]
        if text[i : i + 1] == ",":
            i = _SPACE.match(text, i + 1).end()  # type: ignore[union-attr]
            continue
        if text[i : i + 1] == "}":
            return spans
        raise ValueError("expected ',' or '}'")


def _last_here(raw: bytes, at: int, key: str, read: dict[str, Any]) -> bool:
    """Whether no top-level `key` follows byte `at`, where the one found ends. Such a repeat
    would be the one json.loads reads, so its value would be `read[key]`: a later `"key":`
    whose value starts otherwise (a tool's schema with a property of that name: an object)
    is not one. One whose value may be it, or a letter of the key written as a `\\u`
    escape, and the rest is decoded after all."""
    # An escaped letter of "model" starts "\\u006": one search per first hex digit.
    escapes = {b"u00%x" % (ord(c) >> 4) for c in key}
    if any(raw.find(escape, at) >= 0 for escape in escapes):
        return False
    quoted = b'"%s"' % key.encode()
    found = raw.find(quoted, at)
    while found >= 0:
        colon = _SPACE_BYTES.match(raw, found + len(quoted)).end()  # type: ignore[union-attr]
        if raw[colon : colon + 1] == b":":
            value = _SPACE_BYTES.match(raw, colon + 1).end()  # type: ignore[union-attr]
            if key not in read or raw[value : value + 1] == json.dumps(read[key])[:1].encode():
                return False
        found = raw.find(quoted, found + 1)
    return True


def with_fields(raw: bytes, fields: dict[str, Any], read: dict[str, Any] | None = None) -> bytes:
    """`raw` (a JSON object) with these top-level fields set, every other byte as it was;
    fields already holding their value leave it byte for byte the same. `read`: some
    top-level fields as json.loads reads them, which spares decoding the rest of the body."""
    text = raw.decode("utf-8")
    ascii_only = raw.isascii()  # else a place in the text is another in the bytes

    def in_bytes(at: int) -> int:
        return at if ascii_only else len(text[:at].encode("utf-8"))

    known = read or {}
    spans = _spans(
        text, set(fields), lambda end: all(_last_here(raw, in_bytes(end), k, known) for k in fields)
    )
    edits: list[tuple[int, int, bytes]] = []
    added: list[bytes] = []
    for name, value in fields.items():
        encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if name in spans:
            start, end = spans[name]
            current = json.loads(text[start:end])
            if current != value or type(current) is not type(value):
                edits.append((in_bytes(start), in_bytes(end), encoded))
        else:
            added.append(json.dumps(name).encode() + b":" + encoded)
    # Edited as bytes: the body's text is not built again, nor encoded (slow for a text
    # that is not all ASCII).
    for start, end, encoded in sorted(edits, reverse=True):
        raw = raw[:start] + encoded + raw[end:]
    if added:
        opening = raw.index(b"{") + 1
        rest = raw[opening:]
        joiner = b"," if rest.strip() != b"}" else b""
        raw = raw[:opening] + b",".join(added) + joiner + rest
    return raw


def native_bytes(native: NativeBody, model: str) -> bytes:
    """The body for the deployment: the client's, with the deployment's model name."""
    fields = {"model": model, **native.overrides}
    try:
        return with_fields(native.raw, fields, native.read)
    except (ValueError, IndexError, RecursionError):
        # Read as JSON already (routing/request_path/payloads.py), so this is not expected; should
        # the scanner ever disagree with json.loads, the body goes re-encoded rather than not.
        return json.dumps({**json.loads(native.raw), **fields}).encode()


class NativeTap:
    """Watches a native stream as it is relayed: the bytes go on as they came (no event is
    held back or rewritten); on the side it learns the model, the usage and an error event,
    and counts content deltas (for an estimate when the stream is cut short)."""

    # An event worth parsing carries one of these; the rest (text deltas) are only counted.
    _MARKS = {
        ANTHROPIC_KIND: re.compile(rb'message_start|message_delta|"error"'),
        RESPONSES_KIND: re.compile(
            rb'"error"|response\.completed|response\.incomplete|response\.failed|response\.created'
        ),
    }

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.forward_usage = True
        self.model = ""
        self.usage: dict[str, Any] | None = None
        self.chunks = 0
        self.error: dict[str, Any] | None = None
        self.finish_reasons: list[str] = []  # why the answer ended (stop_reason, status)
        self._failing: dict[str, Any] | None = None  # a Responses `error` event, not yet final
        self._buffer = b""
        self._marked = self._MARKS[kind].search

    def feed(self, data: bytes) -> bytes:
        buffer = self._buffer + data if self._buffer else data
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        *events, self._buffer = buffer.split(b"\n\n")
        if self._marked(buffer):
            for event in events:
                self._watch(event)
        else:  # text deltas only (most reads): counted, not parsed
            for event in events:
                if data_of(event) is not None:
                    self.chunks += 1
        return data

    def flush(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        if rest.strip():
            self._watch(rest)
        if self.error is None and self._failing is not None:
            self.error = self._failing
        return b""

    def _watch(self, event: bytes) -> None:
        data = data_of(event)
        if data is None:
            return
        if not self._marked(data):
            self.chunks += 1
            return
        try:
            payload = fast_json.loads(data)
        except ValueError:
            return
        if not isinstance(payload, dict):
            return
        kind = payload.get("type")
        if kind == "message_start":  # Anthropic
            message = payload.get("message") or {}
            self.model = str(message.get("model") or self.model)
            self._merge(message.get("usage"))
        elif kind == "message_delta":
            self._merge(payload.get("usage"))
            delta = payload.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self.finish_reasons.append(str(delta["stop_reason"])[:64])
        elif kind == "error" and self.kind == ANTHROPIC_KIND:
            error = payload.get("error")
            self.error = error if isinstance(error, dict) else {"message": str(error)}
        elif kind == "error":
            # Responses: `response.failed` follows and ends the stream; until then (or the
            # stream's end) the relay goes on, so the client gets both.
            self._failing = {"message": payload.get("message"), "code": payload.get("code")}
        elif kind == "response.failed":
            error = (payload.get("response") or {}).get("error")
            self.error = error if isinstance(error, dict) else self._failing or {}
        elif isinstance(kind, str) and kind.startswith("response."):
            response = payload.get("response") or {}
            self.model = str(response.get("model") or self.model)
            if isinstance(response.get("usage"), dict):
                self.usage = response["usage"]
            if kind == "response.completed":
                self.finish_reasons = ["stop"]
            elif kind == "response.incomplete":
                details = response.get("incomplete_details")
                reason = details.get("reason") if isinstance(details, dict) else None
                self.finish_reasons = [str(reason or "incomplete")[:64]]
        else:
            self.chunks += 1

    def _merge(self, usage: Any) -> None:
        if isinstance(usage, dict):
            fresh = {k: v for k, v in usage.items() if v is not None}
            self.usage = {**(self.usage or {}), **fresh}
