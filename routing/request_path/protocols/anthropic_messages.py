"""Anthropic's Messages API ↔ OpenAI's chat completions, both ways, streaming included.

Pure functions and small stream translators, used on both sides of the request path:
a client speaking Messages (`/v1/messages`, `ANTHROPIC` below) and an upstream of kind
`anthropic` (routing/request_path/protocols/anthropic_upstream.py). What has no faithful counterpart
on the other side is refused with a 400 naming the field (`Untranslatable`), never dropped.
"""

import json
import time
from typing import Any

from core.errors import GatewayError, bad_request
from routing.request_path.classify import mentions_capacity
from routing.request_path.payloads import (
    ClientRequest,
    Endpoint,
    load_body,
    native_request,
    parse_body,
)
from routing.request_path.protocols import ClientProtocol, Degrade
from routing.request_path.protocols.chat_chunks import ChatChunks

API_VERSION = "2023-06-01"
# A chat request need not say how long the answer may be; a Messages request must.
DEFAULT_MAX_TOKENS = 4096

STOP_TO_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "pause_turn": "stop",
}
FINISH_TO_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
# HTTP status → Anthropic's error type (its documented set).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def untranslatable(param: str, why: str) -> GatewayError:
    return bad_request(f"'{param}' cannot be translated faithfully: {why}.", param=param)


def _json_arguments(text: Any, param: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError):
        raise untranslatable(param, "a tool call's arguments must be a JSON object") from None
    if not isinstance(value, dict):
        raise untranslatable(param, "a tool call's arguments must be a JSON object")
    return value


# --- requests: Messages → chat (a client speaking Messages) ------------------------------

_MESSAGES_FIELDS = {
    "model",
    "messages",
    "system",
    "max_tokens",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "metadata",
    "tools",
    "tool_choice",
}


def _text_of(block: dict[str, Any], param: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise bad_request(f"'{param}.text' must be a string.", param=f"{param}.text")
    return text


def _image_part(source: Any, param: str) -> dict[str, Any]:
    if not isinstance(source, dict):
        raise bad_request(f"'{param}.source' must be an object.", param=f"{param}.source")
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise untranslatable(f"{param}.source", "only base64 and url images are translated")
    return {"type": "image_url", "image_url": {"url": url}}


ERROR_MARKER = "[tool error] "  # what a failed tool's result says on a chat upstream
# A thinking budget → the nearest reasoning effort (Anthropic's minimum budget is 1,024).
_BUDGET_EFFORT = ((4096, "low"), (16384, "medium"))
_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "max": "high"}


