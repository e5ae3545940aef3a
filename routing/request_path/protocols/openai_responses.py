"""OpenAI's Responses API (`POST /v1/responses`) ↔ chat completions, for a Responses
client on a chain that crosses to chat (a Responses client on an `openai-responses`
deployment is passed through untouched: routing/request_path/protocols/native.py).

Requests: `input` (text or items: messages, `function_call`, `function_call_output`),
`instructions`, function tools, `tool_choice`, `text.format`, `reasoning.effort` and the
sampling fields become one chat request. Responses: a chat completion becomes a `response`
object (a message item and function-call items, usage, status); a chat stream becomes the
Responses stream events the official SDK reads. What chat has no equivalent for is degraded
by the documented rules (docs/agents.md: `include`, `reasoning.summary`, `client_metadata`
not sent on; namespace tools as their functions; built-in tools not offered); stored state
(`previous_response_id`, `conversation`, `background`) cannot cross and is refused with a
400 naming the field.

The inverse request translation (chat → Responses) is what an `openai-responses` upstream
is sent (routing/request_path/protocols/responses_upstream.py); the property tests also use it to
check that there and back keeps the meaning.
"""

import json
import time
from dataclasses import dataclass, field
from typing import Any

from core.errors import GatewayError, bad_request
from routing.request_path.payloads import (
    ClientRequest,
    Endpoint,
    load_body,
    native_request,
    parse_body,
)
from routing.request_path.protocols import ClientProtocol, Degrade


def untranslatable(param: str, why: str) -> GatewayError:
    return bad_request(f"'{param}' is not supported by Sluice's /v1/responses: {why}.", param=param)


# Fields with the same name and meaning on both sides.
_SAME = (
    "temperature",
    "top_p",
    "user",
    "seed",
    "service_tier",
    "parallel_tool_calls",
    "prompt_cache_key",
    "safety_identifier",
)
# Read here, kept on Sluice's side (echoed in the answer) or checked: not sent upstream.
_OWN = {
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "stream",
    "stream_options",
    "store",
    "previous_response_id",
    "metadata",
    "text",
    "truncation",
    "include",
    "reasoning",
    "background",
    "conversation",
}

_STATEFUL = {
    "previous_response_id": "responses are not stored; send the whole conversation in 'input'",
    "conversation": "conversations are not stored; send the whole conversation in 'input'",
}


# --- requests: Responses → chat ----------------------------------------------------------


def _text(part: dict[str, Any], param: str) -> str:
    text = part.get("text")
    if not isinstance(text, str):
        raise bad_request(f"'{param}.text' must be a string.", param=f"{param}.text")
    return text


