"""The Responses API ↔ chat completions translation
(routing/request_path/protocols/openai_responses.py): a table per direction, refusals naming the
field, the stream translator, and property tests that a request or an answer translated there and
back keeps its meaning."""

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import GatewayError
from routing.request_path.protocols import Degrade
from routing.request_path.protocols.openai_responses import (
    RESPONSES,
    ChatToResponsesStream,
    Echo,
    chat_request_to_responses,
    chat_response_to_responses,
    responses_request_to_chat,
)

USER = {"role": "user", "content": "Hi"}

# Responses request fields → the chat request's (beside model and messages).
REQUEST_TABLE = [
    ("text input", {"input": "Hi"}, {"messages": [USER]}),
    (
        "instructions",
        {"input": "Hi", "instructions": "Be brief."},
        {"messages": [{"role": "system", "content": "Be brief."}, USER]},
    ),
    (
        "developer message",
        {"input": [{"role": "developer", "content": "Rules"}, USER]},
        {"messages": [{"role": "system", "content": "Rules"}, USER]},
    ),
    (
        "input_text and input_image parts",
        {
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is it?"},
                        {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"},
                    ],
                }
            ]
        },
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is it?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://x/y.png", "detail": "low"},
                        },
                    ],
                }
            ]
        },
    ),
    (
        "assistant output_text and refusal",
        {
            "input": [
                USER,
                {
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": "No."},
                        {"type": "refusal", "refusal": "Not allowed."},
                    ],
                },
            ]
        },
        {
            "messages": [
                USER,
                {"role": "assistant", "content": "No.", "refusal": "Not allowed."},
            ]
        },
    ),
    (
        "function call and its output",
        {
            "input": [
                USER,
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "1"},
                {"type": "function_call_output", "call_id": "c2", "output": "2"},
            ]
        },
        {
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        },
                        {
                            "id": "c2",
                            "type": "function",
                            "function": {"name": "g", "arguments": "{}"},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "1"},
                {"role": "tool", "tool_call_id": "c2", "content": "2"},
            ]
        },
    ),
    (
        "tools and tool_choice",
        {
            "input": "Hi",
            "tools": [{"type": "function", "name": "f", "parameters": {}, "strict": True}],
            "tool_choice": {"type": "function", "name": "f"},
            "parallel_tool_calls": False,
        },
        {
            "messages": [USER],
            "tools": [
                {"type": "function", "function": {"name": "f", "parameters": {}, "strict": True}}
            ],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "parallel_tool_calls": False,
        },
    ),
    (
        "sampling and limits",
        {"input": "Hi", "temperature": 0, "top_p": 0.5, "max_output_tokens": 9, "user": "u"},
        {"messages": [USER], "temperature": 0, "top_p": 0.5, "max_tokens": 9, "user": "u"},
    ),
    (
        "json schema",
        {"input": "Hi", "text": {"format": {"type": "json_schema", "name": "n", "schema": {}}}},
        {
            "messages": [USER],
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}}},
        },
    ),
    (
        "plain text format",
        {"input": "Hi", "text": {"format": {"type": "text"}}},
        {"messages": [USER]},
    ),
    (
        "reasoning effort",
        {"input": "Hi", "reasoning": {"effort": "low"}},
        {"messages": [USER], "reasoning_effort": "low"},
    ),
    (
        "store false, metadata kept here",
        {"input": "Hi", "store": False, "metadata": {"a": "b"}},
        {"messages": [USER]},
    ),
    ("stream", {"input": "Hi", "stream": True}, {"messages": [USER], "stream": True}),
]


@pytest.mark.parametrize(
    ("label", "body", "chat"), REQUEST_TABLE, ids=[r[0] for r in REQUEST_TABLE]
)
def test_a_responses_request_becomes_this_chat_request(label, body, chat):
    assert responses_request_to_chat({"model": "m", **body}) == {"model": "m", **chat}


