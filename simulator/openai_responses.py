"""The Responses-shaped face of a model (`--model gpt-r:4:openai-responses`): `POST
/v1/responses`, as OpenAI's Responses API answers (the shape Codex reads).

Like simulator/anthropic.py: the request is read as a chat request of the same size and
served by the same capacity, latency and fault model; the chat answer is rewritten on the
way out into a `response` object, or into the Responses stream (`response.created`, the
output items with their deltas, `response.completed` with usage). Errors keep OpenAI's
shape (the same for both APIs), "at capacity" as 503.
"""

from __future__ import annotations

import json
from typing import Any

from simulator.chat_rewrite import ChatRewrite
from simulator.wire import Receive, Send, json_bytes, json_headers, read_body


def chat_request(req: dict[str, Any]) -> dict[str, Any]:
    """A Responses request as the chat request the simulator plans from."""
    text = json.dumps([req.get("instructions"), req.get("input"), req.get("tools")])
    chat: dict[str, Any] = {
        "model": req.get("model"),
        "messages": [{"role": "user", "content": text}],
    }
    if isinstance(req.get("max_output_tokens"), int):
        chat["max_tokens"] = req["max_output_tokens"]
    if req.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    usage = usage or {}
    prompt, completion = (
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
    )
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def _text_item(item_id: str, text: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }


def _call_item(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    return {
        "id": "fc_" + str(call.get("id")),
        "type": "function_call",
        "status": "completed",
        "call_id": call.get("id"),
        "name": function.get("name"),
        "arguments": function.get("arguments") or "",
    }


def response_of(chat: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    suffix = str(chat.get("id", "")).removeprefix("chatcmpl-")
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    if message.get("content"):
        output.append(_text_item(f"msg_{suffix}", message["content"]))
    output.extend(_call_item(c) for c in message.get("tool_calls") or ())
    return {
        "id": f"resp_{suffix}",
        "object": "response",
        "created_at": chat.get("created"),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": chat.get("model"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _usage(chat.get("usage")) if status == "completed" else None,
    }


def _sse(data: dict[str, Any]) -> bytes:
    return b"event: " + data["type"].encode() + b"\ndata: " + json_bytes(data) + b"\n\n"


class ResponsesOut(ChatRewrite):
    """Wraps the server's `send`: chat answers out as Responses ones (see MessagesOut)."""

    def __init__(self, send: Send) -> None:
        super().__init__(send)
        self._sequence = 0
        self._chat: dict[str, Any] = {}  # the answer so far, as a chat completion
        self._text = ""
        self._calls: list[dict[str, Any]] = []

    def _answer(self, body: bytes) -> tuple[int, bytes]:
        try:
            payload = json.loads(body)
        except ValueError:
            return self._status, body
        if self._status == 200 and isinstance(payload, dict) and "choices" in payload:
            return 200, json_bytes(response_of(payload))
        return self._status, body

    def _event(self, kind: str, **data: Any) -> bytes:
        event = {"type": kind, "sequence_number": self._sequence, **data}
        self._sequence += 1
        return _sse(event)

    def _chunk(self, chunk: dict[str, Any]) -> bytes:
        out = b""
        if not self._chat:
            self._chat = {k: chunk.get(k) for k in ("id", "created", "model")}
            response = response_of({**self._chat, "choices": []}, status="in_progress")
            out += self._event("response.created", response=response)
            out += self._event("response.in_progress", response=response)
        suffix = str(self._chat.get("id", "")).removeprefix("chatcmpl-")
        item_id = f"msg_{suffix}"
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                if not self._text:
                    item = {**_text_item(item_id, ""), "status": "in_progress", "content": []}
                    out += self._event("response.output_item.added", output_index=0, item=item)
                    part = {"type": "output_text", "text": "", "annotations": []}
                    out += self._event(
                        "response.content_part.added",
                        item_id=item_id,
                        output_index=0,
                        content_index=0,
                        part=part,
                    )
                self._text += text
                out += self._event(
                    "response.output_text.delta",
                    item_id=item_id,
                    output_index=0,
                    content_index=0,
                    delta=text,
                )
            for call in delta.get("tool_calls") or ():
                self._calls.append(call)  # the simulator sends each call whole
        if chunk.get("usage") and not chunk.get("choices"):
            self._chat["usage"] = chunk["usage"]
        return out

    def _done(self) -> bytes:
        out = b""
        suffix = str(self._chat.get("id", "")).removeprefix("chatcmpl-")
        index = 0
        if self._text:
            item = _text_item(f"msg_{suffix}", self._text)
            out += self._event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=0,
                content_index=0,
                text=self._text,
            )
            out += self._event("response.output_item.done", output_index=0, item=item)
            index = 1
        for call in self._calls:
            item = _call_item(call)
            added = {**item, "status": "in_progress", "arguments": ""}
            out += self._event("response.output_item.added", output_index=index, item=added)
            out += self._event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=index,
                delta=item["arguments"],
            )
            out += self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=item["arguments"],
            )
            out += self._event("response.output_item.done", output_index=index, item=item)
            index += 1
        message: dict[str, Any] = {"content": self._text or None}
        if self._calls:
            message["tool_calls"] = self._calls
        chat = {**self._chat, "choices": [{"message": message}]}
        return out + self._event("response.completed", response=response_of(chat))


async def read_responses_request(receive: Receive, send: Send) -> tuple[dict | None, Receive]:
    """The Responses request (None after answering a bad one), and a `receive` that hands
    its chat translation to the simulator's usual path."""
    body = await read_body(receive)
    req: Any = None
    if body is not None:
        try:
            req = json.loads(body)
        except ValueError:
            req = None
        if not isinstance(req, dict) or not isinstance(req.get("model"), str):
            error = json_bytes(
                {
                    "error": {
                        "message": "A JSON object with a model.",
                        "type": "invalid_request_error",
                        "code": None,
                        "param": None,
                    }
                }
            )
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