def _image_to_chat(part: dict[str, Any], param: str) -> dict[str, Any]:
    url = part.get("image_url")
    if not isinstance(url, str):
        raise untranslatable(param, "images are taken by URL (or data: URL) only, not by file_id")
    image: dict[str, Any] = {"url": url}
    if part.get("detail") is not None:
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _parts_to_chat(
    content: Any, param: str, degrade: Degrade, *, images: bool
) -> str | list[dict[str, Any]]:
    """A message's content: text stays text; a list of parts becomes chat's parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"'{param}' must be a string or an array.", param=param)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text"):
            parts.append({"type": "text", "text": _text(part, where)})
        elif kind == "input_image" and images:
            parts.append(_image_to_chat(part, where))
        else:
            degrade.note(where, f"content of type {kind!r} has no chat equivalent: dropped")
    return parts


def _all_text(parts: str | list[dict[str, Any]]) -> bool:
    return isinstance(parts, str) or all(p["type"] == "text" for p in parts)


def _message_to_chat(item: dict[str, Any], param: str, degrade: Degrade) -> dict[str, Any]:
    role = item.get("role")
    content = item.get("content")
    if role in ("system", "developer"):
        parts = _parts_to_chat(content, f"{param}.content", degrade, images=False)
        return {"role": "system", "content": parts}
    if role == "user":
        parts = _parts_to_chat(content, f"{param}.content", degrade, images=True)
        return {"role": "user", "content": parts}
    if role == "assistant":
        message: dict[str, Any] = {"role": "assistant"}
        if isinstance(content, list):
            refusals = [p for p in content if isinstance(p, dict) and p.get("type") == "refusal"]
            if refusals:
                message["refusal"] = "".join(str(p.get("refusal", "")) for p in refusals)
                content = [p for p in content if p not in refusals]
        parts = _parts_to_chat(content, f"{param}.content", degrade, images=False)
        texts = [parts] if isinstance(parts, str) else [p["text"] for p in parts]
        message["content"] = "".join(texts) if texts else None
        return message
    raise bad_request(
        f"'{param}.role' must be one of user, assistant, system, developer.", param=f"{param}.role"
    )


def _call_to_chat(item: dict[str, Any], param: str) -> dict[str, Any]:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    for key, value in (("call_id", call_id), ("name", name), ("arguments", arguments)):
        if not isinstance(value, str):
            raise bad_request(f"'{param}.{key}' must be a string.", param=f"{param}.{key}")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _output_to_chat(item: dict[str, Any], param: str, degrade: Degrade) -> dict[str, Any]:
    call_id = item.get("call_id")
    if not isinstance(call_id, str):
        raise bad_request(f"'{param}.call_id' must be a string.", param=f"{param}.call_id")
    output = _parts_to_chat(item.get("output"), f"{param}.output", degrade, images=False)
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def input_to_messages(value: Any, degrade: Degrade | None = None) -> list[dict[str, Any]]:
    degrade = degrade or Degrade()
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad_request("'input' must be a string or a non-empty array.", param="input")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        param = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"'{param}' must be an object.", param=param)
        kind = item.get("type", "message")
        if kind == "custom_tool_call":
            degrade.note(param, "a custom tool call sent as a function call of 'input'")
            item = {
                **item,
                "arguments": json.dumps({"input": item.get("input")}),
                "type": "function_call",
            }
            kind = "function_call"
        elif kind == "custom_tool_call_output":
            item = {**item, "type": "function_call_output"}
            kind = "function_call_output"
        if kind == "message":
            messages.append(_message_to_chat(item, param, degrade))
        elif kind == "function_call":
            call = _call_to_chat(item, param)
            last = messages[-1] if messages else None
            # Calls right after an assistant turn belong to it, as a chat model answers.
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(_output_to_chat(item, param, degrade))
        elif kind == "reasoning":
            degrade.note(param, "earlier reasoning is not sent to a chat model")
        else:
            degrade.note(param, f"an item of type {kind!r} has no chat equivalent: not sent on")
    return messages


def _tools_to_chat(tool: Any, param: str, degrade: Degrade) -> list[dict[str, Any]]:
    """One Responses tool → chat function tools: a function as it is, a namespace's
    functions, a custom (free-form) tool as a function of one string `input`; built-in
    tools (web_search, …) are not offered to a chat model."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if not isinstance(tool, dict):
        raise bad_request(f"'{param}' must be an object.", param=param)
    if kind == "namespace":
        degrade.note(param, "a namespace's tools offered as plain functions")
        inner = tools if isinstance(tools := tool.get("tools"), list) else []
        return [
            t
            for j, item in enumerate(inner)
            for t in _tools_to_chat(item, f"{param}.tools[{j}]", degrade)
        ]
    if kind == "custom":
        degrade.note(param, "a custom tool offered as a function taking one string 'input'")
        parameters = {
            "type": "object",
            "properties": {"input": {"type": "string"}},
            "required": ["input"],
        }
        function = {"name": tool.get("name"), "parameters": parameters}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        return [{"type": "function", "function": function}]
    if kind != "function":
        degrade.note(param, f"the built-in tool {kind!r} is not offered to a chat model")
        return []
    if not isinstance(tool.get("name"), str):
        raise bad_request(f"'{param}.name' must be a string.", param=f"{param}.name")
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
    return [{"type": "function", "function": function}]


def _tool_choice_to_chat(choice: Any, degrade: Degrade) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
        if not isinstance(choice.get("name"), str):
            raise bad_request("'tool_choice.name' must be a string.", param="tool_choice.name")
        return {"type": "function", "function": {"name": choice["name"]}}
    degrade.note("tool_choice", "only auto, none, required or a function: left to the model")
    return None


