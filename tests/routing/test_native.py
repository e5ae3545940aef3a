"""Passthrough and the rules when crossing kinds, field by field: a native body keeps its
bytes (only the fields Sluice sets change), the native stream's watcher learns usage and
errors without touching the bytes, usage reads in every protocol's shape, a stateful
Responses call is pinned, and each documented degradation does what docs/agents.md says."""

import dataclasses
import json
from decimal import Decimal
from typing import Any

import pytest

from core.errors import GatewayError
from routing.catalog.specs import DeploymentSpec, RetryPolicy, RouteSpec, UpstreamSpec
from routing.deployment_state import Limits
from routing.request_path.payloads import NativeBody, UpstreamBody, upstream_body
from routing.request_path.protocols import Degrade
from routing.request_path.protocols.anthropic_messages import (
    ANTHROPIC,
    chat_request_to_messages,
    messages_request_to_chat,
)
from routing.request_path.protocols.native import NativeTap, native_bytes, with_fields
from routing.request_path.protocols.openai_responses import RESPONSES, responses_request_to_chat
from routing.request_path.relay import usage_tokens
from routing.request_path.translation import pinned, shape_for

# --- bytes ------------------------------------------------------------------------------

BODIES = [
    b'{"model":"a","x":1}',
    b'{ "x" : [1, {"model": "nested"}], "model" : "a" ,"y":"caf\\u00e9 \\"q\\""}',
    b'{"model": "a", "thinking": {"type": "adaptive"}, "stream": true}\n',
    '{"model": "a", "text": "naïve ✓"}'.encode(),
    b'{"model": "old", "model": "a"}',  # repeated: the last counts, as json.loads reads it
    b'{"model": "old", "x": {"model": "y"}, "model": "a"}',
    b'{"model": "old", "x": "\\u00e9", "\\u006dodel": "a"}',  # repeated, a letter escaped
    b'{"model": "old", "x": "\\u00e9", "mode\\u006C": "a"}',
]


def test_the_rest_of_a_body_is_not_decoded_once_its_fields_are_found_for_good():
    # What follows the model cannot hold another: it is not read (so not checked either;
    # the body was read as JSON before).
    assert with_fields(b'{"model":"a","messages":[unread', {"model": "b"}) == (
        b'{"model":"b","messages":[unread'
    )
    # A tool's property of that name holds another value than the model json.loads read:
    # not a repeat of the key (as in the first turns of Claude Code and Codex).
    raw = b'{"model":"a","tools":[{"properties":{"model":{"type":"string"}}}],"messages":[unread'
    out = with_fields(raw, {"model": "b"}, {"model": "a"})
    assert out == raw.replace(b'"model":"a"', b'"model":"b"')


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"a","x":{"model":"a"},"model":"a"}',  # a later repeat of the same value
        b'{"model":"c","x":{"model":1},"model" : "a"}',  # the model json.loads read is later
    ],
)
def test_a_later_field_that_may_be_the_one_read_is_the_one_set(raw):
    out = with_fields(raw, {"model": "b"}, {"model": "a"})
    first, last = raw.rsplit(b'"a"', 1)
    assert out == first + b'"b"' + last


@pytest.mark.parametrize("raw", BODIES)
def test_a_field_that_already_holds_its_value_leaves_the_bytes_as_they_are(raw):
    assert with_fields(raw, {"model": "a"}) is raw


@pytest.mark.parametrize("raw", BODIES)
def test_setting_the_model_changes_only_its_value(raw):
    out = with_fields(raw, {"model": "upstream-b"})
    assert json.loads(out) == {**json.loads(raw), "model": "upstream-b"}
    # Everything outside the model's value is the client's, byte for byte.
    first, last = raw.rsplit(b'"a"', 1)
    assert out == first + b'"upstream-b"' + last


def test_a_missing_field_is_added_and_true_is_not_taken_for_one():
    assert json.loads(with_fields(b'{"model":"a"}', {"max_tokens": 5})) == {
        "model": "a",
        "max_tokens": 5,
    }
    assert with_fields(b"{}", {"model": "m"}) == b'{"model":"m"}'
    assert json.loads(with_fields(b'{"n": true}', {"n": 1}))["n"] == 1


