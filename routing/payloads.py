"""Reading and checking a client's request body before anything is sent upstream.

Only the fields Sluice relies on, or that an upstream would reject with a less clear
message, are checked; everything else is passed through untouched, so new OpenAI
parameters work without a Sluice release.
"""

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from core.errors import bad_request


class Endpoint(StrEnum):
    CHAT = "chat/completions"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"


@dataclass
class ClientRequest:
    endpoint: Endpoint
    body: dict[str, Any]
    model: str
    stream: bool
    wants_usage: bool  # the client itself asked for the usage chunk of a stream


_NUMBER = (int, float)
# field -> (accepted types, readable name); bool is excluded from numbers below.
_COMMON_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "stream": ((bool,), "a boolean"),
    "stream_options": ((dict,), "an object"),
    "max_tokens": ((int,), "an integer"),
    "max_completion_tokens": ((int,), "an integer"),
    "n": ((int,), "an integer"),
    "temperature": (_NUMBER, "a number"),
    "top_p": (_NUMBER, "a number"),
    "presence_penalty": (_NUMBER, "a number"),
    "frequency_penalty": (_NUMBER, "a number"),
    "seed": ((int,), "an integer"),
    "stop": ((str, list), "a string or an array of strings"),
    "user": ((str,), "a string"),
    "logit_bias": ((dict,), "an object"),
    "metadata": ((dict,), "an object"),
}
_POSITIVE = {"max_tokens", "max_completion_tokens", "n"}


def parse_request(endpoint: Endpoint, raw: bytes) -> ClientRequest:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")

    model = body.get("model")
    if model is None:
        raise bad_request("You must provide a model parameter.", param="model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' must be a non-empty string.", param="model")

    for name, value in body.items():
        spec = _COMMON_FIELDS.get(name)
        if spec is None or value is None:
            continue
        types, readable = spec
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise bad_request(f"'{name}' must be {readable}.", param=name)
        if name in _POSITIVE and value < 1:
            raise bad_request(f"'{name}' must be at least 1.", param=name)
    stop = body.get("stop")
    if isinstance(stop, list) and not all(isinstance(s, str) for s in stop):
        raise bad_request("'stop' must be a string or an array of strings.", param="stop")

    _check_endpoint_fields(endpoint, body)
    stream = bool(body.get("stream"))
    if endpoint is Endpoint.EMBEDDINGS and stream:
        raise bad_request("Embeddings cannot be streamed.", param="stream")
    options = body.get("stream_options") or {}
    if options and not stream:
        raise bad_request(
            "'stream_options' is only allowed when 'stream' is true.", param="stream_options"
        )
    wants_usage = options.get("include_usage") is True
    return ClientRequest(endpoint, body, model, stream, wants_usage)


def _check_endpoint_fields(endpoint: Endpoint, body: dict[str, Any]) -> None:
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if messages is None:
            raise bad_request("You must provide 'messages'.", param="messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("'messages' must be a non-empty array.", param="messages")
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise bad_request(
                    f"'messages[{i}]' must be an object with a string 'role'.",
                    param=f"messages[{i}]",
                )
    elif endpoint is Endpoint.COMPLETIONS:
        _require_text_or_list(body, "prompt")
    else:
        _require_text_or_list(body, "input")


def _require_text_or_list(body: dict[str, Any], field: str) -> None:
    value = body.get(field)
    if value is None:
        raise bad_request(f"You must provide '{field}'.", param=field)
    if not isinstance(value, str | list) or (isinstance(value, list) and not value):
        raise bad_request(f"'{field}' must be a string or a non-empty array.", param=field)


def upstream_body(request: ClientRequest, upstream_model: str) -> bytes:
    """The body to send a deployment: its own model name, and usage always asked for on
    streams so tokens are known even when the client did not ask."""
    body = dict(request.body, model=upstream_model)
    if request.stream:
        body["stream_options"] = {
            **(request.body.get("stream_options") or {}),
            "include_usage": True,
        }
    return json.dumps(body, separators=(",", ":")).encode()