def _format_to_chat(text: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(text, dict):
        raise bad_request("'text' must be an object.", param="text")
    if text.get("verbosity") is not None:
        out["verbosity"] = text["verbosity"]
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return out
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    else:
        raise untranslatable("text.format", "only text, json_object and json_schema are")
    return out


def _check_refusals(body: dict[str, Any], degrade: Degrade) -> None:
    """Stored state cannot cross to a chat model (refused); the rest is degraded."""
    for name, why in _STATEFUL.items():
        if body.get(name) is not None:
            raise untranslatable(name, why)
    if body.get("background") is True:
        raise untranslatable("background", "background responses need stored responses")
    if body.get("store") is True:
        degrade.note("store", "a chat model stores nothing: not stored")
    if body.get("truncation") not in (None, "disabled"):
        degrade.note("truncation", "not sent on (an overlong input is refused)")
    for item in body.get("include") or ():
        degrade.note(f"include.{item}", "nothing of it to return from a chat model")
    reasoning = body.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise bad_request("'reasoning' must be an object.", param="reasoning")
    for name in sorted(set(reasoning or {}) - {"effort"}):
        if (reasoning or {}).get(name) is not None:
            degrade.note(f"reasoning.{name}", "no chat equivalent: not sent on")
    if body.get("client_metadata") is not None:
        kept = json.dumps(body["client_metadata"], ensure_ascii=False)[:200]
        degrade.note("client_metadata", f"not sent on (kept here: {kept})")
    for name in sorted(set(body) - _OWN - set(_SAME) - {"client_metadata"}):
        degrade.note(name, "no chat-completions equivalent: not sent on")


def responses_request_to_chat(
    body: dict[str, Any], degrade: Degrade | None = None
) -> dict[str, Any]:
    """A Responses request body → a chat-completions request body; what chat has no
    equivalent for is degraded by the rules in docs/agents.md (stored state is refused)."""
    degrade = degrade or Degrade()
    _check_refusals(body, degrade)
    if "input" not in body:
        raise bad_request("You must provide 'input'.", param="input")
    messages = input_to_messages(body["input"], degrade)
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise untranslatable("instructions", "only text instructions are translated")
        messages.insert(0, {"role": "system", "content": instructions})
    if not messages:
        raise bad_request("'input' holds nothing a chat model can read.", param="input")
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    tools = body.get("tools")
    if tools:
        if not isinstance(tools, list):
            raise bad_request("'tools' must be an array.", param="tools")
        functions = [
            f for i, t in enumerate(tools) for f in _tools_to_chat(t, f"tools[{i}]", degrade)
        ]
        if functions:
            chat["tools"] = functions
    if body.get("tool_choice") is not None:
        choice = _tool_choice_to_chat(body["tool_choice"], degrade)
        if choice is not None and chat.get("tools"):
            chat["tool_choice"] = choice
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if body.get("text") is not None:
        chat.update(_format_to_chat(body["text"]))
    if isinstance(body.get("reasoning"), dict) and body["reasoning"].get("effort") is not None:
        chat["reasoning_effort"] = body["reasoning"]["effort"]
    for name in _SAME:
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("stream"):
        chat["stream"] = True
    return chat


# --- requests: chat → Responses (the inverse) ----------------------------------------------


def _parts_to_responses(content: Any, text_type: str) -> Any:
    if isinstance(content, str) or content is None:
        return content
    parts = []
    for part in content:
        if part["type"] == "text":
            parts.append({"type": text_type, "text": part["text"]})
        else:
            image = part["image_url"]
            parts.append(
                {
                    "type": "input_image",
                    "image_url": image["url"],
                    **({"detail": image["detail"]} if "detail" in image else {}),
                }
            )
    return parts


def chat_request_to_responses(chat: dict[str, Any]) -> dict[str, Any]:
    """A chat request body → a Responses request body of the same meaning."""
    items: list[dict[str, Any]] = []
    for message in chat["messages"]:
        role = message["role"]
        if role in ("system", "developer", "user"):
            content = _parts_to_responses(message["content"], "input_text")
            items.append({"type": "message", "role": role, "content": content})
        elif role == "assistant":
            said: list[dict[str, Any]] = []
            if message.get("content"):
                said.append({"type": "output_text", "text": message["content"]})
            if message.get("refusal"):
                said.append({"type": "refusal", "refusal": message["refusal"]})
            if said or not message.get("tool_calls"):
                items.append({"type": "message", "role": "assistant", "content": said})
            for call in message.get("tool_calls") or ():
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function["arguments"],
                    }
                )
        elif role == "tool":
            output = _parts_to_responses(message["content"], "input_text")
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": output,
                }
            )
    body: dict[str, Any] = {"model": chat["model"], "input": items}
    if chat.get("tools"):
        body["tools"] = [{"type": "function", **t["function"]} for t in chat["tools"]]
    choice = chat.get("tool_choice")
    if choice is not None:
        body["tool_choice"] = (
            {"type": "function", "name": choice["function"]["name"]}
            if isinstance(choice, dict)
            else choice
        )
    if chat.get("max_tokens") is not None:
        body["max_output_tokens"] = chat["max_tokens"]
    fmt = chat.get("response_format")
    if fmt is not None or chat.get("verbosity") is not None:
        text: dict[str, Any] = {}
        if fmt is not None:
            text["format"] = (
                {"type": "json_schema", **fmt["json_schema"]}
                if fmt["type"] == "json_schema"
                else {"type": fmt["type"]}
            )
        if chat.get("verbosity") is not None:
            text["verbosity"] = chat["verbosity"]
        body["text"] = text
    if chat.get("reasoning_effort") is not None:
        body["reasoning"] = {"effort": chat["reasoning_effort"]}
    for name in _SAME:
        if chat.get(name) is not None:
            body[name] = chat[name]
    if chat.get("stream"):
        body["stream"] = True
    return body