def test_native_bytes_apply_the_overrides_too():
    native = NativeBody("anthropic", b'{"model":"r","max_tokens":9000}', {"max_tokens": 100})
    assert native_bytes(native, "real") == b'{"model":"real","max_tokens":100}'


def test_the_body_for_a_deployment_carries_the_native_one_beside_the_chat_translation():
    request = ANTHROPIC.parse(
        None, b'{"model":"r","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}'
    )
    body = upstream_body(request, "up")
    assert isinstance(body, UpstreamBody) and body == b"" and body.native is request.native
    ANTHROPIC.translate(request, Degrade())
    chat = upstream_body(request, "up")
    assert json.loads(chat)["messages"] == [{"role": "user", "content": "hi"}]
    assert chat.native is request.native and chat.model == "up"


# --- streams and usage ------------------------------------------------------------------

ANTHROPIC_EVENTS = (
    b'event: message_start\ndata: {"type":"message_start","message":{"model":"claude-x",'
    b'"usage":{"input_tokens":10,"cache_read_input_tokens":4,"output_tokens":1}}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"thinking_delta","thinking":"hm"}}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{},'
    b'"usage":{"output_tokens":7}}\n\n'
)


def test_the_native_tap_passes_every_byte_on_and_learns_model_and_usage():
    tap = NativeTap("anthropic")
    out = b"".join(
        tap.feed(ANTHROPIC_EVENTS[i : i + 7]) for i in range(0, len(ANTHROPIC_EVENTS), 7)
    )
    assert out == ANTHROPIC_EVENTS
    assert tap.model == "claude-x" and tap.chunks == 1 and tap.error is None
    assert usage_tokens(tap.usage) == (14, 7)


def test_the_native_tap_sees_an_error_event_in_either_protocol():
    tap = NativeTap("anthropic")
    tap.feed(
        b'event: error\ndata: {"type":"error","error":'
        b'{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )
    assert tap.error == {"type": "overloaded_error", "message": "Overloaded"}
    tap = NativeTap("openai-responses")
    tap.feed(b'data: {"type":"error","code":"server_error","message":"x"}\n\n')
    assert tap.error is None  # the relay goes on to relay `response.failed` too
    tap.feed(
        b'data: {"type":"response.failed","response":'
        b'{"error":{"code":"server_error","message":"x"}}}\n\n'
    )
    assert tap.error == {"code": "server_error", "message": "x"}
    tap = NativeTap("openai-responses")
    tap.feed(b'data: {"type":"error","code":"server_error","message":"y"}\n\n')
    tap.flush()  # the stream ended without `response.failed`
    assert tap.error == {"message": "y", "code": "server_error"}
    tap = NativeTap("openai-responses")
    tap.feed(
        b'data: {"type":"response.completed","response":{"model":"g",'
        b'"usage":{"input_tokens":3,"output_tokens":2}}}'
    )
    tap.flush()
    assert (tap.model, usage_tokens(tap.usage)) == ("g", (3, 2))


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        ({"prompt_tokens": 5, "completion_tokens": 2}, (5, 2)),
        ({"input_tokens": 5, "output_tokens": 2}, (5, 2)),  # Responses
        (
            {
                "input_tokens": 5,
                "cache_creation_input_tokens": 3,
                "cache_read_input_tokens": 4,
                "output_tokens": 2,
            },
            (12, 2),
        ),  # Messages: cache reads and writes count in
        (None, None),
    ],
)
def test_usage_reads_in_every_protocols_shape(usage, tokens):
    assert usage_tokens(usage) == tokens


# --- which shape a call travels in -------------------------------------------------------


def _deployment(name: str, kind: str) -> DeploymentSpec:
    upstream = UpstreamSpec(name, "http://u", None, 1, 1, kind=kind)
    return DeploymentSpec(
        name, name, upstream, "t", 4, 1000, Decimal(0), Decimal(0), Limits(4, 3, 300.0, 0.1, 0.2)
    )


def _route(*kinds: str, translation: str = "degrade") -> RouteSpec:
    chain = tuple(_deployment(f"d{i}-{k}", k) for i, k in enumerate(kinds))
    return RouteSpec("r", chain, RetryPolicy(60, 5, 1, 30, 30), translation)