REFUSALS = [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"store": True}, "store"),
    ({"background": True}, "background"),
    ({"truncation": "auto"}, "truncation"),
    ({"include": ["reasoning.encrypted_content"]}, "include.reasoning.encrypted_content"),
    ({"reasoning": {"effort": "low", "summary": "auto"}}, "reasoning.summary"),
    ({"client_metadata": {"session": "s"}}, "client_metadata"),
    ({"prompt": {"id": "p"}}, "prompt"),
    ({"tools": [{"type": "file_search"}]}, "tools[0]"),
    ({"tools": [{"type": "namespace", "name": "n", "tools": []}]}, "tools[0]"),
    ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
    ({"text": {"format": {"type": "grammar"}}}, "text.format"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0]"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
        "input[0].content[0]",
    ),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
        "input[0].content[0]",
    ),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"input": []}, "input"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    ({"instructions": [{"role": "system", "content": "x"}]}, "instructions"),
]


@pytest.mark.parametrize(("extra", "param"), REFUSALS, ids=[r[1] for r in REFUSALS])
def test_on_a_strict_route_what_has_no_chat_equivalent_is_refused_naming_the_field(extra, param):
    body = {"model": "m", "input": "Hi", **extra}
    with pytest.raises(GatewayError) as info:
        responses_request_to_chat(body, Degrade(strict=True))
    assert info.value.status == 400
    assert json.loads(info.value.response().content)["error"]["param"] == param


def test_the_translation_checks_the_chat_request_like_chat():
    request = RESPONSES.parse(None, b'{"model": "m", "input": "Hi", "temperature": "hot"}')
    with pytest.raises(GatewayError) as info:
        RESPONSES.translate(request, Degrade())
    assert json.loads(info.value.response().content)["error"]["param"] == "temperature"
    request = RESPONSES.parse(None, b'{"model": "m", "input": "Hi", "stream": true}')
    assert request.stream and request.wants_usage and request.model == "m"


CHAT_ANSWER = {
    "id": "chatcmpl-abc",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "small-2",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Calling.",
                "tool_calls": [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 2},
    },
}


def test_a_chat_answer_becomes_this_response():
    echo = Echo.of({"model": "fast", "instructions": "Be brief.", "metadata": {"k": "v"}})
    response = chat_response_to_responses(CHAT_ANSWER, echo)
    assert response["id"] == "resp_abc" and response["object"] == "response"
    assert (response["status"], response["model"], response["created_at"]) == (
        "completed",
        "small-2",
        1700000000,
    )
    assert response["output"] == [
        {
            "id": "msg_abc",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "Calling.", "annotations": [], "logprobs": []}
            ],
        },
        {
            "id": "fc_call_9",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_9",
            "name": "f",
            "arguments": "{}",
        },
    ]
    assert response["usage"] == {
        "input_tokens": 11,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 18,
    }
    assert (response["instructions"], response["metadata"], response["store"]) == (
        "Be brief.",
        {"k": "v"},
        False,
    )
    assert response["previous_response_id"] is None


@pytest.mark.parametrize(
    ("finish", "status", "reason"),
    [
        ("stop", "completed", None),
        ("length", "incomplete", "max_output_tokens"),
        ("content_filter", "incomplete", "content_filter"),
    ],
)
def test_finish_reasons_become_statuses(finish, status, reason):
    answer = {**CHAT_ANSWER, "choices": [{"message": {"content": "x"}, "finish_reason": finish}]}
    response = chat_response_to_responses(answer, Echo(model="m"))
    assert response["status"] == status
    assert (response["incomplete_details"] or {}).get("reason") == reason


def _sse_events(raw: bytes) -> list[dict]:
    events = []
    for block in raw.split(b"\n\n"):
        if block:
            name, data = block.split(b"\n")
            event = json.loads(data.removeprefix(b"data: "))
            assert name == b"event: " + event["type"].encode()
            events.append(event)
    return events


def chunk(delta=None, finish=None, **extra):
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-s", "created": 5, "model": "m", "choices": choices, **extra}


