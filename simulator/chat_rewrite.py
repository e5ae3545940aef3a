"""The one wrapper both of the simulator's other faces use: it takes the chat answer the
simulator made and sends it out in another protocol's shape (Messages, Responses), a whole
body or a stream of `data:` events. Its `send` is a bound method whose object has the
server's transport, so dropped-connection faults still reach it (simulator.wire.transport_of).
"""

from __future__ import annotations

import json
from typing import Any

from simulator.wire import Send, json_headers, transport_of


class ChatRewrite:
    """Subclasses say how a whole answer (`_answer`), a chunk (`_chunk`) and the stream's end
    (`_done`) read in their protocol."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.transport = transport_of(send)
        self._status = 200
        self._headers: list = []
        self._stream = False
        self._buffer = b""
        self._body = b""

    def _answer(self, body: bytes) -> tuple[int, bytes]:
        raise NotImplementedError

    def _chunk(self, chunk: dict[str, Any]) -> bytes:
        raise NotImplementedError

    def _done(self) -> bytes:
        raise NotImplementedError

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self._status = message["status"]
            self._headers = message.get("headers", [])
            self._stream = self._status == 200 and any(
                v.startswith(b"text/event-stream") for _, v in self._headers
            )
            if self._stream:
                await self._send(message)
            return
        body, more = message.get("body", b""), message.get("more_body", False)
        if self._stream:
            out = self._events(body)
            if out or not more:
                await self._send({"type": "http.response.body", "body": out, "more_body": more})
            return
        self._body += body
        if not more:
            status, out = self._answer(self._body)
            kept = [(k, v) for k, v in self._headers if k.startswith(b"retry-after")]
            await self._send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": json_headers(out, kept),
                }
            )
            await self._send({"type": "http.response.body", "body": out})

    def _events(self, body: bytes) -> bytes:
        events = (self._buffer + body).split(b"\n\n")
        self._buffer = events.pop()
        out = []
        for event in events:
            data = event.removeprefix(b"data: ")
            if data == b"[DONE]":
                out.append(self._done())
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                out.append(event + b"\n\n")  # the `garbage` fault's line, as it was
                continue
            out.append(self._chunk(chunk))
        return b"".join(out)