def _responses(**body: Any):
    return RESPONSES.parse(None, json.dumps({"model": "r", "input": "hi", **body}).encode())


def test_a_chain_of_the_clients_kind_only_is_never_translated():
    request = _responses(include=["reasoning.encrypted_content"])
    shape_for(_route("openai-responses"), RESPONSES, request)
    assert not request.translated and request.degraded == []
    assert request.body["include"] == ["reasoning.encrypted_content"]


def test_a_chain_that_crosses_kinds_is_translated_and_says_what_it_left_out():
    request = _responses(include=["reasoning.encrypted_content"])
    shape_for(_route("openai-responses", "openai"), RESPONSES, request)
    assert request.translated and request.native is not None
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]
    assert request.degraded == [
        "include.reasoning.encrypted_content: nothing of it to return from a chat model"
    ]


def test_a_strict_route_refuses_what_the_crossing_would_leave_out():
    with pytest.raises(GatewayError) as refused:
        shape_for(_route("openai", translation="strict"), RESPONSES, _responses(store=True))
    assert refused.value.param == "store" and "strictly" in refused.value.message
    request = _responses(store=True)  # passthrough is not a translation
    shape_for(_route("openai-responses", translation="strict"), RESPONSES, request)


@pytest.mark.parametrize(
    "state", [{"previous_response_id": "resp_1"}, {"store": True}, {"conversation": "c"}]
)
def test_a_stateful_responses_call_is_pinned_to_the_first_responses_deployment(state):
    route = _route("openai", "openai-responses", "openai-responses")
    pinned_route = pinned(route, _responses(**state))
    assert [d.name for d in pinned_route.chain] == ["d1-openai-responses"]
    assert pinned(route, _responses(store=False)) is route
    assert pinned(_route("openai"), _responses(**state)).chain == _route("openai").chain


def test_stored_state_cannot_cross_to_chat():
    with pytest.raises(GatewayError) as refused:
        shape_for(_route("openai"), RESPONSES, _responses(previous_response_id="resp_1"))
    assert refused.value.param == "previous_response_id"


# --- the rules, Messages → chat ------------------------------------------------------------

BASE = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
FAILED_RESULT = [
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "boom", "is_error": True}
        ],
    },
]
MESSAGES_RULES = [
    (
        "enabled thinking → effort by budget",
        {"thinking": {"type": "enabled", "budget_tokens": 8000}},
        {"reasoning_effort": "medium"},
        ["thinking"],
    ),
    ("adaptive thinking dropped", {"thinking": {"type": "adaptive"}}, {}, ["thinking"]),
    ("disabled thinking says nothing", {"thinking": {"type": "disabled"}}, {}, []),
    (
        "output_config.effort → reasoning_effort",
        {"output_config": {"effort": "max"}, "thinking": {"type": "adaptive"}},
        {"reasoning_effort": "high"},
        ["output_config.effort", "thinking"],
    ),
    (
        "output_config.format → response_format",
        {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": {"type": "object"}},
            }
        },
        [],
    ),
    (
        "context_management not sent on",
        {"context_management": {"edits": []}},
        {},
        ["context_management"],
    ),
    (
        "server tools not offered",
        {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        {},
        ["tools[0]"],
    ),
    (
        "metadata beyond user_id",
        {"metadata": {"user_id": "u", "x": 1}},
        {"user": "u"},
        ["metadata.x"],
    ),
]


@pytest.mark.parametrize(
    ("label", "extra", "chat_extra", "noted"), MESSAGES_RULES, ids=[r[0] for r in MESSAGES_RULES]
)
def test_messages_to_chat_applies_the_documented_rule(label, extra, chat_extra, noted):
    degrade = Degrade()
    chat = messages_request_to_chat({**BASE, **extra}, degrade)
    expected = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
    assert chat == expected | chat_extra
    assert [n.split(":")[0] for n in degrade.notes] == noted


def test_a_failed_tool_result_reaches_chat_marked_as_an_error():
    degrade = Degrade()
    chat = messages_request_to_chat({**BASE, "messages": BASE["messages"] + FAILED_RESULT}, degrade)
    assert chat["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "t",
        "content": "[tool error] boom",
    }
    assert degrade.notes == [
        "messages[2].content[0].is_error: sent as the tool text marked '[tool error] '"
    ]


