"""Reading a client's request body: what is refused (400, OpenAI's shape, the right `param`),
what passes through untouched, and the body sent upstream."""

import json
from typing import Any

import pytest

from core.errors import GatewayError, bad_request, capacity_exhausted, unauthorized
from routing.request_path.payloads import ClientRequest, Endpoint, parse_request, upstream_body

CHAT = Endpoint.CHAT
COMPLETIONS = Endpoint.COMPLETIONS
EMBEDDINGS = Endpoint.EMBEDDINGS
MESSAGES = [{"role": "user", "content": "hi"}]


def _chat(**fields: Any) -> bytes:
    return json.dumps({"model": "smart", "messages": MESSAGES, **fields}).encode()


def _refused(endpoint: Endpoint, raw: bytes) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        parse_request(endpoint, raw)
    return info.value


# --- refused ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "raw", "param", "message_part"),
    [
        # not JSON / not an object
        (CHAT, b"{not json", None, "not valid JSON"),
        (CHAT, b"", None, "not valid JSON"),
        (CHAT, b'{"model": "smart",', None, "not valid JSON"),
        (CHAT, b"\xff\xfe\x00garbage", None, "not valid JSON"),
        (CHAT, b"[]", None, "JSON object"),
        (CHAT, b'[{"model": "smart"}]', None, "JSON object"),
        (CHAT, b'"a string"', None, "JSON object"),
        (CHAT, b"42", None, "JSON object"),
        (CHAT, b"null", None, "JSON object"),
        # model
        (CHAT, json.dumps({"messages": MESSAGES}).encode(), "model", "model"),
        (CHAT, json.dumps({"model": None, "messages": MESSAGES}).encode(), "model", "model"),
        (CHAT, json.dumps({"model": 5, "messages": MESSAGES}).encode(), "model", "string"),
        (CHAT, json.dumps({"model": ["a"], "messages": MESSAGES}).encode(), "model", "string"),
        (CHAT, json.dumps({"model": "", "messages": MESSAGES}).encode(), "model", "non-empty"),
        # field types
        (CHAT, _chat(stream="yes"), "stream", "boolean"),
        (CHAT, _chat(stream=1), "stream", "boolean"),
        (CHAT, _chat(max_tokens="10"), "max_tokens", "integer"),
        (CHAT, _chat(max_tokens=10.5), "max_tokens", "integer"),
        (CHAT, _chat(max_tokens=True), "max_tokens", "integer"),
        (CHAT, _chat(max_tokens=0), "max_tokens", "at least 1"),
        (CHAT, _chat(max_tokens=-5), "max_tokens", "at least 1"),
        (CHAT, _chat(max_completion_tokens=0), "max_completion_tokens", "at least 1"),
        (CHAT, _chat(n=0), "n", "at least 1"),
        (CHAT, _chat(n="2"), "n", "integer"),
        (CHAT, _chat(temperature=True), "temperature", "number"),
        (CHAT, _chat(temperature="0.5"), "temperature", "number"),
        (CHAT, _chat(top_p=False), "top_p", "number"),
        (CHAT, _chat(seed=1.5), "seed", "integer"),
        (CHAT, _chat(stop=[1]), "stop", "string"),
        (CHAT, _chat(stop=["ok", None]), "stop", "string"),
        (CHAT, _chat(stop=7), "stop", "string"),
        (CHAT, _chat(user=7), "user", "string"),
        (CHAT, _chat(logit_bias=[1]), "logit_bias", "object"),
        (CHAT, _chat(stream_options="usage"), "stream_options", "object"),
        # messages
        (CHAT, json.dumps({"model": "smart"}).encode(), "messages", "messages"),
        (CHAT, _chat(messages=[]), "messages", "non-empty array"),
        (CHAT, _chat(messages="hello"), "messages", "non-empty array"),
        (CHAT, _chat(messages={"role": "user"}), "messages", "non-empty array"),
        (CHAT, _chat(messages=[{"content": "no role"}]), "messages[0]", "role"),
        (CHAT, _chat(messages=[*MESSAGES, {"role": 3}]), "messages[1]", "role"),
        (CHAT, _chat(messages=[*MESSAGES, "text"]), "messages[1]", "role"),
        # completions / embeddings
        (COMPLETIONS, json.dumps({"model": "smart"}).encode(), "prompt", "prompt"),
        (COMPLETIONS, json.dumps({"model": "smart", "prompt": []}).encode(), "prompt", "prompt"),
        (COMPLETIONS, json.dumps({"model": "smart", "prompt": 3}).encode(), "prompt", "prompt"),
        (EMBEDDINGS, json.dumps({"model": "smart"}).encode(), "input", "input"),
        (EMBEDDINGS, json.dumps({"model": "smart", "input": {}}).encode(), "input", "input"),
        (
            EMBEDDINGS,
            json.dumps({"model": "smart", "input": "x", "stream": True}).encode(),
            "stream",
            "Embeddings cannot be streamed",
        ),
        # hostile input: never a 500
        (CHAT, b"[" * 10_000 + b"]" * 10_000, None, "nested too deeply"),
        (CHAT, b'{"model": "smart", "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", None, "nested"),
        (EMBEDDINGS, b'{"a":' * 10_000 + b"1" + b"}" * 10_000, None, "nested too deeply"),
        (CHAT, _chat(max_tokens=10**400), "max_tokens", "out of range"),
        (CHAT, _chat(n=10**400), "n", "out of range"),
        (CHAT, _chat(n=10_001), "n", "out of range"),
        (CHAT, _chat(seed=2**64), "seed", "out of range"),
        (CHAT, _chat(temperature=1e300), "temperature", "out of range"),
        (CHAT, _chat()[:-1] + b', "user": ' + b"7" * 5000 + b"}", None, "out of range"),
        (CHAT, _chat()[:-1] + b', "temperature": NaN}', "temperature", "NaN"),
        (CHAT, _chat()[:-1] + b', "top_p": Infinity}', "top_p", "NaN or Infinity"),
        (CHAT, _chat()[:-1] + b', "top_p": 1e400}', "top_p", "Infinity"),
        (CHAT, _chat(tools=[{"x": 1}]).replace(b'"x": 1', b'"x": -Infinity'), "tools", "NaN"),
        (CHAT, _chat(model="fast\ud800"), "model", "not a valid model"),
        (CHAT, _chat(model="fast\x00"), "model", "not a valid model"),
        (CHAT, _chat(model="m" * 201), "model", "not a valid model"),
        (EMBEDDINGS, json.dumps({"model": "m", "input": ["a"] * 2049}).encode(), "input", "2048"),
        (
            COMPLETIONS,
            json.dumps({"model": "m", "prompt": [[1]] * 2049}).encode(),
            "prompt",
            "2048",
        ),
        # stream_options only with stream
        (CHAT, _chat(stream_options={"include_usage": True}), "stream_options", "stream"),
        (
            CHAT,
            _chat(stream=False, stream_options={"include_usage": True}),
            "stream_options",
            "stream",
        ),
    ],
)
def test_bad_request_is_400_with_param_naming_the_field(
    endpoint: Endpoint, raw: bytes, param: str | None, message_part: str
) -> None:
    error = _refused(endpoint, raw)
    assert error.status == 400
    assert error.type == "invalid_request_error"
    assert error.param == param
    assert message_part in error.message
    body = json.loads(error.body())
    assert body["error"]["param"] == param
    assert body["error"]["message"] == error.message


