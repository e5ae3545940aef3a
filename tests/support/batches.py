"""Batch API input files for the end-to-end tests: JSONL lines and their upload."""

import json
import uuid
from pathlib import Path
from typing import Any

from openai import OpenAI


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def chat_lines(n: int, model: str = "fast", prefix: str = "req") -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"{prefix}-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": f"line {i}"}]},
        }
        for i in range(n)
    ]


def upload(client: OpenAI, lines: list[dict[str, Any]], tmp_path: Path) -> str:
    path = tmp_path / f"{uuid.uuid4().hex[:6]}.jsonl"
    path.write_bytes(jsonl(lines))
    with path.open("rb") as f:
        return client.files.create(file=f, purpose="batch").id
