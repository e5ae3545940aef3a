"""Chat-completions stream chunks, for the converters that turn another upstream kind's
stream into chat's (Messages → chat, Responses → chat): one chunk shape, one id, model and
creation time per stream."""

import json
import time
from typing import Any


class ChatChunks:
    """Writes the `data:` lines of one chat stream; a converter fills `id` and `model` from
    its upstream's first event."""

    def __init__(self) -> None:
        self.id = ""
        self.model = ""
        self.created = int(time.time())

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    def _delta(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return self._chunk([{"index": 0, "delta": delta, "finish_reason": finish}])
