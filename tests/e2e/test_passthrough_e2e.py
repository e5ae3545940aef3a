"""Native passthrough, end to end: a Messages client on an `anthropic` deployment and a
Responses client on an `openai-responses` deployment get their body (and anthropic-beta /
anthropic-version) sent upstream as it came, and the answer and its stream events back as
they came; crossing kinds translates by the documented rules; fallback, a full chain and a
pinned stateful call behave as for every call.

Upstreams: the simulator (Anthropic- and Responses-shaped models, thinking blocks, tool
calls on request) and a small capturing server run by the test that records the bytes it
gets and answers with fixed bytes."""

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

from tests.support import GatewayHandle, SimulatorHandle, free_port, start_simulator, wait_until

ANTHROPIC_ANSWER = (
    b'{"id":"msg_cap","type":"message","role":"assistant","model":"upstream-claude",'
    b'"content":[{"type":"thinking","thinking":"hm","signature":"sig=="},'
    b'{"type":"text","text":"native!"}],"stop_reason":"end_turn","stop_sequence":null,'
    b'"usage":{"input_tokens":11,"cache_read_input_tokens":5,"output_tokens":3,'
    b'"server_tool_use":null}}'
)
ANTHROPIC_STREAM = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"msg_s","type":"message",'
    b'"role":"assistant","model":"upstream-claude","content":[],"stop_reason":null,'
    b'"usage":{"input_tokens":7,"output_tokens":1}}}\n\n'
    b"event: content_block_start\n"
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking",'
    b'"thinking":""}}\n\n'
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta",'
    b'"signature":"abc"}}\n\n'
    b"event: ping\ndata: {}\n\n"
    b"event: message_delta\n"
    b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":9}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
RESPONSES_ANSWER = (
    b'{"id":"resp_cap","object":"response","created_at":1,"status":"completed","model":'
    b'"upstream-gpt","output":[{"type":"reasoning","id":"rs_1","encrypted_content":"ENC",'
    b'"summary":[]},{"type":"message","id":"m1","role":"assistant","status":"completed",'
    b'"content":[{"type":"output_text","text":"native!","annotations":[]}]}],'
    b'"usage":{"input_tokens":13,"output_tokens":4,"total_tokens":17}}'
)
RESPONSES_STREAM = (
    b'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
    b'"response":{"id":"resp_s","object":"response","status":"in_progress","model":'
    b'"upstream-gpt","output":[],"usage":null}}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"sequence_number":1,"item_id":"m","output_index":0,"content_index":0,"delta":"hi"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed","sequence_number":2,'
    b'"response":{"id":"resp_s","object":"response","status":"completed","model":'
    b'"upstream-gpt","output":[],"usage":{"input_tokens":6,"output_tokens":2,'
    b'"total_tokens":8}}}\n\n'
)
HI = [{"role": "user", "content": "hello"}]


class Capture:
    """Records each request's path, headers and exact bytes; answers with fixed bytes."""

    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.seen.append((request.path, dict(request.headers), raw))
        stream = json.loads(raw).get("stream") is True
        anthropic_path = request.path.endswith("/messages")
        if not stream:
            body = ANTHROPIC_ANSWER if anthropic_path else RESPONSES_ANSWER
            headers = {"request-id": "req_upstream_1"}
            return web.Response(body=body, content_type="application/json", headers=headers)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        events = ANTHROPIC_STREAM if anthropic_path else RESPONSES_STREAM
        for event in events.split(b"\n\n")[:-1]:  # event by event, as a provider sends
            await response.write(event + b"\n\n")
        await response.write_eof()
        return response

    def run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/messages", self.handle)
        app.router.add_post("/v1/responses", self.handle)
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
def native_sim() -> Iterator[SimulatorHandle]:
    yield from start_simulator(
        "--model", "claude-n:8:anthropic", "--model", "claude-n-full:0:anthropic",
        "--model", "gpt-r:8:openai-responses", "--model", "gpt-r-full:0:openai-responses",
        "--model", "gpt-c:8", "--model", "claude-cut:8:anthropic",
        "--fault", "claude-cut:stream_cut=1",
    )  # fmt: skip


@pytest.fixture(scope="module")
def capture(e2e_database: str) -> Iterator[Capture]:
    served = Capture()
    served.start()
    yield served
    served.stop()


