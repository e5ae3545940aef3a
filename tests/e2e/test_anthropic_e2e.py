"""Anthropic in and out, end to end: the official `anthropic` SDK against
`/v1/messages` served by OpenAI-kind deployments (plain, streaming, tools), the `openai` SDK
against `/v1/chat/completions` served by an Anthropic-kind deployment, and a mixed chain
whose Anthropic deployment answers 529 and falls back to the OpenAI one, the audit showing
both attempts and both protocols.

Upstreams: a simulator with Anthropic-shaped and OpenAI-shaped models, and a small
OpenAI-shaped server run by the test that answers with a tool call and shows what it got."""

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from aiohttp import web

from tests.support import (
    GatewayHandle,
    SimulatorHandle,
    free_port,
    start_simulator,
    wait_until_served,
)

HI = [{"role": "user", "content": "hello"}]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    chunk = {
        "id": "chatcmpl-t",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "tool-model",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class ToolUpstream:
    """OpenAI-shaped: calls the first tool it is offered, with {"city": "Oslo"}."""

    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(body)
        name = body["tools"][0]["function"]["name"]
        call = {"id": "call_1", "type": "function"}
        usage = {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28}
        if not body.get("stream"):
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {**call, "function": {"name": name, "arguments": '{"city": "Oslo"}'}}
                ],
            }
            answer = {
                "id": "chatcmpl-t",
                "object": "chat.completion",
                "created": 1,
                "model": "tool-model",
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                "usage": usage,
            }
            return web.json_response(answer)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(
            _chunk({"role": "assistant", "content": ""})
            + _chunk(
                {"tool_calls": [{"index": 0, **call, "function": {"name": name, "arguments": ""}}]}
            )
            + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]})
            + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]})
            + _chunk({}, "tool_calls")
            + _chunk(None, usage=usage)
            + b"data: [DONE]\n\n"
        )
        await response.write_eof()
        return response

    def run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self._runner = runner = web.AppRunner(app, shutdown_timeout=0.5)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> None:
        threading.Thread(target=self.run, daemon=True).start()
        self._ready.wait(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)


@pytest.fixture(scope="module")
def two_kinds() -> Iterator[SimulatorHandle]:
    yield from start_simulator(
        "--model", "claude-x:8:anthropic", "--model", "claude-full:0:anthropic",
        "--model", "gpt-y:8",
    )  # fmt: skip


@pytest.fixture(scope="module")
def tools(e2e_database: str) -> Iterator[ToolUpstream]:
    served = ToolUpstream()
    served.start()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def catalog(
    e2e_database: str, two_kinds: SimulatorHandle, tools: ToolUpstream, django_db_blocker: Any
) -> None:
    from routing.catalog.config_file import apply_config, validate_config

    config = {
        "upstreams": [
            {"name": "k-openai", "base_url": f"{two_kinds.url}/v1"},
            {"name": "k-anthropic", "kind": "anthropic", "base_url": f"{two_kinds.url}/v1"},
            {"name": "k-tools", "base_url": f"http://127.0.0.1:{tools.port}/v1"},
        ],
        "deployments": [
            {"name": "k-gpt", "upstream": "k-openai", "model": "gpt-y"},
            {"name": "k-claude", "upstream": "k-anthropic", "model": "claude-x"},
            # Always full: 529 overloaded_error; the breaker stays out of the way here.
            {
                "name": "k-claude-full",
                "upstream": "k-anthropic",
                "model": "claude-full",
                "breaker_threshold": 0,
            },
            {"name": "k-tools", "upstream": "k-tools", "model": "tool-model"},
        ],
        "routes": [
            {"name": "k-gpt", "chain": ["k-gpt"]},
            {"name": "k-claude", "chain": ["k-claude"]},
            {"name": "k-mixed", "chain": ["k-claude-full", "k-gpt"]},
            {"name": "k-tools", "chain": ["k-tools"]},
            {"name": "k-strict", "chain": ["k-gpt"], "translation": "strict"},
        ],
        "applications": [
            {
                "slug": "kinds",
                "team": "demo",
                "routes": ["k-gpt", "k-claude", "k-mixed", "k-tools", "k-strict"],
            }
        ],
    }
    with django_db_blocker.unblock():
        apply_config(validate_config(config))


@pytest.fixture
def key(gateway: GatewayHandle, catalog: None, issue_key) -> str:
    plaintext = issue_key(application="kinds").plaintext
    wait_until_served(gateway.url, plaintext, "k-claude", HI)
    return plaintext


@pytest.fixture
def claude(gateway: GatewayHandle, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)


@pytest.fixture
def gpt(gateway: GatewayHandle, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)


def test_the_anthropic_sdk_served_by_an_openai_deployment(claude, call_record):
    raw = claude.messages.with_raw_response.create(model="k-gpt", max_tokens=5, messages=HI)
    message = raw.parse()
    assert message.content[0].text == "tok " * 5
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 5 and message.usage.input_tokens > 0
    record = call_record(raw.headers["x-sluice-request-id"])
    assert (record.client_protocol, record.upstream_protocol) == ("anthropic", "openai")
    assert record.endpoint == "messages"
    assert (record.tokens_in, record.tokens_out) == (message.usage.input_tokens, 5)


def test_the_anthropic_sdk_streams_through_an_openai_deployment(claude, call_record):
    with claude.messages.stream(model="k-gpt", max_tokens=6, messages=HI) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
        request_id = stream.response.headers["x-sluice-request-id"]
    assert text == "tok " * 6
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 6
    record = call_record(request_id)
    assert record.stream and record.client_protocol == "anthropic"
    assert (record.tokens_in, record.tokens_out) == (final.usage.input_tokens, 6)


