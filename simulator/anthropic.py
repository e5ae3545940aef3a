"""The Anthropic-shaped face of a model (`--model claude-x:4:anthropic`): `POST /v1/messages`.

The request is read as a chat request of the same size and served by the same capacity,
latency and fault model; what goes out is rewritten into Messages shapes on the way: the
answer, its event stream, and errors as `{"type":"error","error":{type,message}}`, with
"at capacity" (by capacity or by the `capacity` fault) as HTTP 529 `overloaded_error`.
"""

from __future__ import annotations

import json
from typing import Any

from simulator.chat_rewrite import ChatRewrite
from simulator.wire import Receive, Send, json_bytes, json_headers, read_body

OVERLOADED_MESSAGE = "Overloaded"
# OpenAI-shaped status → (status, Anthropic error type) of what the client gets.
_ERRORS = {
    400: (400, "invalid_request_error"),
    401: (401, "authentication_error"),
    404: (404, "not_found_error"),
    429: (429, "rate_limit_error"),
    500: (500, "api_error"),
    503: (529, "overloaded_error"),
}
_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def anthropic_error(status: int, kind: str, message: str) -> bytes:
    return json_bytes({"type": "error", "error": {"type": kind, "message": message}})


def chat_request(req: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as the chat request the simulator plans from: the same text (so
    the same prompt tokens), the same length and streaming."""
    text = json.dumps([req.get("system"), req.get("messages"), req.get("tools")])
    chat: dict[str, Any] = {
        "model": req.get("model"),
        "messages": [{"role": "user", "content": text}],
    }
    if req.get("max_tokens") is not None:
        chat["max_tokens"] = req["max_tokens"]
    if req.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + json_bytes(data) + b"\n\n"


def _usage(usage: dict[str, Any] | None) -> dict[str, int]:
    usage = usage or {}
    return {
        "input_tokens": int(usage.get("prompt_tokens") or 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
    }


THINKING_TEXT = "Thinking it over (simulated)."
THINKING_SIGNATURE = "sim-signature"


def wants_thinking(req: dict[str, Any]) -> bool:
    """The request asked for thinking (enabled or adaptive): the answer opens with a
    thinking block, as Claude's do."""
    thinking = req.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        arguments = {}
    return {
        "type": "tool_use",
        "id": call.get("id"),
        "name": function.get("name"),
        "input": arguments,
    }


def message_of(chat: dict[str, Any], thinking: bool = False) -> dict[str, Any]:
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if thinking:
        content.append(
            {"type": "thinking", "thinking": THINKING_TEXT, "signature": THINKING_SIGNATURE}
        )
    if message.get("content") or not message.get("tool_calls"):
        content.append({"type": "text", "text": message.get("content") or ""})
    content.extend(_tool_use(call) for call in message.get("tool_calls") or ())
    return {
        "id": "msg_" + str(chat.get("id", "")).removeprefix("chatcmpl-"),
        "type": "message",
        "role": "assistant",
        "model": chat.get("model"),
        "content": content,
        "stop_reason": _STOP.get(choice.get("finish_reason") or "", "end_turn"),
        "stop_sequence": None,
        "usage": _usage(chat.get("usage")),
    }


class MessagesOut(ChatRewrite):
    """Wraps the server's `send`: chat answers out as Messages ones."""

    def __init__(self, send: Send, thinking: bool = False) -> None:
        super().__init__(send)
        self._thinking = thinking
        self._started = False
        self._finish = "stop"
        self._block = -1  # index of the open content block
        self._open = ""  # its type ("" : none open)

    def _answer(self, body: bytes) -> tuple[int, bytes]:
        try:
            payload = json.loads(body)
        except ValueError:
            return self._status, body  # the `garbage` fault stays garbage
        if self._status == 200 and isinstance(payload, dict) and "choices" in payload:
            return 200, json_bytes(message_of(payload, self._thinking))
        status, kind = _ERRORS.get(self._status, (self._status, "api_error"))
        error = payload.get("error") if isinstance(payload, dict) else None
        message = str((error or {}).get("message", ""))
        if kind == "overloaded_error":
            message = OVERLOADED_MESSAGE
        return status, anthropic_error(status, kind, message)

    def _done(self) -> bytes:
        return _event("message_stop", {"type": "message_stop"})

    def _start_block(self, block: dict[str, Any]) -> bytes:
        out = self._stop_block()
        self._block += 1
        self._open = block["type"]
        start = {"type": "content_block_start", "index": self._block, "content_block": block}
        return out + _event("content_block_start", start)

    def _stop_block(self) -> bytes:
        if not self._open:
            return b""
        self._open = ""
        return _event("content_block_stop", {"type": "content_block_stop", "index": self._block})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        data = {"type": "content_block_delta", "index": self._block, "delta": delta}
        return _event("content_block_delta", data)

    def _chunk(self, chunk: dict[str, Any]) -> bytes:
        out = b""
        if not self._started:
            self._started = True
            message = message_of({**chunk, "choices": [{"message": {"content": ""}}]})
            message.update(content=[], stop_reason=None)
            out += _event("message_start", {"type": "message_start", "message": message})
            if self._thinking:
                out += self._start_block({"type": "thinking", "thinking": ""})
                out += self._delta({"type": "thinking_delta", "thinking": THINKING_TEXT})
                out += self._delta({"type": "signature_delta", "signature": THINKING_SIGNATURE})
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                if self._open != "text":
                    out += self._start_block({"type": "text", "text": ""})
                out += self._delta({"type": "text_delta", "text": text})
            for call in delta.get("tool_calls") or ():
                block = {**_tool_use(call), "input": {}}
                out += self._start_block(block)
                arguments = (call.get("function") or {}).get("arguments") or "{}"
                out += self._delta({"type": "input_json_delta", "partial_json": arguments})
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        if chunk.get("usage") and not chunk.get("choices"):
            if self._block < 0:
                out += self._start_block({"type": "text", "text": ""})
            out += self._stop_block()
            out += _event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": _STOP.get(self._finish, "end_turn"),
                        "stop_sequence": None,
                    },
                    "usage": _usage(chunk["usage"]),
                },
            )
        return out


async def read_messages_request(receive: Receive, send: Send) -> tuple[dict | None, Receive]:
    """The Messages request (None after answering a bad one), and a `receive` that hands
    its chat translation to the simulator's usual path, then the client's next messages."""
    body = await read_body(receive)
    req: Any = None
    if body is not None:
        try:
            req = json.loads(body)
        except ValueError:
            req = None
        if not isinstance(req, dict) or not isinstance(req.get("model"), str):
            error = anthropic_error(400, "invalid_request_error", "A JSON object with a model.")
            await send(
                {"type": "http.response.start", "status": 400, "headers": json_headers(error)}
            )
            await send({"type": "http.response.body", "body": error})
            return None, receive
    chat = json_bytes(chat_request(req)) if req is not None else b""
    handed = False

    async def replay() -> dict[str, Any]:
        nonlocal handed
        if not handed:
            handed = True
            return {"type": "http.request", "body": chat, "more_body": False}
        return await receive()

    return req, replay
