"""Watches a server-sent-event stream as it is relayed, chunk by chunk.

It learns the model the upstream reports and the usage Sluice asked for, drops the usage
chunk when the client did not ask for it, and counts content chunks so a stream cut short
still has an estimate of the tokens it produced.
"""

import json
import re
from typing import Any

_EVENT_END = b"\n\n"
# Every chunk says `"finish_reason":null`; only the last names one.
_FINISHED, _SPACED = b'"finish_reason":"', b'"finish_reason": "'
_FINISH_REASON = re.compile(rb'"finish_reason":\s*"([^"]{1,64})"')
_USAGE_OBJECT = (b'"usage":{', b'"usage": {')


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
        buffer = self._buffer + data
        end = buffer.rfind(_EVENT_END)
        if end < 0:
            self._buffer = buffer
            return b""
        complete, self._buffer = buffer[: end + 2], buffer[end + 2 :]
        self._finished(complete)
        chunks = complete.count(b"data: {")
        if (
            self.model
            and b'"error"' not in complete
            and not any(u in complete for u in _USAGE_OBJECT)
            and complete.count(b"data:") == chunks + complete.count(b"data: [DONE]")
        ):
            # The common case: nothing to learn and no usage chunk to drop, whether the
            # client asked for usage or not: pass the bytes on as they are.
            self.chunks += chunks
            return complete
        kept = [self._keep(event) for event in complete.split(_EVENT_END) if event]
        return b"".join(event + _EVENT_END for event in kept if event is not None)

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
        is_usage = any(u in data for u in _USAGE_OBJECT)
        if self.model and not is_usage and b'"error"' not in data and data[:1] == b"{":
            self.chunks += 1
            return event
        try:
            payload = json.loads(data)
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
            return b"data: " + json.dumps({"error": self.error}).encode()
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
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            return line[5:].strip()
    return None