@pytest.fixture(scope="module")
def catalog(
    e2e_database: str, native_sim: SimulatorHandle, capture: Capture, django_db_blocker: Any
) -> None:
    from routing.catalog.config_file import apply_config, validate_config

    sim, cap = f"{native_sim.url}/v1", f"http://127.0.0.1:{capture.port}/v1"
    config = {
        "upstreams": [
            {"name": "n-anthropic", "kind": "anthropic", "base_url": sim},
            {"name": "n-responses", "kind": "openai-responses", "base_url": sim},
            {"name": "n-chat", "base_url": sim},
            {
                "name": "cap-a",
                "kind": "anthropic",
                "base_url": cap,
                "api_key_env": "SLUICE_UPSTREAM_NO_SUCH",
            },
            {"name": "cap-r", "kind": "openai-responses", "base_url": cap},
        ],
        "deployments": [
            {"name": "n-claude", "upstream": "n-anthropic", "model": "claude-n"},
            {
                "name": "n-claude-full",
                "upstream": "n-anthropic",
                "model": "claude-n-full",
                "breaker_threshold": 0,
            },
            {"name": "n-resp", "upstream": "n-responses", "model": "gpt-r"},
            {
                "name": "n-resp-full",
                "upstream": "n-responses",
                "model": "gpt-r-full",
                "breaker_threshold": 0,
            },
            {"name": "n-chat", "upstream": "n-chat", "model": "gpt-c"},
            {
                "name": "n-claude-cut",
                "upstream": "n-anthropic",
                "model": "claude-cut",
                "breaker_threshold": 0,
            },
            {"name": "cap-a", "upstream": "cap-a", "model": "cap-a"},
            {"name": "cap-a-renamed", "upstream": "cap-a", "model": "upstream-claude"},
            {"name": "cap-r", "upstream": "cap-r", "model": "cap-r"},
        ],
        "routes": [
            {"name": "n-claude", "chain": ["n-claude"]},
            {"name": "n-resp", "chain": ["n-resp"]},
            {"name": "cap-a", "chain": ["cap-a"]},
            {"name": "cap-a-renamed", "chain": ["cap-a-renamed"]},
            {"name": "cap-r", "chain": ["cap-r"]},
            {"name": "n-claude-fallback", "chain": ["n-claude-full", "n-claude"]},
            {"name": "n-resp-fallback", "chain": ["n-resp-full", "n-resp"]},
            {"name": "n-claude-cross", "chain": ["n-claude-full", "n-chat"]},
            {"name": "n-resp-cross", "chain": ["n-resp-full", "n-chat"]},
            {"name": "n-full", "chain": ["n-claude-full", "n-resp-full"], "timeout_seconds": 2},
            {"name": "n-stateful", "chain": ["n-chat", "n-resp"]},
            {"name": "n-chat-to-resp", "chain": ["n-resp"]},
            {"name": "n-claude-cut", "chain": ["n-claude-cut"]},
        ],
        "applications": [
            {
                "slug": "natives",
                "team": "demo",
                "routes": [
                    "n-claude",
                    "n-resp",
                    "cap-a",
                    "cap-a-renamed",
                    "cap-r",
                    "n-claude-fallback",
                    "n-resp-fallback",
                    "n-claude-cross",
                    "n-resp-cross",
                    "n-full",
                    "n-stateful",
                    "n-chat-to-resp",
                    "n-claude-cut",
                ],
            }
        ],
    }
    with django_db_blocker.unblock():
        apply_config(validate_config(config))


@pytest.fixture
def key(gateway: GatewayHandle, catalog: None, issue_key) -> str:
    plaintext = issue_key(application="natives").plaintext
    wait_until(
        lambda: (
            httpx.post(
                f"{gateway.url}/v1/messages",
                headers={"x-api-key": plaintext},
                json={"model": "n-full", "max_tokens": 5, "messages": HI},
            ).status_code
            != 404
        ),
    )
    return plaintext


def _post(gateway: GatewayHandle, key: str, path: str, raw: bytes, **headers: str):
    return httpx.post(
        f"{gateway.url}/v1/{path}",
        content=raw,
        headers={"authorization": f"Bearer {key}", "content-type": "application/json", **headers},
    )