# --- answers: chat → Responses -------------------------------------------------------------


def _suffix(chat_id: Any) -> str:
    text = str(chat_id or "")
    return text.removeprefix("chatcmpl-") or f"{time.time_ns():x}"


def usage_to_responses(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    prompt, completion = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
    cached = _int((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))
    reasoning = _int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens"))
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": _int(usage.get("total_tokens")) or prompt + completion,
    }


def _created(value: Any) -> float:
    """The upstream's timestamp (0 included), or now when it gave none."""
    return (
        value
        if isinstance(value, int | float) and not isinstance(value, bool)
        else int(time.time())
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, parts: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": parts,
    }


def _call_item(call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": f"fc_{call_id}",
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


@dataclass
class Echo:
    """What a response repeats of its request (Responses clients read these back)."""

    model: str
    fields: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, body: dict[str, Any]) -> "Echo":
        return cls(
            model=str(body.get("model") or ""),
            fields={
                "instructions": body.get("instructions"),
                "metadata": body.get("metadata") or {},
                "tools": body.get("tools") or [],
                "tool_choice": body.get("tool_choice") or "auto",
                "parallel_tool_calls": body.get("parallel_tool_calls", True),
                "temperature": body.get("temperature"),
                "top_p": body.get("top_p"),
                "max_output_tokens": body.get("max_output_tokens"),
                "text": body.get("text") or {"format": {"type": "text"}},
                "reasoning": body.get("reasoning"),
                "user": body.get("user"),
                "previous_response_id": None,
                "store": False,
                "background": False,
                "truncation": "disabled",
            },
        )


