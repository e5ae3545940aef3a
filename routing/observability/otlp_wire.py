"""OTLP trace messages written straight to protobuf's wire format.

The OpenTelemetry SDK's spans and its exporter's encoder cost several hundred microseconds of
CPU per call (measured with bench/overhead.py --only tracing: +46 % CPU per call); Sluice's
spans are few and their shape fixed, so they are written here as bytes, field by field, as
opentelemetry/proto/trace/v1/trace.proto lays them out (the tests read them back with the
official `opentelemetry-proto` classes). Most attributes of a span repeat from call to call
(route, deployment, application, outcome): the caller encodes such a block once and reuses
it (routing/observability/trace_spans.py).
"""

import struct
from collections.abc import Iterable
from typing import Any

# Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32. A tag is field << 3 | type.
_SMALL = [bytes((n,)) for n in range(128)]
SERVER, CLIENT = 2, 3  # Span.SpanKind
STATUS_ERROR = 2  # Status.StatusCode
# Span.flags (field 16, fixed32): sampled, and whether the parent is remote (SpanFlags).
_FLAGS_REMOTE = b"\x85\x01" + struct.pack("<I", 0x301)  # HAS_IS_REMOTE | IS_REMOTE
_FLAGS_LOCAL = b"\x85\x01" + struct.pack("<I", 0x101)  # HAS_IS_REMOTE
_KINDS = {SERVER: b"\x30\x02", CLIENT: b"\x30\x03"}  # Span.kind, field 6
_TIMES = struct.Struct("<BQBQ")


def varint(n: int) -> bytes:
    if 0 <= n < 128:
        return _SMALL[n]
    n &= 0xFFFFFFFFFFFFFFFF  # int64: negative numbers take ten bytes
    out = bytearray()
    while n > 127:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def any_value(value: Any) -> bytes:
    """An AnyValue: string 1, bool 2, int 3, double 4, array 5."""
    if isinstance(value, str):
        return _len(b"\x0a", value.encode("utf-8", "replace"))
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + struct.pack("<d", value)
    if isinstance(value, list | tuple):
        return _len(b"\x2a", b"".join(_len(b"\x0a", any_value(v)) for v in value))
    return _len(b"\x0a", str(value).encode("utf-8", "replace"))


def key_value(key: str, value: Any) -> bytes:
    """A KeyValue (key 1, value 2), without its own tag."""
    return _len(b"\x0a", key.encode()) + _len(b"\x12", any_value(value))


_keys: dict[str, bytes] = {}  # a KeyValue's key field, per attribute name Sluice writes


def attributes(items: Iterable[tuple[str, Any]], tag: bytes = b"\x4a") -> bytes:
    """Repeated KeyValue fields (a Span's attributes are field 9; an Event's, 3;
    a Resource's, 1). Strings and ints, most of them, are written inline."""
    parts: list[bytes] = []
    for key, value in items:
        name = _keys.get(key)
        if name is None:
            name = _len(b"\x0a", key.encode())
            if len(_keys) < 256:
                _keys[key] = name
        kind = type(value)
        if kind is str:
            text = value.encode("utf-8", "replace")
            size = len(text)
            inner = (b"\x0a" + _SMALL[size] if size < 128 else b"\x0a" + varint(size)) + text
        elif kind is int:
            inner = b"\x18" + (_SMALL[value] if 0 <= value < 128 else varint(value))
        else:
            inner = any_value(value)
        size = len(inner)
        body = name + (b"\x12" + _SMALL[size] if size < 128 else b"\x12" + varint(size)) + inner
        size = len(body)
        parts += (tag, _SMALL[size] if size < 128 else varint(size), body)
    return b"".join(parts)


def event(time_ns: int, name: str, items: Iterable[tuple[str, Any]]) -> bytes:
    """A Span's event (field 11): time 1, name 2, attributes 3."""
    body = b"\x09" + struct.pack("<Q", time_ns) + _len(b"\x12", name.encode())
    return _len(b"\x5a", body + attributes(items, b"\x1a"))


def span(
    *,
    trace_id: int,
    span_id: int,
    parent_id: int,
    remote_parent: bool,
    tracestate: str,
    name: str,
    kind: int,
    start_ns: int,
    end_ns: int,
    attributes: bytes,
    events: bytes = b"",
    error: str = "",
) -> bytes:
    """A Span (ScopeSpans field 2): its ids, name, kind, times, the encoded attributes and
    events, and an error status when `error` says what went wrong."""
    parts = [b"\x0a\x10" + trace_id.to_bytes(16, "big") + b"\x12\x08" + span_id.to_bytes(8, "big")]
    if tracestate:
        parts.append(_len(b"\x1a", tracestate.encode("ascii", "replace")))
    if parent_id:
        parts.append(b"\x22\x08" + parent_id.to_bytes(8, "big"))
    parts += (
        _FLAGS_REMOTE if parent_id and remote_parent else _FLAGS_LOCAL,
        _len(b"\x2a", name.encode("utf-8", "replace")),
        _KINDS[kind],
        _TIMES.pack(0x39, start_ns, 0x41, end_ns),  # start 7, end 8: fixed64
        attributes,
        events,
    )
    if error:
        status = _len(b"\x12", error.encode("utf-8", "replace")) + b"\x18" + _SMALL[STATUS_ERROR]
        parts.append(_len(b"\x7a", status))
    return _len(b"\x12", b"".join(parts))


def resource(items: Iterable[tuple[str, Any]]) -> bytes:
    """A ResourceSpans' resource (field 1): its attributes."""
    return _len(b"\x0a", attributes(items, b"\x0a"))


def scope(name: str, version: str) -> bytes:
    """A ScopeSpans' scope (field 1): the instrumentation's name and version."""
    return _len(b"\x0a", _len(b"\x0a", name.encode()) + _len(b"\x12", version.encode()))


def export_request(resource: bytes, scope: bytes, spans: list[bytes]) -> bytes:
    """An ExportTraceServiceRequest of one ResourceSpans holding one ScopeSpans."""
    scope_spans = _len(b"\x12", scope + b"".join(spans))
    return _len(b"\x0a", resource + scope_spans)
