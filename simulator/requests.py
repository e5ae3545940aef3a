"""A model request read and checked before admission: what to answer (the plan), or a 400."""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.wire import json_bytes

MAX_CHOICES = 128  # OpenAI's own limit for `n`; also stops a request from asking for 10^9 choices


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(slots=True)
class Plan:
    """What to answer, decided (and validated) before admission."""

    kind: str  # "chat" | "completion" | "embedding"
    prompt_tokens: int
    tokens: int = 0  # completion tokens per choice
    choices: int = 1
    stream: bool = False
    include_usage: bool = False
    inputs: list[bytes] = field(default_factory=list)  # embeddings: one entry per input
    base64: bool = False


def text_tokens(text: str) -> int:
    return len(text) // 4


def opt_int(req: dict, name: str, minimum: int, maximum: int | None = None) -> int | None:
    value = req.get(name)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        bound = f" and <= {maximum}" if maximum is not None else ""
        raise BadRequest(f"'{name}' must be an integer >= {minimum}{bound}", name)
    return value


def completion_tokens(req: dict, output_tokens: int) -> int:
    limit = opt_int(req, "max_completion_tokens", 0)
    if limit is None:
        limit = opt_int(req, "max_tokens", 0)
    out = output_tokens
    return out if limit is None else min(limit, out)


def stream_flags(req: dict) -> tuple[bool, bool]:
    stream = req.get("stream") is True
    options = req.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    return stream, stream and include_usage


def plan_chat(req: dict, output_tokens: int) -> Plan:
    messages = req.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array", "messages")
    chars = 0
    for message in messages:
        if not isinstance(message, dict):
            raise BadRequest("each message must be an object", "messages")
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(text := part.get("text"), str):
                    chars += len(text)
    stream, include_usage = stream_flags(req)
    return Plan(
        kind="chat",
        prompt_tokens=chars // 4 + len(messages),
        tokens=completion_tokens(req, output_tokens),
        choices=opt_int(req, "n", 1, MAX_CHOICES) or 1,
        stream=stream,
        include_usage=include_usage,
    )


def plan_completion(req: dict, output_tokens: int) -> Plan:
    prompt = req.get("prompt")
    if isinstance(prompt, str):
        prompts, prompt_tokens = 1, text_tokens(prompt) + 1
    elif isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        prompts, prompt_tokens = 1, len(prompt)  # a single prompt given as token ids
    elif isinstance(prompt, list) and prompt:
        prompts, prompt_tokens = len(prompt), 0
        for p in prompt:
            if isinstance(p, str):
                prompt_tokens += text_tokens(p) + 1
            elif isinstance(p, list):
                prompt_tokens += len(p)
            else:
                raise BadRequest("'prompt' must be a string or an array", "prompt")
    else:
        raise BadRequest("'prompt' must be a string or a non-empty array", "prompt")
    stream, include_usage = stream_flags(req)
    n = opt_int(req, "n", 1, MAX_CHOICES) or 1
    if n * prompts > MAX_CHOICES:
        raise BadRequest(f"at most {MAX_CHOICES} choices (prompts x n) per request", "n")
    return Plan(
        kind="completion",
        prompt_tokens=prompt_tokens,
        tokens=completion_tokens(req, output_tokens),
        choices=n * prompts,
        stream=stream,
        include_usage=include_usage,
    )


def plan_embedding(req: dict, output_tokens: int) -> Plan:
    value = req.get("input")
    if isinstance(value, str):
        items: list = [value]
    elif isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        items = [value]  # one input given as token ids
    elif isinstance(value, list) and value:
        items = value
    else:
        raise BadRequest("'input' must be a string or a non-empty array", "input")
    inputs: list[bytes] = []
    prompt_tokens = 0
    for item in items:
        if isinstance(item, str):
            prompt_tokens += text_tokens(item) + 1
            inputs.append(item.encode())
        elif isinstance(item, list):
            prompt_tokens += len(item)
            inputs.append(json_bytes(item))
        else:
            raise BadRequest("each input must be a string or an array of tokens", "input")
    fmt = req.get("encoding_format")
    if fmt not in (None, "float", "base64"):
        raise BadRequest("'encoding_format' must be 'float' or 'base64'", "encoding_format")
    return Plan(
        kind="embedding", prompt_tokens=prompt_tokens, inputs=inputs, base64=fmt == "base64"
    )
