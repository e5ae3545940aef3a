"""An upstream of kind `openai-responses` (OpenAI's `/v1/responses`) taking a call that is
not in Responses shape (a chat or Messages client on a chain that crosses kinds): the chat
request sent as a Responses request, stateless (`store: false`), and its answer read back
as chat completions, so the chain walk, the classifier, the relay and the audit see the
same shapes from every kind. A Responses client's own call to it is passed through
(routing/request_path/protocols/native.py) and never comes here.

The response wrapper offers what they use of an aiohttp response, like
routing/request_path/protocols/anthropic_upstream.py.
"""

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from core.errors import json_object
from routing.request_path.protocols.chat_chunks import ChatChunks
from routing.request_path.protocols.native import RESPONSES_KIND
from routing.request_path.protocols.openai_responses import chat_request_to_responses
from routing.request_path.stream_tap import data_of

KIND = RESPONSES_KIND


def responses_body(chat: dict[str, Any]) -> bytes:
    body = chat_request_to_responses(chat)
    body["store"] = False
    return json.dumps(body, separators=(",", ":")).encode()


def usage_to_chat(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    prompt, completion = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    cached = _int((usage.get("input_tokens_details") or {}).get("cached_tokens"))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _finish(response: dict[str, Any], calls: bool) -> str:
    reason = (response.get("incomplete_details") or {}).get("reason")
    if reason == "max_output_tokens":
        return "length"
    if reason == "content_filter":
        return "content_filter"
    return "tool_calls" if calls else "stop"


def response_to_completion(response: dict[str, Any]) -> dict[str, Any]:
    """A `response` object → a chat completion (reasoning items have no chat counterpart
    and are left out)."""
    text, refusal, calls = "", "", []
    for item in response.get("output") or ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or ():
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "output_text":
                    text += str(part.get("text") or "")
                elif part.get("type") == "refusal":
                    refusal += str(part.get("refusal") or "")
        elif item.get("type") == "function_call":
            calls.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {
                        "name": item.get("name"),
                        "arguments": item.get("arguments") or "",
                    },
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if refusal:
        message["refusal"] = refusal
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-" + str(response.get("id") or "").removeprefix("resp_"),
        "object": "chat.completion",
        "created": int(response.get("created_at") or time.time()),
        "model": response.get("model"),
        "choices": [
            {"index": 0, "message": message, "finish_reason": _finish(response, bool(calls))}
        ],
        "usage": usage_to_chat(response.get("usage")),
    }


class ResponsesToChatStream(ChatChunks):
    """Responses stream events (parsed `data:` objects) → chat stream chunks (bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[int, int] = {}  # output index → chat tool call index

    def feed(self, event: dict[str, Any]) -> bytes:
        kind = event.get("type")
        if kind == "response.created":
            response = event.get("response") or {}
            self.id = "chatcmpl-" + str(response.get("id") or "").removeprefix("resp_")
            self.model = str(response.get("model") or "")
            return self._delta({"role": "assistant", "content": ""})
        if kind == "response.output_text.delta":
            return self._delta({"content": str(event.get("delta") or "")})
        if kind == "response.refusal.delta":
            return self._delta({"refusal": str(event.get("delta") or "")})
        if kind == "response.output_item.added":
            item = event.get("item") or {}
            if item.get("type") != "function_call":
                return b""
            index = self.calls[event.get("output_index", 0)] = len(self.calls)
            call = {
                "index": index,
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""},
            }
            return self._delta({"tool_calls": [call]})
        if kind == "response.function_call_arguments.delta":
            index = self.calls.get(event.get("output_index", 0), 0)
            call = {"index": index, "function": {"arguments": str(event.get("delta") or "")}}
            return self._delta({"tool_calls": [call]})
        if kind in ("response.completed", "response.incomplete"):
            response = event.get("response") or {}
            finish = self._delta({}, _finish(response, bool(self.calls)))
            usage = self._chunk([], usage=usage_to_chat(response.get("usage")))
            return finish + usage + b"data: [DONE]\n\n"
        if kind in ("error", "response.failed"):
            error = event.get("error") or (event.get("response") or {}).get("error") or event
            body = {
                "message": str(error.get("message") or "The upstream failed."),
                "type": "server_error",
                "code": str(error.get("code") or ""),
                "param": None,
            }
            return b"data: " + json.dumps({"error": body}).encode() + b"\n\n"
        return b""  # reasoning, in-progress and done events: nothing chat would say


class _ChatEvents:
    def __init__(self, content: aiohttp.StreamReader) -> None:
        self._content = content
        self._translator = ResponsesToChatStream()
        self._buffer = b""
        self._failed = False

    async def readany(self) -> bytes:
        while True:
            chunk = await self._content.readany()
            if not chunk:
                rest, self._buffer = self._buffer, b""
                return self._event(rest) if rest.strip() else b""
            events = (self._buffer + chunk.replace(b"\r\n", b"\n")).split(b"\n\n")
            self._buffer = events.pop()
            out = b"".join(self._event(event) for event in events)
            if out:
                return out

    async def iter_any(self) -> AsyncIterator[bytes]:
        while True:
            out = await self.readany()
            if not out:
                return
            yield out

    def _event(self, event: bytes) -> bytes:
        data = data_of(event)
        if data is None or self._failed:
            return b""
        try:
            payload = json.loads(data)
        except ValueError:
            return b"data: " + data + b"\n\n"  # not JSON: the relay calls it malformed
        if not isinstance(payload, dict):
            return b""
        out = self._translator.feed(payload)
        self._failed = out.startswith(b'data: {"error"')
        return out


class ResponsesResponse:
    def __init__(self, response: aiohttp.ClientResponse, stream: bool) -> None:
        self._response = response
        self.status = response.status
        self.headers = response.headers
        ok = response.status < 400
        self.content: Any = _ChatEvents(response.content) if stream and ok else response.content

    async def read(self) -> bytes:
        raw = await self._response.read()
        payload = json_object(raw)
        if self.status >= 400 or payload is None or payload.get("object") != "response":
            return raw  # an error in OpenAI's shape already, or malformed
        return json.dumps(response_to_completion(payload)).encode()

    def release(self) -> None:
        self._response.release()

    def close(self) -> None:
        self._response.close()