def test_the_anthropic_sdk_with_tools(claude, tools):
    message = claude.messages.create(
        model="k-tools",
        max_tokens=50,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
    )
    sent = tools.seen[-1]
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert message.stop_reason == "tool_use"
    [call] = [b for b in message.content if b.type == "tool_use"]
    assert (call.id, call.name, call.input) == ("call_1", "get_weather", {"city": "Oslo"})
    assert (message.usage.input_tokens, message.usage.output_tokens) == (21, 7)

    # The tool's result goes back as a `tool` message after the assistant's call.
    claude.messages.create(
        model="k-tools",
        max_tokens=50,
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": [call.model_dump()]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "12 C"}],
            },
        ],
    )
    roles = [m["role"] for m in tools.seen[-1]["messages"]]
    assert roles == ["user", "assistant", "tool"]
    assert tools.seen[-1]["messages"][1]["tool_calls"][0]["function"]["arguments"] == (
        '{"city": "Oslo"}'
    )

    with claude.messages.stream(
        model="k-tools", max_tokens=50, tools=[WEATHER], messages=HI
    ) as stream:
        final = stream.get_final_message()
    [call] = [b for b in final.content if b.type == "tool_use"]
    assert call.input == {"city": "Oslo"} and final.stop_reason == "tool_use"


def test_the_openai_sdk_served_by_an_anthropic_deployment(gpt, call_record):
    raw = gpt.chat.completions.with_raw_response.create(
        model="k-claude", messages=[{"role": "system", "content": "brief"}, *HI], max_tokens=4
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "tok " * 4
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == 4 and completion.usage.prompt_tokens > 0
    record = call_record(raw.headers["x-sluice-request-id"])
    assert (record.client_protocol, record.upstream_protocol) == ("openai", "anthropic")
    assert (record.tokens_in, record.tokens_out) == (completion.usage.prompt_tokens, 4)

    stream = gpt.chat.completions.create(
        model="k-claude",
        messages=HI,
        max_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok " * 3
    assert chunks[-1].usage.completion_tokens == 3


def test_a_mixed_chain_falls_back_from_a_529_to_the_openai_deployment(
    claude, gpt, call_record, two_kinds
):
    before = two_kinds.stats("claude-full")["capacity_errors"]
    raw = gpt.chat.completions.with_raw_response.create(model="k-mixed", messages=HI)
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-sluice-served-model"] == "k-gpt"
    assert two_kinds.stats("claude-full")["capacity_errors"] == before + 1
    record = call_record(raw.headers["x-sluice-request-id"])
    attempts = list(record.attempts.order_by("number"))
    assert [(a.deployment, a.status_code, a.error_class) for a in attempts] == [
        ("k-claude-full", 529, "capacity"),
        ("k-gpt", 200, ""),
    ]
    assert record.fell_back and record.upstream_protocol == "openai"

    # The same through /v1/messages, streaming: the client never sees the 529.
    with claude.messages.stream(model="k-mixed", max_tokens=2, messages=HI) as stream:
        assert "".join(stream.text_stream) == "tok tok "


def test_errors_reach_the_anthropic_sdk_in_its_shape(gateway, claude, key, call_record):
    bad = anthropic.Anthropic(base_url=gateway.url, api_key="sk-sluice-nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        bad.messages.create(model="k-gpt", max_tokens=5, messages=HI)
    assert refused.value.body["type"] == "error"
    assert refused.value.body["error"]["type"] == "authentication_error"
    record = call_record(refused.value.response.headers["x-sluice-request-id"])
    assert (record.requested_model, record.outcome) == ("k-gpt", "unauthorized")

    # What chat has no equivalent for is left out and recorded; a strict route refuses it.
    raw = claude.messages.with_raw_response.create(
        model="k-gpt", max_tokens=5, messages=HI, extra_body={"top_k": 3}
    )
    assert raw.parse().content[0].text
    assert "top_k" in call_record(raw.headers["x-sluice-request-id"]).degraded
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(
            model="k-strict", max_tokens=5, messages=HI, stream=True, extra_body={"top_k": 3}
        )
    assert "top_k" in refused.value.body["error"]["message"]
    record = call_record(refused.value.response.headers["x-sluice-request-id"])
    assert (record.requested_model, record.stream, record.status_code) == ("k-strict", True, 400)

    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="no-such-route", max_tokens=5, messages=HI)

    # A chat request crossing to an Anthropic deployment: what Messages has no equivalent
    # for is left out, and the call's audit row says so.
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "k-claude", "messages": HI, "logit_bias": {"1": 3}},
    )
    assert response.status_code == 200
    record = call_record(response.headers["x-sluice-request-id"])
    assert record.degraded.startswith("logit_bias: ")


def test_count_tokens_estimates_without_an_upstream(claude, gateway, key):
    small = claude.messages.count_tokens(model="k-gpt", messages=HI)
    large = claude.messages.count_tokens(
        model="k-gpt", messages=[{"role": "user", "content": "word " * 400}]
    )
    assert 0 < small.input_tokens < large.input_tokens
    response = httpx.post(
        f"{gateway.url}/v1/messages/count_tokens",
        headers={"x-api-key": "sk-sluice-nope"},
        json={"model": "k-gpt", "messages": HI},
    )
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