# --- accepted --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "body", "stream", "wants_usage"),
    [
        (CHAT, {"model": "smart", "messages": MESSAGES}, False, False),
        (CHAT, {"model": "smart", "messages": MESSAGES, "stream": True}, True, False),
        (CHAT, {"model": "smart", "messages": MESSAGES, "stream": False}, False, False),
        (
            CHAT,
            {
                "model": "smart",
                "messages": MESSAGES,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            True,
            True,
        ),
        (
            CHAT,
            {
                "model": "smart",
                "messages": MESSAGES,
                "stream": True,
                "stream_options": {"include_usage": False},
            },
            True,
            False,
        ),
        (
            CHAT,
            {  # "true" is not true: only a JSON true asks for usage
                "model": "smart",
                "messages": MESSAGES,
                "stream": True,
                "stream_options": {"include_usage": "true"},
            },
            True,
            False,
        ),
        (
            CHAT,
            {
                "model": "smart",
                "messages": MESSAGES,
                "max_tokens": 1,
                "n": 2,
                "temperature": 0,
                "top_p": 0.5,
                "stop": ["\n", "END"],
                "seed": 7,
                "user": "u1",
                "logit_bias": {"50256": -100},
            },
            False,
            False,
        ),
        (CHAT, {"model": "smart", "messages": MESSAGES, "stop": "END"}, False, False),
        # null is "not given" for optional fields
        (
            CHAT,
            {
                "model": "smart",
                "messages": MESSAGES,
                "max_tokens": None,
                "stream": None,
                "stream_options": None,
                "temperature": None,
            },
            False,
            False,
        ),
        (COMPLETIONS, {"model": "smart", "prompt": "Say hi"}, False, False),
        (COMPLETIONS, {"model": "smart", "prompt": ["a", "b"], "stream": True}, True, False),
        (EMBEDDINGS, {"model": "smart", "input": "text"}, False, False),
        (EMBEDDINGS, {"model": "smart", "input": ["a", "b"]}, False, False),
        (EMBEDDINGS, {"model": "smart", "input": [[1, 2, 3]], "stream": False}, False, False),
    ],
)
def test_valid_request_is_parsed(
    endpoint: Endpoint, body: dict[str, Any], stream: bool, wants_usage: bool
) -> None:
    parsed = parse_request(endpoint, json.dumps(body).encode())
    assert parsed.endpoint is endpoint
    assert parsed.model == "smart"
    assert parsed.stream is stream
    assert parsed.wants_usage is wants_usage
    assert parsed.body == body


