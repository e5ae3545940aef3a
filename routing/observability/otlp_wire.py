"""OTLP trace messages written straight to protobuf's wire format.

The OpenTelemetry SDK's spans and its exporter's encoder cost several hundred microseconds of
CPU per call (measured with bench/overhead.py --only tracing: +46 % CPU per call); Sluice's
spans are few and their shape fixed, so they are written here as bytes, field by field, as
opentelemetry/proto/trace/v1/trace.proto lays them out (the tests read them back with the
official `opentelemetry-proto` classes). Most attributes of a span repeat from call to call
(route, deployment, application, outcome): a block of them is encoded once and reused.
"""

import struct
from collections.abc import Iterable
from typing import Any

# Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32. A tag is field << 3 | type.
_SMALL = [bytes((n,)) for n in range(128)]
SERVER, CLIENT = 2, 3  # Span.SpanKind
STATUS_ERROR = 2  # Status.StatusCode
_REMOTE_PARENT = 0x300  # SpanFlags: HAS_IS_REMOTE | IS_REMOTE
_LOCAL_PARENT = 0x100  # SpanFlags: HAS_IS_REMOTE


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


def attributes(items: Iterable[tuple[str, Any]], tag: bytes = b"\x4a") -> bytes:
    """Repeated KeyValue fields (a Span's attributes are field 9; an Event's, 3;
    a Resource's, 1)."""
    return b"".join(_len(tag, key_value(k, v)) for k, v in items)


_blocks: dict[tuple[tuple[str, Any], ...], bytes] = {}
_MAX_BLOCKS = 4096


def attribute_block(items: tuple[tuple[str, Any], ...]) -> bytes:
    """`attributes(items)`, encoded once per distinct set (bounded: a flood of distinct
    values empties the cache instead of growing it)."""
    found = _blocks.get(items)
    if found is None:
        if len(_blocks) >= _MAX_BLOCKS:
            _blocks.clear()
        found = _blocks[items] = attributes(items)
    return found


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
    parts = [
        b"\x0a\x10",
        trace_id.to_bytes(16, "big"),
        b"\x12\x08",
        span_id.to_bytes(8, "big"),
    ]
    if tracestate:
        parts.append(_len(b"\x1a", tracestate.encode("ascii", "replace")))
    if parent_id:
        parts += (b"\x22\x08", parent_id.to_bytes(8, "big"))
    flags = 0x01 | (_REMOTE_PARENT if parent_id and remote_parent else _LOCAL_PARENT)
    parts += (
        b"\x85\x01",  # flags: field 16, fixed32
        struct.pack("<I", flags),
        _len(b"\x2a", name.encode("utf-8", "replace")),
        b"\x30",
        _SMALL[kind],
        b"\x39",
        struct.pack("<Q", start_ns),
        b"\x41",
        struct.pack("<Q", end_ns),
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