def response_object(
    *,
    suffix: str,
    created: float,
    echo: Echo,
    model: str,
    output: list[dict[str, Any]],
    status: str,
    finish: str | None,
    usage: dict[str, Any] | None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    reason = _INCOMPLETE.get(finish or "") if status == "incomplete" else None
    return {
        "id": f"resp_{suffix}",
        "object": "response",
        "created_at": created,
        "status": status,
        "error": error,
        "incomplete_details": {"reason": reason} if reason else None,
        "model": model or echo.model,
        "output": output,
        "usage": usage,
        **echo.fields,
    }


def _status(finish: str | None) -> str:
    return "incomplete" if finish in _INCOMPLETE else "completed"


def chat_response_to_responses(payload: dict[str, Any], echo: Echo) -> dict[str, Any]:
    """A chat completion → a `response` object (the first choice: Responses has no `n`)."""
    suffix = _suffix(payload.get("id"))
    choice = (payload.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    finish = choice.get("finish_reason")
    output: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    if message.get("content"):
        parts.append(_text_part(message["content"]))
    if message.get("refusal"):
        parts.append({"type": "refusal", "refusal": message["refusal"]})
    if parts:
        output.append(_message_item(f"msg_{suffix}", parts, "completed"))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        output.append(
            _call_item(
                str(call.get("id")),
                str(function.get("name")),
                str(function.get("arguments") or ""),
                "completed",
            )
        )
    return response_object(
        suffix=suffix,
        created=_created(payload.get("created")),
        echo=echo,
        model=str(payload.get("model") or ""),
        output=output,
        status=_status(finish),
        finish=finish,
        usage=usage_to_responses(payload.get("usage")),
    )


# --- streams: chat chunks → Responses events -------------------------------------------------


def sse(data: dict[str, Any]) -> bytes:
    kind: str = data["type"]
    return b"event: " + kind.encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"


class ChatToResponsesStream:
    """Chat stream chunks → the Responses stream: `response.created`, `…in_progress`, per
    output item `output_item.added`, its deltas, `…done`, then `response.completed` (or
    `response.incomplete`, or `error` and `response.failed`)."""

    def __init__(self, echo: Echo) -> None:
        self.echo = echo
        self.sequence = 0
        self.suffix = ""
        self.created = 0.0
        self.model = ""
        self.started = False
        self.failed = False
        self.output: list[dict[str, Any]] = []  # items done
        # The open message item's parts, (type, text) in order (None: no message open).
        self.parts: list[tuple[str, str]] | None = None
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool call index → open call item
        self.call_index: dict[int, int] = {}  # chat tool call index → output index
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None

    def _event(self, kind: str, **data: Any) -> bytes:
        event = {"type": kind, "sequence_number": self.sequence, **data}
        self.sequence += 1
        return sse(event)

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        return response_object(
            suffix=self.suffix,
            created=self.created,
            echo=self.echo,
            model=self.model,
            output=list(self.output),
            status=status,
            finish=self.finish,
            usage=self.usage,
            **extra,
        )

    def _start(self, chunk: dict[str, Any]) -> bytes:
        self.started = True
        self.suffix = _suffix(chunk.get("id"))
        self.created = _created(chunk.get("created"))
        self.model = str(chunk.get("model") or "")
        response = self._response("in_progress")
        return self._event("response.created", response=response) + self._event(
            "response.in_progress", response=response
        )

    def _message_id(self) -> str:
        return f"msg_{self.suffix}"

    def _close_message(self) -> bytes:
        if self.parts is None:
            return b""
        parts, self.parts = self.parts, None
        index, item_id = len(self.output), self._message_id()
        out, done = b"", []
        for number, (kind, text) in enumerate(parts):
            where = {"item_id": item_id, "output_index": index, "content_index": number}
            if kind == "output_text":
                part = _text_part(text)
                out += self._event("response.output_text.done", **where, text=text, logprobs=[])
            else:
                part = {"type": "refusal", "refusal": text}
                out += self._event("response.refusal.done", **where, refusal=text)
            out += self._event("response.content_part.done", **where, part=part)
            done.append(part)
        item = _message_item(item_id, done, "completed")
        self.output.append(item)
        return out + self._event("response.output_item.done", output_index=index, item=item)

    def _close_calls(self) -> bytes:
        out = b""
        for index in sorted(self.calls):
            item = self.calls.pop(index)
            item["status"] = "completed"
            position = self.call_index[index]
            out += self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=position,
                name=item["name"],
                arguments=item["arguments"],
            )
            out += self._event("response.output_item.done", output_index=position, item=item)
            self.output.append(item)
        return out

    def _part_delta(self, kind: str, text: str) -> bytes:
        """Text or refusal for the message item (opened on the first), one part each."""
        out = b""
        index, item_id = len(self.output), self._message_id()
        if self.parts is None:
            out += self._close_calls()
            index = len(self.output)
            self.parts = []
            item = _message_item(item_id, [], "in_progress")
            out += self._event("response.output_item.added", output_index=index, item=item)
        kinds = [k for k, _ in self.parts]
        if kind not in kinds:
            self.parts.append((kind, ""))
            kinds.append(kind)
            part = _text_part("") if kind == "output_text" else {"type": "refusal", "refusal": ""}
            out += self._event(
                "response.content_part.added",
                item_id=item_id,
                output_index=index,
                content_index=len(kinds) - 1,
                part=part,
            )
        number = kinds.index(kind)
        self.parts[number] = (kind, self.parts[number][1] + text)
        where = {"item_id": item_id, "output_index": index, "content_index": number}
        if kind == "output_text":
            return out + self._event("response.output_text.delta", **where, delta=text, logprobs=[])
        return out + self._event("response.refusal.delta", **where, delta=text)

    def _call_delta(self, call: dict[str, Any]) -> bytes:
        out = b""
        index = call.get("index", 0)
        function = call.get("function") or {}
        if index not in self.calls:
            out += self._close_message()
            call_id = str(call.get("id") or f"call_{self.suffix}_{index}")
            item = _call_item(call_id, str(function.get("name") or ""), "", "in_progress")
            self.calls[index] = item
            self.call_index[index] = len(self.output) + len(self.calls) - 1
            out += self._event(
                "response.output_item.added", output_index=self.call_index[index], item=dict(item)
            )
        item = self.calls[index]
        arguments = function.get("arguments")
        if arguments:
            item["arguments"] += arguments
            out += self._event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=self.call_index[index],
                delta=arguments,
            )
        return out

    def feed(self, event: dict[str, Any]) -> bytes:
        if self.failed:
            return b""
        out = b"" if self.started else self._start(event)
        error = event.get("error")
        if isinstance(error, dict):
            self.failed = True
            detail = {
                "code": error.get("code") or "server_error",
                "message": str(error.get("message") or "The upstream failed."),
            }
            out += self._event("error", param=None, **detail)
            return out + self._event(
                "response.failed", response=self._response("failed", error=detail)
            )
        if isinstance(event.get("usage"), dict):
            self.usage = usage_to_responses(event["usage"])
        for choice in event.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                out += self._part_delta("output_text", delta["content"])
            if delta.get("refusal"):
                out += self._part_delta("refusal", delta["refusal"])
            for call in delta.get("tool_calls") or ():
                out += self._call_delta(call)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return out

    def end(self) -> bytes:
        if self.failed:
            return b""
        out = b"" if self.started else self._start({})
        out += self._close_message() + self._close_calls()
        status = _status(self.finish)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return out + self._event(kind, response=self._response(status))