# A Messages body with what chat cannot say, odd spacing and key order kept.
MESSAGES_RAW = (
    b'{ "max_tokens" : 64, "model":"cap-a",\n "thinking": {"type": "adaptive"},'
    b' "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},'
    b' "output_config": {"effort": "high"},'
    b' "messages": [{"role": "user", "content": [{"type": "text", "text": "caf\\u00e9",'
    b' "cache_control": {"type": "ephemeral"}}]},'
    b' {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",'
    b' "input": {"command": "false"}}]},'
    b' {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",'
    b' "content": "exit 1", "is_error": true}]}],'
    b' "metadata": {"user_id": "u", "model": "not-this-one"}}'
)
RESPONSES_RAW = (
    b'{"model": "cap-r", "input": [{"role": "user", "content": "hi"},'
    b' {"type": "reasoning", "id": "rs_0", "encrypted_content": "ENC", "summary": []}],'
    b' "include": ["reasoning.encrypted_content"], "reasoning": {"summary": "auto"},'
    b' "client_metadata": {"x": "y"}, "store": false, "tools": [{"type": "namespace",'
    b' "name": "ns", "tools": []}, {"type": "web_search"}], "prompt_cache_key": "k"}'
)


def test_a_messages_body_reaches_an_anthropic_deployment_byte_for_byte(
    gateway, key, capture, call_record
):
    capture.seen.clear()
    beta = "context-management-2025-06-27,interleaved-thinking-2025-05-14"
    response = _post(
        gateway,
        key,
        "messages",
        MESSAGES_RAW,
        **{"anthropic-beta": beta, "anthropic-version": "2023-06-01", "x-api-key": key},
    )
    assert response.status_code == 200
    assert response.content == ANTHROPIC_ANSWER  # the answer as it came
    path, headers, raw = capture.seen[-1]
    assert (path, raw) == ("/v1/messages", MESSAGES_RAW)
    assert headers["anthropic-beta"] == beta and headers["anthropic-version"] == "2023-06-01"
    # The client's key stays here (this upstream has none of its own configured).
    assert not {"authorization", "x-api-key"} & {k.lower() for k in headers}
    assert response.headers["request-id"] == "req_upstream_1"
    record = call_record(response.headers["x-sluice-request-id"])
    assert (record.client_protocol, record.upstream_protocol) == ("anthropic", "anthropic")
    assert (record.tokens_in, record.tokens_out, record.degraded) == (16, 3, "")
    assert record.upstream_model == "upstream-claude"


def test_only_the_model_name_changes_when_the_deployment_names_it_differently(
    gateway, key, capture
):
    capture.seen.clear()
    raw = MESSAGES_RAW.replace(b'"model":"cap-a"', b'"model":"cap-a-renamed"')
    assert _post(gateway, key, "messages", raw).status_code == 200
    sent = capture.seen[-1][2]
    assert sent == MESSAGES_RAW.replace(b'"model":"cap-a"', b'"model":"upstream-claude"')
    assert json.loads(sent)["metadata"]["model"] == "not-this-one"  # only the top level


def test_a_messages_stream_is_relayed_event_for_event(gateway, key, capture, call_record):
    raw = MESSAGES_RAW.replace(b'"max_tokens" : 64,', b'"max_tokens" : 64, "stream": true,')
    response = _post(gateway, key, "messages", raw)
    assert response.status_code == 200
    assert response.content == ANTHROPIC_STREAM
    assert capture.seen[-1][2] == raw
    record = call_record(response.headers["x-sluice-request-id"])
    assert record.stream and (record.tokens_in, record.tokens_out) == (7, 9)


def test_a_responses_body_reaches_an_openai_responses_deployment_byte_for_byte(
    gateway, key, capture, call_record
):
    response = _post(gateway, key, "responses", RESPONSES_RAW)
    assert response.status_code == 200 and response.content == RESPONSES_ANSWER
    path, _, raw = capture.seen[-1]
    assert (path, raw) == ("/v1/responses", RESPONSES_RAW)
    record = call_record(response.headers["x-sluice-request-id"])
    assert (record.client_protocol, record.upstream_protocol) == (
        "openai-responses",
        "openai-responses",
    )
    assert (record.tokens_in, record.tokens_out, record.degraded) == (13, 4, "")

    streamed = RESPONSES_RAW.replace(b'"store": false', b'"store": false, "stream": true')
    response = _post(gateway, key, "responses", streamed)
    assert response.content == RESPONSES_STREAM and capture.seen[-1][2] == streamed
    record = call_record(response.headers["x-sluice-request-id"])
    assert (record.tokens_in, record.tokens_out) == (6, 2)