def test_unknown_fields_are_kept_untouched() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {
        "model": "smart",
        "messages": [{"role": "tool", "tool_call_id": "c1", "content": "42"}],
        "tools": tools,
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
        "some_future_parameter": [1, {"x": None}],
    }
    parsed = parse_request(CHAT, json.dumps(body).encode())
    assert parsed.body["tools"] == tools
    assert parsed.body["tool_choice"] == "auto"
    assert parsed.body["response_format"] == {"type": "json_object"}
    assert parsed.body["some_future_parameter"] == [1, {"x": None}]
    sent = json.loads(upstream_body(parsed, "gpt-x"))
    assert sent["tools"] == tools
    assert sent["some_future_parameter"] == [1, {"x": None}]


def test_utf8_body_with_non_ascii_text_is_accepted() -> None:
    raw = json.dumps(
        {"model": "smart", "messages": [{"role": "user", "content": "你好"}]}, ensure_ascii=False
    ).encode()
    parsed = parse_request(CHAT, raw)
    assert parsed.body["messages"][0]["content"] == "你好"


# --- upstream_body ---------------------------------------------------------------------


def _parsed(endpoint: Endpoint = CHAT, **fields: Any) -> ClientRequest:
    base: dict[str, Any] = {"model": "smart"}
    if endpoint is CHAT:
        base["messages"] = MESSAGES
    elif endpoint is COMPLETIONS:
        base["prompt"] = "p"
    else:
        base["input"] = "i"
    return parse_request(endpoint, json.dumps(base | fields).encode())


@pytest.mark.parametrize("endpoint", [CHAT, COMPLETIONS, EMBEDDINGS])
def test_upstream_body_replaces_model_and_adds_nothing_when_not_streaming(
    endpoint: Endpoint,
) -> None:
    request = _parsed(endpoint, temperature=0.2)
    sent = json.loads(upstream_body(request, "upstream-model-7b"))
    expected = dict(request.body, model="upstream-model-7b")
    assert sent == expected
    assert "stream_options" not in sent


@pytest.mark.parametrize(
    ("client_options", "expected_options"),
    [
        (None, {"include_usage": True}),
        ({"include_usage": True}, {"include_usage": True}),
        ({"include_usage": False}, {"include_usage": True}),
        (
            {"include_usage": False, "continuous_usage_stats": True},
            {"include_usage": True, "continuous_usage_stats": True},
        ),
        ({"something_new": "kept"}, {"something_new": "kept", "include_usage": True}),
    ],
)
def test_upstream_body_always_asks_for_usage_on_streams_keeping_other_options(
    client_options: dict[str, Any] | None, expected_options: dict[str, Any]
) -> None:
    fields: dict[str, Any] = {"stream": True}
    if client_options is not None:
        fields["stream_options"] = client_options
    request = _parsed(CHAT, **fields)
    wants_usage_before = request.wants_usage
    sent = json.loads(upstream_body(request, "big-model"))
    assert sent["model"] == "big-model"
    assert sent["stream"] is True
    assert sent["stream_options"] == expected_options
    assert sent["messages"] == MESSAGES
    # What the client asked for is unchanged: the usage chunk is ours, not theirs.
    assert request.wants_usage is wants_usage_before
    assert request.wants_usage is (client_options == {"include_usage": True})
    assert request.body["model"] == "smart"
    assert request.body.get("stream_options") == client_options


def test_upstream_body_is_compact_json_bytes() -> None:
    request = _parsed(CHAT)
    raw = upstream_body(request, "m")
    assert raw == b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


# --- GatewayError ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status", "expected"),
    [
        (
            bad_request("bad thing", param="max_tokens"),
            400,
            {
                "message": "bad thing",
                "type": "invalid_request_error",
                "code": None,
                "param": "max_tokens",
            },
        ),
        (
            bad_request("no json"),
            400,
            {"message": "no json", "type": "invalid_request_error", "code": None, "param": None},
        ),
        (
            unauthorized("Invalid API key."),
            401,
            {
                "message": "Invalid API key.",
                "type": "authentication_error",
                "code": "invalid_api_key",
                "param": None,
            },
        ),
    ],
)
def test_gateway_error_body_has_openai_shape(
    error: GatewayError, status: int, expected: dict[str, Any]
) -> None:
    assert error.status == status
    assert json.loads(error.body()) == {"error": expected}


def test_gateway_error_response_carries_status_json_and_headers() -> None:
    error = capacity_exhausted(7)
    response = error.response()
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"] == "7"
    payload = json.loads(response.content)
    assert set(payload) == {"error"}
    assert set(payload["error"]) == {"message", "type", "code", "param"}
    assert payload["error"]["code"] == "capacity_exhausted"
    assert payload["error"]["type"] == "server_error"


def test_parse_error_body_is_openai_shape() -> None:
    error = _refused(CHAT, _chat(max_tokens=0))
    payload = json.loads(error.body())
    assert payload == {
        "error": {
            "message": "'max_tokens' must be at least 1.",
            "type": "invalid_request_error",
            "code": None,
            "param": "max_tokens",
        }
    }
    assert str(error) == "'max_tokens' must be at least 1."
