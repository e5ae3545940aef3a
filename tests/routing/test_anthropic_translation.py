"""Chat completions ↔ Anthropic Messages (routing/request_path/protocols/anthropic_messages.py):
every field both ways, what is refused, and (hypothesis) that a request translated there and back
keeps its meaning."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import GatewayError
from routing.request_path.classify import ErrorClass, classify_status
from routing.request_path.protocols import Degrade
from routing.request_path.protocols.anthropic_messages import (
    ChatToMessagesStream,
    MessagesToChatStream,
    chat_request_to_messages,
    chat_response_to_message,
    error_to_chat,
    error_to_messages,
    message_response_to_chat,
    messages_request_to_chat,
    usage_to_chat,
    usage_to_messages,
)

IMAGE = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
TOOL = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}
CHAT_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}},
}

# (Messages request, the chat request it means): translated one way and the other.
REQUESTS = [
    (
        {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
    ),
    (
        {
            "model": "m",
            "max_tokens": 10,
            "system": "be brief",
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0.5,
            "top_p": 0.9,
            "stop_sequences": ["END"],
            "stream": True,
            "metadata": {"user_id": "u-1"},
        },
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
            ],
            "temperature": 0.5,
            "top_p": 0.9,
            "stop": ["END"],
            "stream": True,
            "user": "u-1",
        },
    ),
    (
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {"type": "image", "source": IMAGE},
                        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                    ],
                }
            ],
        },
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                        },
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                    ],
                }
            ],
        },
    ),
    (
        {
            "model": "m",
            "max_tokens": 10,
            "tools": [TOOL],
            "tool_choice": {"type": "tool", "name": "get_weather"},
            "messages": [
                {"role": "user", "content": "weather in Oslo?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Looking."},
                        {
                            "type": "tool_use",
                            "id": "call_1",
                            "name": "get_weather",
                            "input": {"city": "Oslo"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "call_1", "content": "12 C"},
                        {"type": "text", "text": "and tomorrow?"},
                    ],
                },
            ],
        },
        {
            "model": "m",
            "max_tokens": 10,
            "tools": [CHAT_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "messages": [
                {"role": "user", "content": "weather in Oslo?"},
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "Looking."}],
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "12 C"},
                {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}]},
            ],
        },
    ),
]


@pytest.mark.parametrize(("messages", "chat"), REQUESTS)
def test_a_messages_request_reads_as_its_chat_request(messages, chat):
    assert messages_request_to_chat(messages) == chat


@pytest.mark.parametrize(("messages", "chat"), REQUESTS)
def test_a_chat_request_reads_as_its_messages_request(messages, chat):
    back = chat_request_to_messages(chat)
    expected = dict(messages)
    if isinstance(expected.get("system"), str):
        assert back.pop("system") == expected.pop("system")
    # String content comes back as a text block: the same meaning in Messages.
    for message in expected["messages"]:
        if isinstance(message["content"], str):
            message["content"] = [{"type": "text", "text": message["content"]}]
    assert back == expected


@pytest.mark.parametrize(
    ("choice", "chat_choice", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "any"}, "required", None),
        ({"type": "none"}, "none", None),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
    ],
)
def test_tool_choice_both_ways(choice, chat_choice, parallel):
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    chat = messages_request_to_chat({**body, "tools": [TOOL], "tool_choice": choice})
    assert chat["tool_choice"] == chat_choice
    assert chat.get("parallel_tool_calls") == parallel
    assert chat_request_to_messages(chat)["tool_choice"] == choice


@pytest.mark.parametrize(
    ("messages_body", "param"),
    [
        ({"top_k": 5}, "top_k"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
        ({"metadata": {"other": 1}}, "metadata.other"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "document", "source": {"type": "text"}}],
                    }
                ]
            },
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": "boom",
                                "is_error": True,
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0].is_error",
        ),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
        ({"context_management": {"edits": []}}, "context_management"),
        ({"output_config": {"effort": "high"}}, "output_config.effort"),
        ({"thinking": {"type": "adaptive"}}, "thinking"),
        (
            {"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]},
            "messages[1]",
        ),
        ({}, None),  # max_tokens is required: dropped below
    ],
)
def test_on_a_strict_route_what_chat_cannot_say_is_refused_naming_the_field(messages_body, param):
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    body.update(messages_body)
    if param is None:
        del body["max_tokens"]
        param = "max_tokens"
    with pytest.raises(GatewayError) as refused:
        messages_request_to_chat(body, Degrade(strict=True))
    assert refused.value.status == 400
    assert refused.value.param == param
    assert param.split(".")[0].split("[")[0] in refused.value.message


@pytest.mark.parametrize(
    ("chat_body", "param"),
    [
        ({"n": 2}, "n"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"seed": 1}, "seed"),
        ({"temperature": 1.5}, "temperature"),
        ({"logprobs": True}, "logprobs"),
        ({"tools": [{**CHAT_TOOL, "function": {"name": "f", "strict": True}}]}, None),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "system", "content": "late"},
                ]
            },
            "messages[1]",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}
                ]
            },
            "messages[0].content[0]",
        ),
        ({"messages": [{"role": "user", "content": "x", "name": "bob"}]}, "messages[0].name"),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "f", "arguments": "[1]"},
                            }
                        ],
                    }
                ]
            },
            "messages[0].tool_calls[0]",
        ),
    ],
)
def test_on_a_strict_route_what_messages_cannot_say_is_refused_naming_the_field(chat_body, param):
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **chat_body}
    with pytest.raises(GatewayError) as refused:
        chat_request_to_messages(body, degrade=Degrade(strict=True))
    assert refused.value.status == 400
    assert refused.value.param == (param or "tools[0].function.strict")


def test_chat_defaults_that_change_nothing_are_accepted():
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "n": 1,
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "logprobs": False,
        "stream_options": {"include_usage": True},
    }
    messages = chat_request_to_messages(body, "claude-x")
    assert messages["model"] == "claude-x"
    assert messages["max_tokens"] == 4096  # Messages needs one; chat has none


def test_consecutive_tool_results_and_a_user_turn_merge_into_one_user_message():
    chat = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "tool", "tool_call_id": "b", "content": "2"},
            {"role": "user", "content": "next"},
        ],
    }
    messages = chat_request_to_messages(chat)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b["type"] for b in messages[2]["content"]] == ["tool_result", "tool_result", "text"]


# --- answers -----------------------------------------------------------------------------

MESSAGE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 100,
        "output_tokens": 20,
        "cache_read_input_tokens": 30,
        "cache_creation_input_tokens": 5,
    },
}


def test_a_messages_answer_reads_as_a_chat_completion():
    chat = message_response_to_chat(MESSAGE)
    choice = chat["choices"][0]
    assert choice["message"]["content"] == "Let me look."
    assert choice["message"]["tool_calls"] == [
        {
            "id": "toolu_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }
    ]
    assert choice["finish_reason"] == "tool_calls"
    # Every token read counts: fresh, written to the cache and read from it.
    assert chat["usage"] == {
        "prompt_tokens": 135,
        "completion_tokens": 20,
        "total_tokens": 155,
        "prompt_tokens_details": {"cached_tokens": 30},
    }


def test_a_chat_completion_reads_as_a_messages_answer():
    message = chat_response_to_message(message_response_to_chat(MESSAGE), "smart")
    assert message["model"] == "smart"
    assert message["content"] == MESSAGE["content"]
    assert message["stop_reason"] == "tool_use"
    assert message["usage"]["input_tokens"] + message["usage"]["cache_read_input_tokens"] == 135
    assert message["usage"]["output_tokens"] == 20


@pytest.mark.parametrize(
    ("stop", "finish", "back"),
    [
        ("end_turn", "stop", "end_turn"),
        ("stop_sequence", "stop", "end_turn"),
        ("max_tokens", "length", "max_tokens"),
        ("tool_use", "tool_calls", "tool_use"),
        ("refusal", "content_filter", "refusal"),
    ],
)
def test_stop_reasons_and_finish_reasons(stop, finish, back):
    chat = message_response_to_chat({**MESSAGE, "stop_reason": stop})
    assert chat["choices"][0]["finish_reason"] == finish
    assert chat_response_to_message(chat)["stop_reason"] == back


def test_usage_both_ways_keeps_every_token():
    chat = usage_to_chat({"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 2})
    assert (chat["prompt_tokens"], chat["completion_tokens"]) == (9, 3)
    back = usage_to_messages(chat)
    assert back["input_tokens"] + back["cache_read_input_tokens"] == 9
    assert back["output_tokens"] == 3


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (429, "rate_limit_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (504, "timeout_error"),
    ],
)
def test_errors_in_anthropic_shape(status, kind):
    body = json.dumps({"error": {"message": "why", "type": "x", "code": None, "param": None}})
    error = json.loads(error_to_messages(status, body.encode()))
    assert error == {"type": "error", "error": {"type": kind, "message": "why"}}


def test_an_anthropic_overloaded_error_stays_readable_as_capacity():
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    error = json.loads(error_to_chat(529, body))["error"]
    assert error["code"] == "overloaded_error"
    assert error["message"] == "Overloaded"


# --- streams -----------------------------------------------------------------------------


def _sse(raw: bytes) -> list[tuple[str, dict]]:
    events = []
    for block in raw.split(b"\n\n"):
        lines = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line)
        if b"data" in lines and lines[b"data"] != b"[DONE]":
            events.append((lines.get(b"event", b"").decode(), json.loads(lines[b"data"])))
    return events


def _chat_chunks() -> list[dict]:
    base = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1, "model": "gpt"}
    deltas = [
        {"role": "assistant", "content": ""},
        {"content": "Hel"},
        {"content": "lo"},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]},
    ]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    usage = {"prompt_tokens": 11, "completion_tokens": 6, "total_tokens": 17}
    chunks.append({**base, "choices": [], "usage": usage})
    return chunks


def test_a_chat_stream_reads_as_messages_events_in_order():
    translator = ChatToMessagesStream("smart")
    raw = b"".join(translator.feed(c) for c in _chat_chunks()) + translator.end()
    events = _sse(raw)
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[5][1]["content_block"] == {
        "type": "tool_use",
        "id": "c1",
        "name": "f",
        "input": {},
    }
    partial = "".join(
        e["delta"].get("partial_json", "") for n, e in events if n == "content_block_delta"
    )
    assert json.loads(partial) == {"a": 1}
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["input_tokens"] == 11 and delta["usage"]["output_tokens"] == 6


def test_a_chat_stream_error_becomes_an_error_event_and_nothing_after():
    translator = ChatToMessagesStream("smart")
    out = translator.feed(_chat_chunks()[0])
    out += translator.feed({"error": {"message": "The upstream stream broke off", "code": "x"}})
    out += translator.end()
    events = _sse(out)
    assert events[-1][0] == "error"
    assert events[-1][1]["error"]["type"] == "api_error"


def test_a_messages_stream_reads_as_chat_chunks_with_usage():
    translator = MessagesToChatStream()
    message = {
        "id": "msg_1",
        "model": "claude-x",
        "usage": {"input_tokens": 9, "cache_read_input_tokens": 1},
    }
    events = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"x":2}'},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 4},
        },
        {"type": "message_stop"},
    ]
    raw = b"".join(translator.feed(e) for e in events)
    assert raw.endswith(b"data: [DONE]\n\n")
    chunks = [d for _, d in _sse(raw)]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Hi"
    calls = [
        tc
        for c in chunks
        if c["choices"]
        for tc in c["choices"][0]["delta"].get("tool_calls") or ()
    ]
    assert calls[0]["id"] == "t" and calls[0]["function"]["name"] == "f"
    assert "".join(tc["function"]["arguments"] for tc in calls) == '{"x":2}'
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 10
    assert chunks[-1]["usage"]["completion_tokens"] == 4


def test_a_messages_stream_error_reads_as_a_chat_error_event():
    translator = MessagesToChatStream()
    raw = translator.feed(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    assert json.loads(raw.removeprefix(b"data: "))["error"]["code"] == "overloaded_error"


# --- there and back (hypothesis) -----------------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_name = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)
_arguments = st.dictionaries(_name, st.integers() | _text, max_size=3)
_image = st.builds(
    lambda data: {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": data},
    },
    st.from_regex(r"[A-Za-z0-9+/]{4,16}", fullmatch=True),
)
_user_blocks = st.lists(
    st.builds(lambda t: {"type": "text", "text": t}, _text) | _image, min_size=1, max_size=3
)


@st.composite
def _conversation(draw) -> dict:
    """A Messages conversation: user and assistant turns, with tool calls answered."""
    messages: list[dict] = []
    for turn in range(draw(st.integers(1, 3))):
        user = draw(_text | _user_blocks)
        if messages and messages[-1]["role"] == "assistant":
            calls = [b for b in messages[-1]["content"] if b["type"] == "tool_use"]
            if calls:
                results = [
                    {"type": "tool_result", "tool_use_id": c["id"], "content": draw(_text)}
                    for c in calls
                ]
                user = results + (
                    user if isinstance(user, list) else [{"type": "text", "text": user}]
                )
        messages.append({"role": "user", "content": user})
        blocks = [{"type": "text", "text": draw(_text)}] if draw(st.booleans()) else []
        for i in range(draw(st.integers(0, 2))):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"call_{turn}_{i}",
                    "name": draw(_name),
                    "input": draw(_arguments),
                }
            )
        if blocks and turn < 2:
            messages.append({"role": "assistant", "content": blocks})
    if messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": draw(_text)})
    body = {"model": "m", "max_tokens": draw(st.integers(1, 10_000)), "messages": messages}
    if draw(st.booleans()):
        body["system"] = draw(_text)
    if draw(st.booleans()):
        body["temperature"] = draw(st.floats(0, 1))
    if draw(st.booleans()):
        body["stop_sequences"] = draw(st.lists(_text.filter(bool), min_size=1, max_size=2))
    if draw(st.booleans()):
        body["tools"] = [{"name": draw(_name), "input_schema": {"type": "object"}}]
    return body


def _meaning(body: dict) -> dict:
    """What a Messages request says, with the spellings that mean the same made one."""
    out = json.loads(json.dumps(body))
    for message in out["messages"]:
        if isinstance(message["content"], str):
            message["content"] = [{"type": "text", "text": message["content"]}]
    if out.get("system") == "":
        del out["system"]
    # Messages are one turn per role: consecutive user turns are one turn.
    merged: list[dict] = []
    for message in out["messages"]:
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1]["content"].extend(message["content"])
        else:
            merged.append(message)
    out["messages"] = merged
    return out


@settings(max_examples=150, deadline=None)
@given(_conversation())
def test_a_messages_request_there_and_back_keeps_its_meaning(body):
    assert _meaning(chat_request_to_messages(messages_request_to_chat(body))) == _meaning(body)


def _chat_meaning(chat: dict) -> dict:
    """What a chat request says, with the spellings that mean the same made one."""
    out = json.loads(json.dumps(chat))
    merged: list[dict] = []
    for message in out["messages"]:
        content = message.get("content")
        if isinstance(content, str) and message["role"] in ("user", "assistant"):
            message["content"] = [{"type": "text", "text": content}]
        if message.get("content") == []:
            message["content"] = None
        if message["role"] == "system" and not content:
            continue
        if merged and message["role"] == "user" and merged[-1]["role"] == "user":
            merged[-1]["content"].extend(message["content"])
        else:
            merged.append(message)
    out["messages"] = merged
    return out


@settings(max_examples=150, deadline=None)
@given(_conversation())
def test_a_chat_request_there_and_back_keeps_its_meaning(body):
    chat = messages_request_to_chat(body)
    assert _chat_meaning(messages_request_to_chat(chat_request_to_messages(chat))) == _chat_meaning(
        chat
    )


def _anthropic_error(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


@pytest.mark.parametrize(
    ("status", "kind", "message", "error_class"),
    [
        (529, "overloaded_error", "Overloaded", ErrorClass.CAPACITY),
        (503, "api_error", "Service unavailable", ErrorClass.CAPACITY),
        (
            429,
            "rate_limit_error",
            "Number of requests exceeds your rate limit",
            ErrorClass.RATE_LIMIT,
        ),
        (
            400,
            "invalid_request_error",
            "prompt is too long: 210000 tokens",
            ErrorClass.CONTEXT_LENGTH,
        ),
        (400, "invalid_request_error", "max_tokens: must be positive", ErrorClass.BAD_REQUEST),
        (401, "authentication_error", "invalid x-api-key", ErrorClass.AUTH_CONFIG),
        (404, "not_found_error", "model: claude-nope", ErrorClass.AUTH_CONFIG),
        (500, "api_error", "Internal server error", ErrorClass.SERVER_ERROR),
    ],
)
def test_anthropic_errors_fall_in_their_class(status, kind, message, error_class):
    """As the chain sees them: the Anthropic body read through error_to_chat."""
    body = error_to_chat(status, _anthropic_error(kind, message))
    assert classify_status(status, body) is error_class
