"""Reading and checking a client's request body before anything is sent upstream.

Only the fields Sluice relies on, or that an upstream would reject with a less clear
message, are checked; everything else is passed through untouched, so new OpenAI
parameters work without a Sluice release.
"""

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core import fast_json
from core.errors import bad_request


class Endpoint(StrEnum):
    CHAT = "chat/completions"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"


@dataclass
class NativeBody:
    """A client's body in its own protocol, sent as it came to a deployment whose kind
    speaks that protocol (routing/request_path/protocols/native.py): only the top-level fields in
    `overrides` (the deployment's model name, a clamped token ceiling) are rewritten."""

    kind: str  # the upstream kind that takes it untouched: "anthropic", "openai-responses"
    raw: bytes
    overrides: dict[str, Any] = field(default_factory=dict)
    # Top-level fields as json.loads reads them (the last of a repeated key): the model.
    read: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClientRequest:
    endpoint: Endpoint
    body: dict[str, Any]  # chat-completions shape, or the native body while untranslated
    model: str
    stream: bool
    wants_usage: bool  # the client itself asked for the usage chunk of a stream
    # The client's OpenAI account headers (OpenAI-Organization, …), for upstreams set to
    # receive them, and its anthropic-version / anthropic-beta, for a native Anthropic call.
    account_headers: dict[str, str] = field(default_factory=dict)
    # A Messages or Responses request: its own body, for deployments of its own kind.
    native: NativeBody | None = None
    translated: bool = False  # `body` holds the chat translation of `native`
    degraded: list[str] = field(default_factory=list)  # what the translation changed

    def passes_through(self, kind: str) -> bool:
        """A deployment of this kind takes the client's own body and answers in its shape."""
        return self.native is not None and self.native.kind == kind


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
# Upper bounds: far above what any upstream takes, low enough that the cost and token
# arithmetic never overflows (10**400 tokens would).
_MAX_INT = {"max_tokens": 2**31 - 1, "max_completion_tokens": 2**31 - 1, "n": 10_000}
_INT64 = 2**63
_MAX_NUMBER = 1e15  # temperature, penalties, …: anything finite, within reason
# Arrays of inputs: OpenAI's own limit for embeddings; prompts alike.
MAX_INPUTS = 2048


class _NonFinite(float):
    """A NaN or ±Infinity (Python's json reads them, JSON does not have them; a number too
    large for a float reads as Infinity): marks where it sits, to name the field."""


def _non_finite(text: str) -> float:
    raise _SawNonFinite


class _SawNonFinite(Exception):
    pass


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 reads as inf
        raise _SawNonFinite
    return value


def _marked(text: str) -> float:
    value = float(text.replace("Infinity", "inf"))
    return value if math.isfinite(value) else _NonFinite(value)