def _user_turn(content: Any, param: str, degrade: Degrade) -> list[dict[str, Any]]:
    """One Messages user turn → chat messages: its tool results first (one `tool` message
    each, as chat wants them right after the assistant's calls), then the rest."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    if not isinstance(content, list):
        raise bad_request(f"'{param}' must be a string or an array.", param=param)
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        where = f"{param}[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": _text_of(block, where)})
        elif kind == "image":
            parts.append(_image_part(block.get("source"), where))
        elif kind == "tool_result":
            text = _tool_result_text(block.get("content"), f"{where}.content", degrade)
            if block.get("is_error"):
                degrade.note(f"{where}.is_error", f"sent as the tool text marked {ERROR_MARKER!r}")
                text = _mark_error(text)
            tools.append(
                {
                    "role": "tool",
                    "tool_call_id": str(block.get("tool_use_id") or ""),
                    "content": text,
                }
            )
        else:
            degrade.note(where, f"a {kind!r} block has no chat equivalent: not sent on")
    return tools + ([{"role": "user", "content": parts}] if parts else [])


def _mark_error(text: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if isinstance(text, str):
        return ERROR_MARKER + text
    return [{"type": "text", "text": ERROR_MARKER.strip()}, *text]


def _tool_result_text(content: Any, param: str, degrade: Degrade) -> str | list[dict[str, Any]]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"'{param}' must be a string or an array.", param=param)
    parts = []
    for j, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else None
            degrade.note(f"{param}[{j}]", f"a chat tool result holds text only: {kind!r} dropped")
            continue
        parts.append({"type": "text", "text": _text_of(block, f"{param}[{j}]")})
    return parts


def _assistant_turn(content: Any, param: str, degrade: Degrade) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    if not isinstance(content, list):
        raise bad_request(f"'{param}' must be a string or an array.", param=param)
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        where = f"{param}[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if calls:
                degrade.note(where, "text after a tool call: sent before the calls")
            texts.append({"type": "text", "text": _text_of(block, where)})
        elif kind == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id") or ""),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name") or ""),
                        "arguments": json.dumps(block.get("input") or {}),
                    },
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            degrade.note(where, "earlier thinking is not sent to a chat model")
        else:
            degrade.note(where, f"a {kind!r} block has no chat equivalent: not sent on")
    message: dict[str, Any] = {"role": "assistant", "content": texts or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _system_text(system: Any, param: str, degrade: Degrade) -> str:
    if isinstance(system, str):
        return system
    if not isinstance(system, list):
        raise bad_request(f"'{param}' must be a string or an array.", param=param)
    texts = []
    for j, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            degrade.note(f"{param}[{j}]", "a system prompt holds text only: dropped")
            continue
        texts.append(_text_of(block, f"{param}[{j}]"))
    return "\n\n".join(texts)


def _tool_choice_to_chat(choice: Any, chat: dict[str, Any]) -> None:
    if not isinstance(choice, dict):
        raise bad_request("'tool_choice' must be an object.", param="tool_choice")
    kind = choice.get("type")
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool":
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    else:
        raise bad_request(f"Unknown tool_choice type {kind!r}.", param="tool_choice.type")
    if choice.get("disable_parallel_tool_use"):
        chat["parallel_tool_calls"] = False


def _reasoning(body: dict[str, Any], chat: dict[str, Any], degrade: Degrade) -> None:
    """`thinking` and `output_config.effort` → chat's `reasoning_effort`, or dropped."""
    config = body.get("output_config")
    effort = config.get("effort") if isinstance(config, dict) else None
    thinking = body.get("thinking")
    if effort is not None:
        if effort not in _EFFORTS:
            raise bad_request(f"Unknown effort {effort!r}.", param="output_config.effort")
        chat["reasoning_effort"] = _EFFORTS[effort]
        degrade.note("output_config.effort", f"sent as reasoning_effort={_EFFORTS[effort]}")
    if thinking is None:
        return
    if not isinstance(thinking, dict):
        raise bad_request("'thinking' must be an object.", param="thinking")
    budget = thinking.get("budget_tokens")
    if thinking.get("type") == "enabled" and isinstance(budget, int) and effort is None:
        level = next((name for top, name in _BUDGET_EFFORT if budget < top), "high")
        chat["reasoning_effort"] = level
        degrade.note("thinking", f"sent as reasoning_effort={level}")
    elif thinking.get("type") != "disabled":
        degrade.note("thinking", "no chat equivalent: not sent on")


def _output_format(config: Any, chat: dict[str, Any], degrade: Degrade) -> None:
    """`output_config.format` (a JSON schema) → chat's `response_format`."""
    if not isinstance(config, dict):
        if config is not None:
            raise bad_request("'output_config' must be an object.", param="output_config")
        return
    fmt = config.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = {"name": "output", "schema": fmt.get("schema") or {"type": "object"}}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif fmt is not None:
        degrade.note("output_config.format", "only a json_schema format is translated")
    for name in sorted(set(config) - {"format", "effort"}):
        degrade.note(f"output_config.{name}", "no chat equivalent: not sent on")