def test_a_system_message_mid_conversation_keeps_its_place():
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": [{"type": "text", "text": "reminder"}]},
    ]
    chat = messages_request_to_chat({**BASE, "messages": messages})
    assert chat["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "reminder"},
    ]


def test_earlier_thinking_blocks_are_not_sent_to_chat():
    turn = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "ok"},
        ],
    }
    degrade = Degrade()
    chat = messages_request_to_chat({**BASE, "messages": [*BASE["messages"], turn]}, degrade)
    assert chat["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}],
    }
    assert degrade.notes[0].startswith("messages[1].content[0]:")


# --- the rules, Responses → chat, and chat → Messages ---------------------------------------

RESPONSES_RULES = [
    (
        "include",
        {"include": ["reasoning.encrypted_content"]},
        {},
        ["include.reasoning.encrypted_content"],
    ),
    (
        "reasoning.summary dropped, effort kept",
        {"reasoning": {"effort": "low", "summary": "auto"}},
        {"reasoning_effort": "low"},
        ["reasoning.summary"],
    ),
    ("client_metadata", {"client_metadata": {"a": "b"}}, {}, ["client_metadata"]),
    (
        "namespace tools → their functions",
        {
            "tools": [
                {
                    "type": "namespace",
                    "name": "ns",
                    "tools": [{"type": "function", "name": "f", "parameters": {}}],
                },
                {"type": "web_search"},
            ]
        },
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        ["tools[0]", "tools[1]"],
    ),
    ("store: true", {"store": True}, {}, ["store"]),
]


@pytest.mark.parametrize(
    ("label", "extra", "chat_extra", "noted"), RESPONSES_RULES, ids=[r[0] for r in RESPONSES_RULES]
)
def test_responses_to_chat_applies_the_documented_rule(label, extra, chat_extra, noted):
    degrade = Degrade()
    chat = responses_request_to_chat({"model": "m", "input": "hi", **extra}, degrade)
    assert chat == {"model": "m", "messages": [{"role": "user", "content": "hi"}]} | chat_extra
    assert [n.split(":")[0] for n in degrade.notes] == noted


def test_client_metadata_is_kept_in_the_note_for_the_audit():
    degrade = Degrade()
    responses_request_to_chat(
        {"model": "m", "input": "hi", "client_metadata": {"agent": "x"}}, degrade
    )
    assert degrade.notes == ['client_metadata: not sent on (kept here: {"agent": "x"})']


def test_chat_to_messages_keeps_a_late_system_message_in_place():
    chat = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yes"},
            {"role": "system", "content": "later"},
        ],
        "reasoning_effort": "low",
    }
    degrade = Degrade()
    messages = chat_request_to_messages(chat, degrade=degrade)
    assert messages["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "<system>\nlater\n</system>"}],
    }
    assert "reasoning_effort" not in messages
    assert [n.split(":")[0] for n in degrade.notes] == ["reasoning_effort", "messages[2]"]


def test_a_native_request_reads_only_what_the_path_needs():
    request = ANTHROPIC.parse(
        None, b'{"model":"r","max_tokens":5,"stream":true,"messages":[],"top_k":3,"whatever":{}}'
    )
    assert (request.model, request.stream, request.translated) == ("r", True, False)
    for bad, param in (
        (b'{"model":"r","messages":[],"stream":"yes"}', "stream"),
        (b'{"model":"r"}', "messages"),
    ):
        with pytest.raises(GatewayError) as refused:
            ANTHROPIC.parse(None, bad)
        assert refused.value.param == param
    assert dataclasses.is_dataclass(request)


def test_a_body_the_scanner_cannot_follow_still_goes_with_its_fields(monkeypatch):
    import routing.request_path.protocols.native as native_module

    def confused(*args: Any) -> dict[str, tuple[int, int]]:
        raise ValueError("confused")

    monkeypatch.setattr(native_module, "_spans", confused)
    out = native_bytes(NativeBody("anthropic", b'{"model":"r","x":[1]}'), "real")
    assert json.loads(out) == {"model": "real", "x": [1]}
