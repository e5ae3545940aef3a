"""Watches a server-sent-event stream as it is relayed, chunk by chunk.

It learns the model the upstream reports and the usage Sluice asked for, drops the usage
chunk when the client did not ask for it, and counts content chunks so a stream cut short
still has an estimate of the tokens it produced.

It runs on the event loop for every read from the upstream, so it reads as little as it
can: once the model is known, the events of a read go on as one slice, and only an event
that carries a usage object or an error (the usage chunk comes once, at the end) is parsed.
"""

import re
from typing import Any

from core import fast_json

_EVENT_END = b"\n\n"
# Every chunk says `"finish_reason":null`; only the last names one.
_FINISHED, _SPACED = b'"finish_reason":"', b'"finish_reason": "'
_FINISH_REASON = re.compile(rb'"finish_reason":\s*"([^"]{1,64})"')
# What makes an event worth parsing once the model is known (`"usage":null`, on every
# chunk of a stream asked for its usage, is not).
_LOOK_AT = re.compile(rb'"error"|"usage": ?\{')


class StreamTap:
    def __init__(self, *, forward_usage: bool) -> None:
        self.forward_usage = forward_usage
        self.model = ""
        self.usage: dict[str, Any] | None = None
        self.chunks = 0
        self.error: dict[str, Any] | None = None
        # A list to collect the choices' finish reasons in (a traced call), or None.
        self.finish_reasons: list[str] | None = None
        self._buffer = b""

    def feed(self, data: bytes) -> bytes:
        """The bytes to pass on: whole events only, in order."""
        buffer = self._buffer + data if self._buffer else data
        end = buffer.rfind(_EVENT_END) + 2
        if end < 2:
            self._buffer = buffer
            return b""
        complete, self._buffer = (
            (buffer, b"") if end == len(buffer) else (buffer[:end], buffer[end:])
        )
        self._finished(complete)
        if self.model:
            return self._pass(complete)
        kept = []
        while complete and not self.model:  # one event at a time until one names the model
            cut = complete.index(_EVENT_END)
            event = self._keep(complete[:cut]) if cut else None
            if event is not None:
                kept.append(event + _EVENT_END)
            complete = complete[cut + 2 :]
        if complete:
            kept.append(self._pass(complete))
        return b"".join(kept)

    def _pass(self, events: bytes) -> bytes:
        """Whole events once the model is known: the slices between those worth parsing go
        on as they came, counted."""
        chunks = events.count(b"data: {")
        others = events.count(b"data:") - chunks
        if others and others != events.count(b"data: [DONE]"):
            # An event of another shape (`data:{`, a line that is not JSON): each is read.
            kept = [self._keep(event) for event in events.split(_EVENT_END) if event]
            return b"".join(event + _EVENT_END for event in kept if event is not None)
        first = _LOOK_AT.search(events)
        if first is None:
            self.chunks += chunks  # the common case: nothing to parse, nothing to drop
            return events
        parts: list[bytes] = []
        at = 0
        for mark in _LOOK_AT.finditer(events, first.start()):
            if mark.start() < at:
                continue  # a second mark in an event already read
            before = events.rfind(_EVENT_END, at, mark.start())
            start = before + 2 if before >= 0 else at
            end = events.index(_EVENT_END, mark.start())
            parts.append(events[at:start])
            chunks -= events.count(b"data: {", start, end)  # _keep counts it, or not
            event = self._keep(events[start:end])
            if event is not None:
                parts.append(event + _EVENT_END)
            at = end + 2
        self.chunks += chunks
        parts.append(events[at:])
        return b"".join(parts)

    def flush(self) -> bytes:
        """Whatever is left when the upstream closes (a last event without its blank line)."""
        rest, self._buffer = self._buffer, b""
        self._finished(rest)
        if rest.strip():
            kept = self._keep(rest.rstrip(b"\n"))
            if kept is not None:
                return kept + _EVENT_END
        return b""

    def _finished(self, events: bytes) -> None:
        """The choices' finish reasons, when the call is traced (a bytes search per chunk;
        only the last chunk of a choice names one)."""
        if self.finish_reasons is not None and (_FINISHED in events or _SPACED in events):
            self.finish_reasons += [r.decode() for r in _FINISH_REASON.findall(events)]

    def _keep(self, event: bytes) -> bytes | None:
        """The event to pass on (itself, or an error event in place of a malformed one), or
        None to drop it."""
        data = data_of(event)
        if data is None or data == b"[DONE]":
            return event
        if self.model and data[:1] == b"{" and _LOOK_AT.search(data) is None:
            self.chunks += 1
            return event
        try:
            payload = fast_json.loads(data)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            # Not an OpenAI event (an HTML error page mid-stream, say): the client's SDK
            # would fail to parse it; it gets an error event it recognises instead.
            self.error = {
                "message": "The upstream sent a malformed stream event.",
                "type": "server_error",
                "code": "malformed_stream",
                "param": None,
            }
            return b"data: " + fast_json.dumps({"error": self.error})
        if isinstance(payload.get("error"), dict):
            self.error = payload["error"]
            return event
        self.model = self.model or str(payload.get("model") or "")
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
            if not self.forward_usage and not payload.get("choices"):
                return None  # the usage-only chunk the client did not ask for
        if payload.get("choices"):
            self.chunks += 1
        return event


def data_of(event: bytes) -> bytes | None:
    """The value of the event's first `data:` line, stripped; None when it has none."""
    if event.startswith(b"data:"):
        start = 5
    else:
        start = event.find(b"\ndata:") + 6
        if start < 6:
            return None
    end = event.find(b"\n", start)
    return event[start : end if end >= 0 else None].strip()