def messages_request_to_chat(
    body: dict[str, Any], degrade: Degrade | None = None
) -> dict[str, Any]:
    """A Messages request body → a chat-completions request body (same model name); what
    chat has no equivalent for is degraded by the rules in docs/agents.md."""
    degrade = degrade or Degrade()
    for name in body:
        if name not in _MESSAGES_FIELDS and name not in ("thinking", "output_config"):
            degrade.note(name, "no chat equivalent: not sent on")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array.", param="messages")
    chat: dict[str, Any] = {"model": body.get("model")}
    out: list[dict[str, Any]] = []
    if body.get("system") is not None:
        out.append({"role": "system", "content": _system_text(body["system"], "system", degrade)})
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            out.extend(_user_turn(message.get("content"), f"{where}.content", degrade))
        elif role == "assistant":
            out.append(_assistant_turn(message.get("content"), f"{where}.content", degrade))
        elif role == "system":
            degrade.note(where, "kept in order as a chat system message")
            text = _system_text(message.get("content"), f"{where}.content", degrade)
            out.append({"role": "system", "content": text})
        else:
            raise bad_request(
                f"'{where}.role' must be 'user', 'assistant' or 'system'.", param=where
            )
    chat["messages"] = out
    if "max_tokens" not in body:
        raise bad_request("You must provide 'max_tokens'.", param="max_tokens")
    chat["max_tokens"] = body["max_tokens"]
    for name in ("temperature", "top_p", "stream"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("stop_sequences") is not None:
        chat["stop"] = body["stop_sequences"]
    metadata = body.get("metadata")
    if metadata:
        if not isinstance(metadata, dict):
            raise bad_request("'metadata' must be an object.", param="metadata")
        for name in sorted(set(metadata) - {"user_id"}):
            degrade.note(f"metadata.{name}", "no chat equivalent: not sent on")
        if metadata.get("user_id") is not None:
            chat["user"] = metadata["user_id"]
    _reasoning(body, chat, degrade)
    _output_format(body.get("output_config"), chat, degrade)
    if body.get("tools") is not None:
        if not isinstance(body["tools"], list):
            raise bad_request("'tools' must be an array.", param="tools")
        tools = [_tool_to_chat(t, f"tools[{i}]", degrade) for i, t in enumerate(body["tools"])]
        if any(tools):
            chat["tools"] = [t for t in tools if t]
    if body.get("tool_choice") is not None and chat.get("tools"):
        _tool_choice_to_chat(body["tool_choice"], chat)
    return chat


def _tool_to_chat(tool: Any, param: str, degrade: Degrade) -> dict[str, Any] | None:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise bad_request(f"'{param}' must be an object with a string 'name'.", param=param)
    if tool.get("type") not in (None, "custom"):
        degrade.note(param, f"a server tool ({tool['type']}) is not offered to a chat model")
        return None
    for name in sorted(
        set(tool) - {"name", "description", "input_schema", "type", "cache_control"}
    ):
        degrade.note(f"{param}.{name}", "no such field in a chat tool: not sent on")
    function: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    function["parameters"] = tool.get("input_schema") or {"type": "object"}
    return {"type": "function", "function": function}


# --- requests: chat → Messages (an upstream of kind `anthropic`) --------------------------

# Chat parameters Messages has no counterpart for: refused unless left at their default.
_CHAT_DEFAULTS: dict[str, Any] = {
    "n": 1,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "logprobs": False,
    "logit_bias": {},
    "store": False,
    "metadata": {},
}
_CHAT_FIELDS = {
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "stream",
    "stream_options",
    "user",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    *_CHAT_DEFAULTS,
}


def _content_blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if content is None:
        return []
    if not isinstance(content, list):
        raise bad_request(f"'{param}' must be a string or an array.", param=param)
    blocks = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.append({"type": "text", "text": _text_of(part, where)})
        elif kind == "image_url":
            blocks.append(_image_block(part.get("image_url"), where))
        else:
            raise untranslatable(where, f"content parts of type {kind!r} are not translated")
    return blocks


def _image_block(image: Any, param: str) -> dict[str, Any]:
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str):
        raise bad_request(f"'{param}.image_url.url' must be a string.", param=param)
    if isinstance(image, dict) and image.get("detail") not in (None, "auto"):
        raise untranslatable(f"{param}.image_url.detail", "Messages has no image detail")
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        media_type, _, encoding = head[5:].partition(";")
        if encoding != "base64":
            raise untranslatable(f"{param}.image_url.url", "only base64 data URLs are translated")
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Messages alternates user and assistant: consecutive turns of one role merge."""
    if out and out[-1]["role"] == role:
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": role, "content": blocks})


def chat_request_to_messages(
    body: dict[str, Any], model: str | None = None, degrade: Degrade | None = None
) -> dict[str, Any]:
    """A chat-completions request body → a Messages request body; what Messages has no
    equivalent for is degraded (docs/agents.md)."""
    degrade = degrade or Degrade()
    for name, value in body.items():
        if name == "reasoning_effort":
            degrade.note(name, "no Messages equivalent without a thinking budget: not sent on")
        elif name == "response_format" and value not in (None, {"type": "text"}):
            degrade.note(name, "Messages has no response format: not sent on")
        elif (name not in _CHAT_FIELDS and name != "response_format") or (
            name in _CHAT_DEFAULTS and value is not None and value != _CHAT_DEFAULTS[name]
        ):
            degrade.note(name, "Anthropic's Messages API has no such parameter: not sent on")
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for i, message in enumerate(body.get("messages") or ()):
        where = f"messages[{i}]"
        role = message.get("role")
        extra = set(message) - {"role", "content", "tool_calls", "tool_call_id", "refusal"}
        for name in sorted(extra):
            degrade.note(f"{where}.{name}", "no such field in Messages: not sent on")
        if role in ("system", "developer"):
            texts = [b["text"] for b in _content_blocks(message.get("content"), where)]
            if out:
                degrade.note(where, "kept in order as a user turn marked <system>")
                marked = "<system>\n" + "\n\n".join(texts) + "\n</system>"
                _append(out, "user", [{"type": "text", "text": marked}])
            else:
                system.extend(texts)
        elif role == "user":
            blocks = _content_blocks(message.get("content"), f"{where}.content")
            _append(out, "user", blocks)
        elif role == "assistant":
            blocks = _content_blocks(message.get("content"), f"{where}.content")
            for j, call in enumerate(message.get("tool_calls") or ()):
                function = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id"),
                        "name": function.get("name"),
                        "input": _json_arguments(
                            function.get("arguments"), f"{where}.tool_calls[{j}]"
                        ),
                    }
                )
            _append(out, "assistant", blocks)
        elif role == "tool":
            content = message.get("content")
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id"),
                "content": content
                if isinstance(content, str)
                else _content_blocks(content, f"{where}.content"),
            }
            _append(out, "user", [result])
        else:
            raise untranslatable(f"{where}.role", f"the role {role!r} has no counterpart")
    messages: dict[str, Any] = {"model": model or body.get("model"), "messages": out}
    if system:
        messages["system"] = "\n\n".join(system)
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    messages["max_tokens"] = limit or DEFAULT_MAX_TOKENS
    temperature = body.get("temperature")
    if temperature is not None:
        if temperature > 1:
            degrade.note("temperature", "Messages takes 0 to 1: sent as 1")
        messages["temperature"] = min(temperature, 1)
    if body.get("top_p") is not None:
        messages["top_p"] = body["top_p"]
    stop = body.get("stop")
    if stop is not None:
        messages["stop_sequences"] = [stop] if isinstance(stop, str) else stop
    if body.get("stream"):
        messages["stream"] = True
    if body.get("user") is not None:
        messages["metadata"] = {"user_id": body["user"]}
    if body.get("tools") is not None:
        messages["tools"] = [
            _tool_to_messages(t, f"tools[{i}]", degrade) for i, t in enumerate(body["tools"])
        ]
    choice = _tool_choice_to_messages(body.get("tool_choice"))
    if body.get("parallel_tool_calls") is False:
        choice = (choice or {"type": "auto"}) | {"disable_parallel_tool_use": True}
    if choice is not None:
        messages["tool_choice"] = choice
    return messages


def _tool_to_messages(tool: Any, param: str, degrade: Degrade) -> dict[str, Any]:
    function = tool.get("function") if isinstance(tool, dict) else None
    if (
        not isinstance(tool, dict)
        or tool.get("type") != "function"
        or not isinstance(function, dict)
    ):
        raise untranslatable(param, "only function tools are translated")
    if function.get("strict"):
        degrade.note(f"{param}.function.strict", "Messages has no strict schemas: not sent on")
    out: dict[str, Any] = {"name": function.get("name")}
    if function.get("description") is not None:
        out["description"] = function["description"]
    out["input_schema"] = function.get("parameters") or {"type": "object"}
    return out


def _tool_choice_to_messages(choice: Any) -> dict[str, Any] | None:
    if choice is None:
        return None
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "tool", "name": (choice.get("function") or {}).get("name")}
    raise untranslatable("tool_choice", f"{choice!r} has no counterpart")


# --- answers -----------------------------------------------------------------------------


def usage_to_chat(usage: Any) -> dict[str, Any]:
    """Messages usage → chat usage: `input_tokens` leaves out the cached part, chat's
    `prompt_tokens` holds it all (so quotas and cost count every token read)."""
    usage = usage if isinstance(usage, dict) else {}
    fresh = _int(usage.get("input_tokens"))
    written = _int(usage.get("cache_creation_input_tokens"))
    read = _int(usage.get("cache_read_input_tokens"))
    prompt, completion = fresh + written + read, _int(usage.get("output_tokens"))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": read},
    }


def usage_to_messages(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return {
        "input_tokens": max(0, _int(usage.get("prompt_tokens")) - cached),
        "output_tokens": _int(usage.get("completion_tokens")),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def message_response_to_chat(payload: dict[str, Any]) -> dict[str, Any]:
    """A Messages answer → a chat completion."""
    texts, calls = [], []
    for block in payload.get("content") or ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {
                        "name": block.get("name"),
                        "arguments": json.dumps(block.get("input") or {}),
                    },
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": payload.get("id"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": payload.get("model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": STOP_TO_FINISH.get(payload.get("stop_reason") or "", "stop"),
                "logprobs": None,
            }
        ],
        "usage": usage_to_chat(payload.get("usage")),
    }


def chat_response_to_message(payload: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    """A chat completion → a Messages answer (its first choice: Messages clients ask one)."""
    choices = payload.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    text = message.get("content")
    if isinstance(text, list):
        text = "".join(str(p.get("text") or "") for p in text if isinstance(p, dict))
    if text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = None
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                # A model's arguments that are not a JSON object cannot be a tool_use input:
                # kept as text rather than lost.
                "input": arguments
                if isinstance(arguments, dict)
                else {"arguments": function.get("arguments")},
            }
        )
    return {
        "id": _message_id(payload.get("id")),
        "type": "message",
        "role": "assistant",
        "model": model or payload.get("model"),
        "content": content,
        "stop_reason": FINISH_TO_STOP.get(choice.get("finish_reason") or "", "end_turn"),
        "stop_sequence": None,
        "usage": usage_to_messages(payload.get("usage")),
    }


def _message_id(chat_id: Any) -> str:
    text = str(chat_id or "")
    return text if text.startswith("msg_") else f"msg_{text.removeprefix('chatcmpl-')}"


# --- errors ------------------------------------------------------------------------------


def error_to_messages(status: int, body: bytes) -> bytes:
    """An error in OpenAI's shape → Anthropic's `{"type":"error","error":{type,message}}`."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    message = (
        str(error.get("message", "")) if isinstance(error, dict) else body.decode(errors="replace")
    )
    kind = _ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def error_to_chat(status: int, body: bytes) -> bytes:
    """An Anthropic error body → OpenAI's shape; the type kept as the code, so a capacity
    error still reads `overloaded_error`."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    if not isinstance(error, dict):
        return body
    kind = str(error.get("type") or "")
    openai_type = "invalid_request_error" if status < 500 else "server_error"
    if status == 429:
        openai_type = "requests"
    payload = {
        "message": str(error.get("message", "")),
        "type": openai_type,
        "code": kind,
        "param": None,
    }
    return json.dumps({"error": payload}).encode()


# --- the client protocol -----------------------------------------------------------------


class AnthropicMessages(ClientProtocol):
    """`POST /v1/messages`: Anthropic's shape in, Anthropic's shape out."""

    name = "anthropic"
    kind = "anthropic"
    endpoint = "messages"
    translates = True

    def parse(self, endpoint: Endpoint, raw: bytes) -> ClientRequest:
        return native_request(self.kind, raw, load_body(raw), "messages")

    def translate(self, request: ClientRequest, degrade: Degrade) -> None:
        chat = parse_body(Endpoint.CHAT, messages_request_to_chat(request.body, degrade))
        request.body, request.translated = chat.body, True
        request.degraded = degrade.notes

    def answer(self, payload: dict[str, Any], request: ClientRequest) -> bytes:
        return json.dumps(chat_response_to_message(payload, request.model)).encode()

    def stream(self, request: ClientRequest) -> "ChatToMessagesStream":
        return ChatToMessagesStream(request.model)

    def error(self, status: int, body: bytes) -> bytes:
        return error_to_messages(status, body)


ANTHROPIC = AnthropicMessages()


def sse(event: str, data: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"


class ChatToMessagesStream:
    """Chat stream chunks → Messages stream events, one content block at a time."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.started = False
        self.failed = False
        self.block: int = -1  # index of the open content block (-1: none)
        self.block_kind = ""
        self.tool_blocks: dict[int, int] = {}  # chat tool call index → block index
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None

    def _start(self, chunk: dict[str, Any]) -> bytes:
        self.started = True
        message: dict[str, Any] = {
            "id": _message_id(chunk.get("id")),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return sse("message_start", {"type": "message_start", "message": message})

    def _open(self, kind: str, block: dict[str, Any]) -> bytes:
        out = self._close()
        self.block += 1
        self.block_kind = kind
        start = {"type": "content_block_start", "index": self.block, "content_block": block}
        return out + sse("content_block_start", start)

    def _close(self) -> bytes:
        if not self.block_kind:
            return b""
        self.block_kind = ""
        return sse("content_block_stop", {"type": "content_block_stop", "index": self.block})

    def feed(self, event: dict[str, Any]) -> bytes:
        if self.failed:
            return b""
        if isinstance(event.get("error"), dict):
            self.failed = True
            status = 529 if mentions_capacity(json.dumps(event["error"])) else 500
            body = error_to_messages(status, json.dumps(event).encode())
            return sse("error", json.loads(body))
        out = b"" if self.started else self._start(event)
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        for choice in event.get("choices") or ():
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                if self.block_kind != "text":
                    out += self._open("text", {"type": "text", "text": ""})
                delta_event = {"type": "text_delta", "text": text}
                out += sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": self.block, "delta": delta_event},
                )
            for call in delta.get("tool_calls") or ():
                out += self._tool_delta(call)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return out

    def _tool_delta(self, call: dict[str, Any]) -> bytes:
        out = b""
        index = call.get("index", 0)
        function = call.get("function") or {}
        if index not in self.tool_blocks:
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": {},
            }
            out += self._open("tool_use", block)
            self.tool_blocks[index] = self.block
        arguments = function.get("arguments")
        if arguments:
            delta = {"type": "input_json_delta", "partial_json": arguments}
            out += sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": self.tool_blocks[index], "delta": delta},
            )
        return out

    def end(self) -> bytes:
        if self.failed:
            return b""
        out = b"" if self.started else self._start({})
        out += self._close()
        usage = usage_to_messages(self.usage)
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": FINISH_TO_STOP.get(self.finish or "", "end_turn"),
                "stop_sequence": None,
            },
            "usage": usage,
        }
        return out + sse("message_delta", delta) + sse("message_stop", {"type": "message_stop"})


