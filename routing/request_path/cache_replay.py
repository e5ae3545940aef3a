"""A cached chat completion replayed as a chat stream (a streaming request that hits the
response cache): the chunks an upstream would have sent for that answer, whole, at once,
through the client protocol's translator when it has one."""

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from routing.request_path.payloads import ClientRequest
from routing.request_path.protocols import StreamTranslator


def replay_chunks(payload: dict[str, Any], *, usage: bool) -> Iterator[dict[str, Any]]:
    """Per choice, one chunk with its whole message and one with its finish reason; then
    the usage chunk when asked for."""
    base = {
        "id": payload.get("id"),
        "object": "chat.completion.chunk",
        "created": payload.get("created"),
        "model": payload.get("model"),
    }
    finishes = []
    for choice in payload.get("choices") or ():
        index = choice.get("index", 0)
        message = choice.get("message") or {}
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("refusal"):
            delta["refusal"] = message["refusal"]
        if message.get("tool_calls"):
            delta["tool_calls"] = [
                {"index": i, **call} for i, call in enumerate(message["tool_calls"])
            ]
        yield {**base, "choices": [{"index": index, "delta": delta, "finish_reason": None}]}
        finishes.append({"index": index, "delta": {}, "finish_reason": choice.get("finish_reason")})
    for finish in finishes:
        yield {**base, "choices": [finish]}
    if usage and payload.get("usage") is not None:
        yield {**base, "choices": [], "usage": payload["usage"]}


async def replay(
    payload: dict[str, Any], request: ClientRequest, translator: StreamTranslator | None
) -> AsyncIterator[bytes]:
    chunks = replay_chunks(payload, usage=request.wants_usage)
    if translator is None:
        for chunk in chunks:
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"
        return
    for chunk in chunks:
        out = translator.feed(chunk)
        if out:
            yield out
    tail = translator.end()
    if tail:
        yield tail