def test_a_chat_stream_becomes_the_responses_events():
    translator = ChatToResponsesStream(Echo(model="fast"))
    raw = b"".join(
        translator.feed(c)
        for c in [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "c1", "function": {"name": "f", "arguments": ""}}
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            chunk({}, "tool_calls"),
            chunk(usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}),
        ]
    )
    events = _sse_events(raw + translator.end())
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[6]["text"] == "Hello" and events[12]["arguments"] == '{"a":1}'
    assert [e["output_index"] for e in events[2:14] if "output_index" in e] == [0] * 7 + [1] * 5
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["usage"]["total_tokens"] == 7
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["arguments"] == '{"a":1}' and final["output"][1]["call_id"] == "c1"


def test_a_stream_cut_by_max_tokens_ends_incomplete_and_an_error_ends_failed():
    translator = ChatToResponsesStream(Echo(model="m"))
    translator.feed(chunk({"content": "x"}))
    translator.feed(chunk({}, "length"))
    last = _sse_events(translator.end())[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}

    failing = ChatToResponsesStream(Echo(model="m"))
    failing.feed(chunk({"content": "x"}))
    events = _sse_events(
        failing.feed({"error": {"message": "broke", "code": "stream_interrupted"}})
    )
    assert [e["type"] for e in events] == ["error", "response.failed"]
    assert events[0]["code"] == "stream_interrupted" and events[0]["message"] == "broke"
    assert events[1]["response"]["status"] == "failed" and failing.end() == b""


# --- properties: there and back keeps the meaning -------------------------------------------

TEXT = st.text(min_size=1, max_size=20)
IDS = st.text(alphabet="abcdefghij0123456789_", min_size=1, max_size=10)
ARGS = st.dictionaries(IDS, st.integers() | TEXT, max_size=3).map(json.dumps)
PART = st.one_of(
    st.builds(lambda t: {"type": "input_text", "text": t}, TEXT),
    st.builds(lambda u: {"type": "input_image", "image_url": f"https://img/{u}.png"}, IDS),
)
MESSAGE = st.one_of(
    st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from(["user", "system"]), TEXT),
    st.builds(
        lambda parts: {"type": "message", "role": "user", "content": parts},
        st.lists(PART, min_size=1, max_size=3),
    ),
    st.builds(
        lambda t: {"role": "assistant", "content": [{"type": "output_text", "text": t}]}, TEXT
    ),
)
CALL = st.builds(
    lambda i, n, a: {"type": "function_call", "call_id": i, "name": n, "arguments": a},
    IDS,
    IDS,
    ARGS,
)
OUTPUT = st.builds(
    lambda i, o: {"type": "function_call_output", "call_id": i, "output": o}, IDS, TEXT
)
REQUEST = st.fixed_dictionaries(
    {
        "model": IDS,
        "input": st.one_of(
            TEXT, st.lists(st.one_of(MESSAGE, CALL, OUTPUT), min_size=1, max_size=6)
        ),
    },
    optional={
        "instructions": TEXT,
        "temperature": st.floats(0, 2),
        "max_output_tokens": st.integers(1, 10_000),
        "tools": st.lists(
            st.builds(
                lambda n: {"type": "function", "name": n, "parameters": {"type": "object"}}, IDS
            ),
            max_size=3,
        ),
        "tool_choice": st.one_of(
            st.sampled_from(["auto", "none", "required"]),
            st.builds(lambda n: {"type": "function", "name": n}, IDS),
        ),
        "text": st.sampled_from(
            [
                {"format": {"type": "json_object"}},
                {"format": {"type": "json_schema", "name": "s", "schema": {}}},
            ]
        ),
        "reasoning": st.builds(lambda e: {"effort": e}, st.sampled_from(["low", "high"])),
        "stream": st.booleans(),
        "user": IDS,
    },
)


@settings(max_examples=200, deadline=None)
@given(REQUEST)
def test_a_request_there_and_back_keeps_its_meaning(body):
    chat = responses_request_to_chat(body)
    assert responses_request_to_chat(chat_request_to_responses(chat)) == chat


CHAT_CALL = st.builds(
    lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": a}},
    IDS,
    IDS,
    ARGS,
)