def _loads(raw: bytes) -> Any:
    try:
        try:
            # orjson where it reads as json does (finite numbers only, as the hooks below
            # insist); json with the hooks for whatever it refuses.
            return fast_json.loads_finite(raw)
        except ValueError:
            pass
        try:
            return json.loads(raw, parse_constant=_non_finite, parse_float=_number)
        except _SawNonFinite:
            # Rare: read again, marking them, to name the field in the refusal.
            body = json.loads(raw, parse_constant=_marked, parse_float=_marked)
            for name, value in body.items() if isinstance(body, dict) else ():
                if _find_non_finite(value):
                    raise bad_request(
                        f"'{name}' holds NaN or Infinity, which JSON does not allow.", param=name
                    ) from None
            raise bad_request("The request body holds NaN or Infinity.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"The request body is not valid JSON: {exc}.") from None
    except RecursionError:
        raise bad_request("The request body is nested too deeply.") from None
    except ValueError as exc:  # an integer of more than 4,300 digits, say
        raise bad_request(f"The request body has a number out of range: {exc}.") from None


def _find_non_finite(value: Any) -> bool:
    if isinstance(value, _NonFinite):
        return True
    if isinstance(value, dict):
        return any(_find_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_find_non_finite(v) for v in value)
    return False


def _unstorable(text: str) -> bool:
    """A lone surrogate (valid in JSON's \\u escapes, not in UTF-8) or a NUL."""
    if "\x00" in text:
        return True
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def parse_request(endpoint: Endpoint, raw: bytes) -> ClientRequest:
    return parse_body(endpoint, load_body(raw))


def load_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object (a clear 400 for anything else): what a client
    protocol reads before translating it (routing/request_path/protocols/)."""
    body = _loads(raw)
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    return body


def _model_of(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise bad_request("You must provide a model parameter.", param="model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' must be a non-empty string.", param="model")
    if _unstorable(model) or len(model) > 200:
        raise bad_request("'model' is not a valid model name.", param="model")
    return model


# What the request path reads of a native body besides the model (the rest is the
# upstream's to judge): the stream flag and the answer's token ceiling.
_NATIVE_FIELDS = {
    "stream": ((bool,), "a boolean"),
    "max_tokens": ((int,), "an integer"),
    "max_output_tokens": ((int,), "an integer"),
}


def native_request(kind: str, raw: bytes, body: dict[str, Any], required: str) -> ClientRequest:
    """A Messages or Responses body read for passthrough: its model, stream flag and token
    ceiling checked, `required` (messages, input) present; nothing else looked at."""
    model = _model_of(body)
    for name, (types, readable) in _NATIVE_FIELDS.items():
        value = body.get(name)
        if value is None:
            continue
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise bad_request(f"'{name}' must be {readable}.", param=name)
        if name != "stream" and value < 1:
            raise bad_request(f"'{name}' must be at least 1.", param=name)
        _check_range("max_tokens" if name != "stream" else name, value)
    if body.get(required) is None:
        raise bad_request(f"You must provide '{required}'.", param=required)
    stream = bool(body.get("stream"))
    native = NativeBody(kind, raw, read={"model": model})
    return ClientRequest(Endpoint.CHAT, body, model, stream, True, native=native)


def parse_body(endpoint: Endpoint, body: dict[str, Any]) -> ClientRequest:
    """Check a request body already read (and perhaps translated) as JSON."""
    model = _model_of(body)

    for name, value in body.items():
        spec = _COMMON_FIELDS.get(name)
        if spec is None or value is None:
            continue
        types, readable = spec
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise bad_request(f"'{name}' must be {readable}.", param=name)
        if name in _POSITIVE and value < 1:
            raise bad_request(f"'{name}' must be at least 1.", param=name)
        _check_range(name, value)
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


def _check_range(name: str, value: Any) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        top = _MAX_INT.get(name, _INT64 - 1)
        if not -_INT64 <= value <= top:
            raise bad_request(f"'{name}' is out of range (at most {top}).", param=name)
    elif isinstance(value, float) and abs(value) > _MAX_NUMBER:
        raise bad_request(f"'{name}' is out of range.", param=name)


def _check_endpoint_fields(endpoint: Endpoint, body: dict[str, Any]) -> None:
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if messages is None:
            raise bad_request("You must provide 'messages'.", param="messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("'messages' must be a non-empty array.", param="messages")
        if len(messages) > MAX_INPUTS * 16:
            raise bad_request(
                f"'messages' has more than {MAX_INPUTS * 16} items.", param="messages"
            )
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
    if isinstance(value, list) and len(value) > MAX_INPUTS:
        raise bad_request(f"'{field}' may hold at most {MAX_INPUTS} items.", param=field)


class UpstreamBody(bytes):
    """The chat body for a deployment of another kind (empty when the request was never
    translated), carrying the client's native body for a deployment of its own kind
    (routing/request_path/upstream.py picks one by the deployment's kind)."""

    native: NativeBody | None = None
    model: str = ""


def upstream_body(request: ClientRequest, upstream_model: str) -> bytes:
    """The body to send a deployment: its own model name, and usage always asked for on
    streams so tokens are known even when the client did not ask."""
    if request.native is not None:
        chat = _chat_body(request, upstream_model) if request.translated else b""
        out = UpstreamBody(chat)
        out.native, out.model = request.native, upstream_model
        return out
    return _chat_body(request, upstream_model)


def _chat_body(request: ClientRequest, upstream_model: str) -> bytes:
    body = dict(request.body, model=upstream_model)
    if request.stream:
        body["stream_options"] = {
            **(request.body.get("stream_options") or {}),
            "include_usage": True,
        }
    return fast_json.dumps(body)


def sniff_model(raw: bytes) -> tuple[str, bool]:
    """The model and stream flag of a body refused before it was read as a request (for
    the audit): whatever can be read, else ("", False)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return "", False
    if not isinstance(body, dict):
        return "", False
    model = body.get("model")
    name = model[:200] if isinstance(model, str) and not _unstorable(model) else ""
    return name, body.get("stream") is True