# --- the client protocol -------------------------------------------------------------------


@dataclass
class ResponsesRequest(ClientRequest):
    """A chat request that came as a Responses request: what the answer echoes."""

    echo: Echo = field(default_factory=lambda: Echo(model=""))


class OpenAIResponses(ClientProtocol):
    """`POST /v1/responses`: the Responses shape in and out; errors in OpenAI's shape (the
    same as chat's)."""

    name = "openai-responses"
    kind = "openai-responses"
    endpoint = "responses"
    translates = True

    def parse(self, endpoint: Endpoint, raw: bytes) -> ClientRequest:
        body = load_body(raw)
        request = native_request(self.kind, raw, body, "input")
        return ResponsesRequest(**vars(request), echo=Echo.of(body))

    def translate(self, request: ClientRequest, degrade: Degrade) -> None:
        chat = parse_body(Endpoint.CHAT, responses_request_to_chat(request.body, degrade))
        request.body, request.translated = chat.body, True
        request.degraded = degrade.notes

    def answer(self, payload: dict[str, Any], request: ClientRequest) -> bytes:
        return json.dumps(chat_response_to_responses(payload, _echo(request))).encode()

    def stream(self, request: ClientRequest) -> ChatToResponsesStream:
        return ChatToResponsesStream(_echo(request))


def _echo(request: ClientRequest) -> Echo:
    return request.echo if isinstance(request, ResponsesRequest) else Echo(model=request.model)


RESPONSES = OpenAIResponses()
