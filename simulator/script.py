"""Scripted turns, so a coding agent (Codex, Claude Code) can be driven end to end.

A prompt whose last user text holds `run: COMMAND` is answered with a call of the shell tool
the agent offers (named Bash, shell, exec_command, … or any tool whose schema takes a
`command` / `cmd`), its arguments shaped by that schema. A request whose last item is a
tool's result is answered with text that quotes it: `tool said: …`, or `tool failed: …`
when the result is marked as an error (Anthropic's `is_error`, or Sluice's error marker
after a translation), so a test can tell the agent ran the tool and what came of it.
Anything else gets the usual generated text.

Read from the request in its own protocol (chat, Messages or Responses); the answer is
made in chat shape and rewritten like every other answer (simulator/anthropic.py,
simulator/openai_responses.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_RUN = re.compile(r"\brun:\s*(.+?)\s*$", re.S)
_SHELL_NAMES = ("Bash", "shell", "exec_command", "shell_command", "local_shell", "bash")
# How a failed command reads in a tool's result: Sluice's marker after a translation, or
# the agents' own wording (Claude Code "Exit code 2", Codex "Process exited with code 2").
_FAILED = re.compile(r"\[tool error\]|exit(?:ed)?(?: with)? code [1-9]", re.I)
TOOL_CALL_ID = "call_sim_1"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True)
class Reply:
    text: str


Turn = ToolCall | Reply


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text") or p.get("content") or "") if isinstance(p, dict) else str(p)
            for p in content
        )
    return ""


def _shell_call(command: str, tools: list[tuple[str, dict[str, Any]]]) -> ToolCall | None:
    """A call of the first shell-like tool offered, its arguments fitted to its schema."""
    ranked = sorted(
        tools, key=lambda t: _SHELL_NAMES.index(t[0]) if t[0] in _SHELL_NAMES else len(_SHELL_NAMES)
    )
    for name, schema in ranked:
        properties = (schema or {}).get("properties") or {}
        for key in ("command", "cmd"):
            if key in properties:
                kind = (properties[key] or {}).get("type")
                value: Any = ["bash", "-lc", command] if kind == "array" else command
                return ToolCall(name, json.dumps({key: value}))
        if name in _SHELL_NAMES:
            return ToolCall(name, json.dumps({"command": command}))
    return None


def _result(text: str, failed: bool) -> Reply:
    failed = failed or _FAILED.search(text) is not None
    return Reply(("tool failed: " if failed else "tool said: ") + text.strip()[:400])


def _from_prompt(text: str, tools: list[tuple[str, dict[str, Any]]]) -> Turn | None:
    found = _RUN.search(text)
    if found is None or not tools:
        return None
    return _shell_call(found.group(1).splitlines()[0], tools)


def _conversation(items: Any) -> list[Any]:
    """The turns without trailing system messages (Claude Code sends one after the user's
    prompt; Codex may end with a developer message)."""
    turns = list(items) if isinstance(items, list) else []
    while (
        turns
        and isinstance(turns[-1], dict)
        and turns[-1].get("role")
        in (
            "system",
            "developer",
        )
    ):
        turns.pop()
    return turns


def chat_turn(req: dict[str, Any]) -> Turn | None:
    messages = _conversation(req.get("messages"))
    if not messages or not isinstance(messages[-1], dict):
        return None
    last = messages[-1]
    if last.get("role") == "tool":
        return _result(_text(last.get("content")), False)
    if last.get("role") != "user":
        return None
    tools = [
        (str(f.get("name")), f.get("parameters") or {})
        for t in req.get("tools") or ()
        if isinstance(t, dict) and isinstance(f := t.get("function"), dict)
    ]
    return _from_prompt(_text(last.get("content")), tools)


def messages_turn(req: dict[str, Any]) -> Turn | None:
    messages = _conversation(req.get("messages"))
    if not messages or not isinstance(messages[-1], dict) or messages[-1].get("role") != "user":
        return None
    content = messages[-1].get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results:
        last = results[-1]
        return _result(_text(last.get("content")), bool(last.get("is_error")))
    tools = [
        (str(t.get("name")), t.get("input_schema") or {})
        for t in req.get("tools") or ()
        if isinstance(t, dict) and "name" in t
    ]
    return _from_prompt(_text(blocks), tools)


def responses_turn(req: dict[str, Any]) -> Turn | None:
    items = req.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    items = _conversation(items)
    if not isinstance(items, list) or not items or not isinstance(items[-1], dict):
        return None
    last = items[-1]
    if last.get("type") in ("function_call_output", "custom_tool_call_output"):
        output = last.get("output")
        return _result(_text(output) if not isinstance(output, dict) else json.dumps(output), False)
    if last.get("role") != "user":
        return None
    tools = []
    for t in req.get("tools") or ():
        if not isinstance(t, dict):
            continue
        for tool in t.get("tools") or [t] if t.get("type") == "namespace" else [t]:
            if isinstance(tool, dict) and tool.get("type") == "function":
                tools.append((str(tool.get("name")), tool.get("parameters") or {}))
    return _from_prompt(_text(last.get("content")), tools)


def chat_answer(turn: Turn, model: str, answer_id: str, created: int, prompt: int) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    finish = "stop"
    if isinstance(turn, ToolCall):
        call = {"name": turn.name, "arguments": turn.arguments}
        message["tool_calls"] = [{"id": TOOL_CALL_ID, "type": "function", "function": call}]
        finish = "tool_calls"
        completion = 12
    else:
        message["content"] = turn.text
        completion = len(turn.text) // 4 + 1
    return {
        "id": answer_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def chat_stream(answer: dict[str, Any]) -> bytes:
    """The chat stream of a scripted answer: role, content or the tool call, finish, usage."""
    base = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = answer["choices"][0]
    message = choice["message"]

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return b"data: " + json.dumps({**base, "choices": choices, **extra}).encode() + b"\n\n"

    def delta(fields: dict[str, Any], finish: str | None = None) -> bytes:
        return event([{"index": 0, "delta": fields, "logprobs": None, "finish_reason": finish}])

    out = delta({"role": "assistant", "content": ""})
    if message.get("content"):
        out += delta({"content": message["content"]})
    for i, call in enumerate(message.get("tool_calls") or ()):
        out += delta({"tool_calls": [{"index": i, **call}]})
    out += delta({}, choice["finish_reason"])
    out += event([], usage=answer["usage"])
    return out + b"data: [DONE]\n\n"