class MessagesToChatStream(ChatChunks):
    """Messages stream events (parsed `data:` objects) → chat stream chunks (bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.usage: dict[str, Any] = {}
        self.tools: dict[int, int] = {}  # block index → chat tool call index
        self.done = False

    def feed(self, event: dict[str, Any]) -> bytes:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self.id = str(message.get("id") or "")
            self.model = str(message.get("model") or "")
            self.usage.update(message.get("usage") or {})
            return self._delta({"role": "assistant", "content": ""})
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                index = self.tools[event.get("index", 0)] = len(self.tools)
                call = {
                    "index": index,
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": ""},
                }
                return self._delta({"tool_calls": [call]})
            if block.get("type") == "text" and block.get("text"):
                return self._delta({"content": block["text"]})
            return b""
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                return self._delta({"content": delta.get("text", "")})
            if delta.get("type") == "input_json_delta":
                call = {
                    "index": self.tools.get(event.get("index", 0), 0),
                    "function": {"arguments": delta.get("partial_json", "")},
                }
                return self._delta({"tool_calls": [call]})
            return b""  # thinking and signatures: never asked for
        if kind == "message_delta":
            self.usage.update(
                {k: v for k, v in (event.get("usage") or {}).items() if v is not None}
            )
            stop = (event.get("delta") or {}).get("stop_reason")
            return self._delta({}, STOP_TO_FINISH.get(stop or "", "stop")) if stop else b""
        if kind == "message_stop":
            self.done = True
            return self._chunk([], usage=usage_to_chat(self.usage)) + b"data: [DONE]\n\n"
        if kind == "error":
            error = event.get("error") or {}
            body = {
                "message": str(error.get("message", "")),
                "type": "server_error",
                "code": str(error.get("type") or ""),
                "param": None,
            }
            return b"data: " + json.dumps({"error": body}).encode() + b"\n\n"
        return b""  # ping, and event types added later
