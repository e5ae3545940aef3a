"""The answers the simulator sends: messages of its errors, and successful bodies encoded once
per shape as templates whose id, timestamp and usage are filled in per request."""

from __future__ import annotations

import itertools
import math
import os
import time
import zlib
from collections.abc import Callable
from typing import Any

from simulator.requests import Plan
from simulator.wire import DONE, json_bytes

EMBEDDING_DIM = 8

CAPACITY_MESSAGE = "Selected model is at capacity. Please try a different model."
RATE_LIMIT_MESSAGE = "Rate limit reached for requests (simulated). Please try again later."
CONTEXT_LENGTH_MESSAGE = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted in "
    "9000 tokens."
)
AUTH_MESSAGE = "Incorrect API key provided."
SERVER_ERROR_MESSAGE = "The server had an error while processing your request. Sorry about that!"
GARBAGE_BODY = b"<html>upstream proxy error</html>"

# Responses of one shape (kind, model, choices, tokens) differ only by id, timestamp and prompt
# usage: they are encoded once with these markers and filled in with bytes.replace.
# Control characters can't occur in a (validated, printable) model name or in the generated
# text, so the encoded markers (quotes included) can't collide with anything else.
MARK_ID_STR, MARK_TS_STR, MARK_PT_STR, MARK_TT_STR = "\x00id", "\x00ts", "\x00pt", "\x00tt"


MARK_ID, MARK_TS, MARK_PT, MARK_TT = (
    json_bytes(m) for m in (MARK_ID_STR, MARK_TS_STR, MARK_PT_STR, MARK_TT_STR)
)


def embedding_vector(data: bytes) -> list[float]:
    # Deterministic per input, unit length, cheap: 8 nibbles of a CRC.
    h = zlib.crc32(data)
    raw = [((h >> (4 * i)) & 0xF) - 7.5 for i in range(EMBEDDING_DIM)]
    norm = math.sqrt(sum(x * x for x in raw))
    return [round(x / norm, 6) for x in raw]


class Responses:
    """Templates of successful answers, and the ids that make each answer unique."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        run = os.urandom(3).hex().encode()  # ids stay unique across restarts
        self._chat_id_prefix = b"chatcmpl-sim-" + run
        self._cmpl_id_prefix = b"cmpl-sim-" + run
        self._templates: dict[tuple, Any] = {}

    def fill(self, template: bytes, plan: Plan, ids: tuple[bytes, bytes]) -> bytes:
        """Put this request's id, timestamp and usage into a cached template."""
        out = template.replace(MARK_ID, ids[0]).replace(MARK_TS, ids[1])
        if MARK_PT in out:
            completion = plan.tokens * plan.choices
            out = out.replace(MARK_PT, b"%d" % plan.prompt_tokens).replace(
                MARK_TT, b"%d" % (plan.prompt_tokens + completion)
            )
        return out

    def ids_for(self, chat: bool) -> tuple[bytes, bytes]:
        prefix = self._chat_id_prefix if chat else self._cmpl_id_prefix
        return b'"%s%08x"' % (prefix, next(self._ids)), b"%d" % time.time()

    def template(self, key: tuple, build: Callable[[], Any]) -> Any:
        template = self._templates.get(key)
        if template is None:
            if len(self._templates) >= 4096:  # odd n / max_tokens mixes: stay bounded
                self._templates.clear()
            template = self._templates[key] = build()
        return template

    def answer_template(self, plan: Plan, model: str) -> bytes:
        key = (plan.kind, model, plan.choices, plan.tokens)
        return self.template(key, lambda: self.build_answer(plan, model))

    def stream_templates(self, plan: Plan, model: str) -> tuple[bytes, bytes, bytes]:
        """(first, per-token, last) event blocks of this shape of streamed answer."""
        key = (plan.kind, model, plan.choices, plan.tokens, plan.include_usage)
        return self.template(key, lambda: self.build_stream(plan, model))

    def usage(self, plan: Plan) -> dict[str, Any]:
        # Markers (filled per request by _fill) instead of this request's numbers, so one
        # template serves every request with the same shape.
        return {
            "prompt_tokens": MARK_PT_STR,
            "completion_tokens": plan.tokens * plan.choices,
            "total_tokens": MARK_TT_STR,
        }

    def build_answer(self, plan: Plan, model: str) -> bytes:
        text = "tok " * plan.tokens
        if plan.kind == "chat":
            message = {"role": "assistant", "content": text, "refusal": None}
            choices: list[dict[str, Any]] = [
                {"index": i, "message": message, "logprobs": None, "finish_reason": "stop"}
                for i in range(plan.choices)
            ]
            extra: dict[str, Any] = {"system_fingerprint": None}
        else:
            choices = [
                {"text": text, "index": i, "logprobs": None, "finish_reason": "stop"}
                for i in range(plan.choices)
            ]
            extra = {}
        return json_bytes(
            {
                "id": MARK_ID_STR,
                "object": "chat.completion" if plan.kind == "chat" else "text_completion",
                "created": MARK_TS_STR,
                "model": model,
                "choices": choices,
                "usage": self.usage(plan),
                **extra,
            }
        )

    def build_stream(self, plan: Plan, model: str) -> tuple[bytes, bytes, bytes]:
        """(first, per-token, last) event blocks, with markers for id / created / usage."""
        chat = plan.kind == "chat"
        base: dict[str, Any] = {
            "id": MARK_ID_STR,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": MARK_TS_STR,
            "model": model,
        }
        if plan.include_usage:
            base["usage"] = None  # OpenAI sends an explicit null on every chunk but the last

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return b"data: " + json_bytes({**base, "choices": choices, **extra}) + b"\n\n"

        def per_choice(**fields: Any) -> bytes:
            # One event per choice index, like OpenAI does for n > 1.
            return b"".join(event([{"index": i, **fields}]) for i in range(plan.choices))

        if chat:
            first = per_choice(
                delta={"role": "assistant", "content": "", "refusal": None},
                logprobs=None,
                finish_reason=None,
            )
            token = per_choice(delta={"content": "tok "}, logprobs=None, finish_reason=None)
            last = per_choice(delta={}, logprobs=None, finish_reason="stop")
        else:
            first = b""
            token = per_choice(text="tok ", logprobs=None, finish_reason=None)
            last = per_choice(text="", logprobs=None, finish_reason="stop")
        if plan.include_usage:
            last += event([], usage=self.usage(plan))
        return first, token, last + DONE