def test_the_sdks_natively_with_thinking_and_tool_calls(gateway, key, call_record):
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)
    bash = {
        "name": "Bash",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
    with claude.messages.stream(
        model="n-claude",
        max_tokens=200,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[bash],
        messages=[{"role": "user", "content": "run: echo hi"}],
    ) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["thinking", "tool_use"]
    assert message.content[1].input == {"command": "echo hi"}
    gpt = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    shell = {
        "type": "function",
        "name": "shell",
        "parameters": {"type": "object", "properties": {"command": {"type": "array"}}},
    }
    answer = gpt.responses.create(model="n-resp", input="run: ls", tools=[shell])
    call = answer.output[0]
    assert call.type == "function_call" and json.loads(call.arguments) == {
        "command": ["bash", "-lc", "ls"]
    }
    followed = gpt.responses.create(
        model="n-resp",
        input=[
            {"role": "user", "content": "run: ls"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": "shell",
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"},
        ],
        stream=True,
    )
    events = list(followed)
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "tool said: a.txt"


def test_fallback_from_a_full_deployment_stays_native(gateway, key, call_record):
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)
    raw = claude.messages.with_raw_response.create(
        model="n-claude-fallback", max_tokens=10, messages=HI, extra_body={"context_management": {}}
    )
    record = call_record(raw.headers["x-sluice-request-id"])
    assert record.fell_back and record.served_deployment == "n-claude"
    assert record.upstream_protocol == "anthropic" and record.degraded == ""
    gpt = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    raw = gpt.responses.with_raw_response.create(model="n-resp-fallback", input="hi")
    assert raw.parse().status == "completed"
    assert call_record(raw.headers["x-sluice-request-id"]).served_deployment == "n-resp"


FAILED_RESULT = {
    "type": "tool_result",
    "tool_use_id": "t",
    "content": "no such file",
    "is_error": True,
}


def test_crossing_kinds_on_fallback_applies_the_rules(gateway, key, call_record):
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)
    raw = claude.messages.with_raw_response.create(
        model="n-claude-cross",
        max_tokens=50,
        thinking={"type": "adaptive"},
        extra_body={"context_management": {"edits": []}},
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash"}]},
            {"role": "user", "content": [FAILED_RESULT]},
        ],
    )
    message = raw.parse()
    assert message.content[0].text == "tool failed: [tool error] no such file"
    record = call_record(raw.headers["x-sluice-request-id"])
    assert (record.served_deployment, record.upstream_protocol) == ("n-chat", "openai")
    assert [line.split(":")[0] for line in record.degraded.splitlines()] == [
        "context_management",
        "messages[2].content[0].is_error",
        "thinking",
    ]


def test_a_full_chain_answers_503_with_retry_after_in_the_clients_shape(gateway, key):
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as full:
        claude.messages.create(model="n-full", max_tokens=5, messages=HI)
    assert full.value.status_code == 503
    assert full.value.body["type"] == "error"
    assert full.value.body["error"]["type"] == "overloaded_error"
    assert 1 <= int(full.value.response.headers["retry-after"]) <= 300


def test_a_stateful_responses_call_is_pinned_to_the_responses_deployment(gateway, key, call_record):
    gpt = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    raw = gpt.responses.with_raw_response.create(
        model="n-stateful", input="more", previous_response_id="resp_earlier"
    )
    record = call_record(raw.headers["x-sluice-request-id"])
    assert record.served_deployment == "n-resp" and not record.fell_back
    plain = gpt.responses.with_raw_response.create(model="n-stateful", input="hi")
    assert call_record(plain.headers["x-sluice-request-id"]).served_deployment == "n-chat"


def test_a_chat_client_on_a_responses_deployment_is_translated_there_and_back(gateway, key):
    gpt = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    answer = gpt.chat.completions.create(model="n-chat-to-resp", messages=HI)
    assert answer.choices[0].message.content.startswith("tok")
    chunks = list(gpt.chat.completions.create(model="n-chat-to-resp", messages=HI, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("tok")


def test_a_native_stream_cut_short_ends_with_an_error_event_the_sdk_reads(
    gateway, key, call_record
):
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)
    raw = claude.messages.with_raw_response.create(
        model="n-claude-cut", max_tokens=16, messages=HI, stream=True
    )
    request_id = raw.headers["x-sluice-request-id"]
    with pytest.raises(anthropic.APIError) as broken:
        for _ in raw.parse():
            pass
    assert "broke off" in str(broken.value)
    record = call_record(request_id)
    assert (record.outcome, record.status_code, record.upstream_protocol) == (
        "upstream_error",
        502,
        "anthropic",
    )