def responses_response_to_chat(response: dict[str, Any]) -> dict[str, Any]:
    """A `response` object → a chat completion: the inverse of `chat_response_to_responses`,
    only for the property test below (an upstream's answer is read by
    routing/request_path/protocols/responses_upstream.py)."""
    text, refusal, calls = "", "", []
    for item in response["output"]:
        if item["type"] == "message":
            for part in item["content"]:
                if part["type"] == "output_text":
                    text += part["text"]
                else:
                    refusal += part["refusal"]
        else:
            calls.append(
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]},
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if refusal:
        message["refusal"] = refusal
    if calls:
        message["tool_calls"] = calls
    details = response.get("incomplete_details") or {}
    finish = {"max_output_tokens": "length", "content_filter": "content_filter"}.get(
        details.get("reason") or "", "tool_calls" if calls else "stop"
    )
    usage = response.get("usage")
    chat_usage = None
    if usage is not None:
        chat_usage = {
            "prompt_tokens": usage["input_tokens"],
            "completion_tokens": usage["output_tokens"],
            "total_tokens": usage["total_tokens"],
            "prompt_tokens_details": {
                "cached_tokens": usage["input_tokens_details"]["cached_tokens"]
            },
            "completion_tokens_details": {
                "reasoning_tokens": usage["output_tokens_details"]["reasoning_tokens"]
            },
        }
    return {
        "id": "chatcmpl-" + response["id"].removeprefix("resp_"),
        "object": "chat.completion",
        "created": response["created_at"],
        "model": response["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": chat_usage,
    }


@st.composite
def chat_answers(draw):
    calls = draw(st.lists(CHAT_CALL, max_size=3))
    content = draw(st.none() | TEXT) if calls else draw(TEXT)
    message = {"role": "assistant", "content": content}
    if draw(st.booleans()):
        message["refusal"] = draw(TEXT)
    if calls:
        message["tool_calls"] = calls
    finish = "tool_calls" if calls else draw(st.sampled_from(["stop", "length", "content_filter"]))
    prompt, completion = draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6))
    return {
        "id": "chatcmpl-" + draw(IDS),
        "object": "chat.completion",
        "created": draw(st.integers(0, 2**31)),
        "model": draw(IDS),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": draw(st.integers(0, prompt))},
            "completion_tokens_details": {"reasoning_tokens": draw(st.integers(0, completion))},
        },
    }


@settings(max_examples=200, deadline=None)
@given(chat_answers())
def test_an_answer_there_and_back_keeps_its_meaning(answer):
    assert responses_response_to_chat(chat_response_to_responses(answer, Echo(model="m"))) == answer


@settings(max_examples=100, deadline=None)
@given(chat_answers(), st.integers(1, 5))
def test_a_streamed_answer_ends_as_the_same_response_as_the_whole(answer, size):
    """The answer cut into chunks of `size` characters, streamed, ends in the response the
    whole answer gives."""
    message = answer["choices"][0]["message"]
    text = message.get("content") or ""
    chunks = [chunk({"content": text[i : i + size]}) for i in range(0, len(text), size)]
    refusal = message.get("refusal") or ""
    chunks += [chunk({"refusal": refusal[i : i + size]}) for i in range(0, len(refusal), size)]
    for index, call in enumerate(message.get("tool_calls") or ()):
        head = {"index": index, "id": call["id"], "function": {"name": call["function"]["name"]}}
        chunks.append(chunk({"tool_calls": [head]}))
        arguments = call["function"]["arguments"]
        for i in range(0, len(arguments), size):
            part = {"index": index, "function": {"arguments": arguments[i : i + size]}}
            chunks.append(chunk({"tool_calls": [part]}))
    chunks.append(chunk({}, answer["choices"][0]["finish_reason"]))
    chunks.append(chunk(usage=answer["usage"]))
    translator = ChatToResponsesStream(Echo(model="m"))
    raw = b"".join(
        translator.feed(
            {**c, "id": answer["id"], "created": answer["created"], "model": answer["model"]}
        )
        for c in chunks
    )
    final = _sse_events(raw + translator.end())[-1]["response"]
    whole = chat_response_to_responses(answer, Echo(model="m"))
    assert final == whole
