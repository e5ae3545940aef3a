"""The upstream simulator: real uvicorn subprocesses on loopback, driven with httpx and openai.

None of these need the database.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from simulator import (
    CAPACITY_MESSAGE,
    FAULT_KINDS,
    FaultSpec,
    ScheduledFault,
    Simulator,
    SimulatorConfig,
    add_arguments,
    config_from_args,
    main,
    parse_fault,
    parse_model_spec,
    parse_schedule,
)
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHAT = [{"role": "user", "content": "hello"}]
CAPACITY_BODY = {
    "error": {
        "message": CAPACITY_MESSAGE,
        "type": "server_error",
        "code": "model_at_capacity",
        "param": None,
    }
}
KEY_A = "Bearer sk-sluice-test-aaaaaaaaaaaa"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A simulator running in a subprocess."""

    def __init__(self, *args: str) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "simulator", "--port", str(port), *args],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.http = httpx.Client(base_url=self.url, timeout=10)
        deadline = time.monotonic() + 15
        while True:
            try:
                self.http.get("/stats", timeout=0.5)
                return
            except httpx.TransportError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    self.log.seek(0)
                    pytest.fail(f"simulator did not start: {self.log.read().decode()}")
                time.sleep(0.05)

    def stats(self, model: str | None = None) -> dict[str, Any]:
        data = self.http.get("/stats").json()
        return data if model is None else data["models"][model]

    def chat(self, model: str, **body: Any) -> httpx.Response:
        return self.http.post(
            "/v1/chat/completions", json={"model": model, "messages": CHAT, **body}
        )

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _serve(*args: str) -> Iterator[Server]:
    server = Server(*args)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def fast() -> Iterator[Server]:
    yield from _serve("--model", "big:4", "--model", "small:64", "--model", "full:0")


@pytest.fixture(scope="module")
def slow() -> Iterator[Server]:
    # Latency holds requests in flight long enough to observe them.
    yield from _serve(
        "--model", "big:2", "--model", "stream:4",
        "--latency-ms", "300", "--token-latency-ms", "40", "--output-tokens", "30",
    )  # fmt: skip


def _events(text: str) -> list[str]:
    """Split an SSE body into its data payloads, checking the framing on the way."""
    assert text.endswith("\n\n")
    blocks = text[:-2].split("\n\n")
    assert all(block.startswith("data: ") and "\n" not in block for block in blocks)
    return [block[len("data: ") :] for block in blocks]


# ---------------------------------------------------------------------------------------------
# Argument parsing
# ---------------------------------------------------------------------------------------------


def test_parse_model_spec() -> None:
    assert parse_model_spec("big:4") == ("big", 4)
    assert parse_model_spec(" small : 0 ") == ("small", 0)
    assert parse_model_spec("llama3:8b:2") == ("llama3:8b", 2)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("big", "expected NAME:CAPACITY"),
        ("big:", "capacity must be an integer"),
        (":4", "model name must be non-empty"),
        ("big:-1", "capacity must be >= 0"),
        ("big:x", "capacity must be an integer"),
        ("big:1.5", "capacity must be an integer"),
        ("a b:3", "without spaces"),
    ],
)
def test_parse_model_spec_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_model_spec(spec)


def test_parse_schedule() -> None:
    assert parse_schedule("90:big=4, 30:big=0,0.5:small=1") == [
        (0.5, "small", 1),
        (30.0, "big", 0),
        (90.0, "big", 4),
    ]
    assert parse_schedule("") == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("30big=0", "expected SECONDS:MODEL=CAPACITY"),
        ("30:big", "expected SECONDS:MODEL=CAPACITY"),
        ("x:big=0", "time must be a number"),
        ("-1:big=0", "time must be >= 0"),
        ("30:=1", "model name must be non-empty"),
        ("30:big=-2", "capacity must be >= 0"),
        ("30:big=0,90:big=y", "capacity must be an integer"),
    ],
)
def test_parse_schedule_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_schedule(spec)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_config_from_args() -> None:
    config = config_from_args(
        _args("--model", "a:1", "--model", "b:0", "--latency-ms", "5", "--retry-after", "3",
              "--rate-limit-probability", "0.25", "--schedule", "2:a=0", "--seed", "7")
    )  # fmt: skip
    assert config.models == {"a": 1, "b": 0}
    assert (config.latency_ms, config.retry_after, config.seed) == (5.0, 3, 7)
    assert config.rate_limit_probability == 0.25
    assert config.schedule == [(2.0, "a", 0)]
    assert config_from_args(_args()).models == {"big": 4, "medium": 16, "small": 64}
    assert config_from_args(_args()).retry_after is None


def test_latency_spread_draws_each_answer_around_the_latency() -> None:
    config = config_from_args(
        _args("--latency-ms", "200", "--latency-spread", "0.5", "--seed", "3")
    )
    app = Simulator(config)
    draws = [app.draw_latency() for _ in range(400)]
    assert all(0.1 <= d <= 0.3 for d in draws)
    assert min(draws) < 0.11 and max(draws) > 0.29  # the whole range, not one value
    assert sum(draws) / len(draws) == pytest.approx(0.2, abs=0.01)  # the mean stays
    again = Simulator(config)
    assert [again.draw_latency() for _ in range(400)] == draws  # seeded
    fixed = Simulator(config_from_args(_args("--latency-ms", "200")))
    assert {fixed.draw_latency() for _ in range(10)} == {0.2}


def test_token_latency_spread_draws_each_gap_around_the_token_latency() -> None:
    config = config_from_args(
        _args("--token-latency-ms", "750", "--token-latency-spread", "0.34", "--seed", "5")
    )
    app = Simulator(config)
    draws = [app.draw_token_latency() for _ in range(400)]
    assert all(0.495 <= d <= 1.005 for d in draws)
    assert min(draws) < 0.52 and max(draws) > 0.98  # one chunk every 0.5 to 1 s
    assert sum(draws) / len(draws) == pytest.approx(0.75, abs=0.02)
    fixed = Simulator(config_from_args(_args("--token-latency-ms", "750")))
    assert {fixed.draw_token_latency() for _ in range(10)} == {0.75}


async def test_a_trickle_stream_waits_a_drawn_gap_before_each_chunk() -> None:
    config = SimulatorConfig(
        models={"m": 4}, token_latency_ms=20, token_latency_spread=0.9, output_tokens=12, seed=1
    )
    arrivals: list[float] = []
    request = json.dumps({"model": "m", "messages": CHAT, "stream": True}).encode()
    messages = [{"type": "http.request", "body": request, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.sleep(3600)  # the client never leaves
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            arrivals.append(time.perf_counter())

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    await Simulator(config).__call__(scope, receive, send)
    gaps = [b - a for a, b in itertools.pairwise(arrivals[:-1])]  # token chunks
    assert len(gaps) == 12
    assert all(0.0015 <= g <= 0.06 for g in gaps)
    assert max(gaps) - min(gaps) > 0.01  # drawn per chunk, not one fixed gap


def test_backlog_flag_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--backlog", "0"])
    assert "--backlog must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--latency-ms", "-1"], "--latency-ms must be >= 0"),
        (["--token-latency-spread", "2"], "--token-latency-spread must be <= 1"),
        (["--latency-spread", "1.5"], "--latency-spread must be <= 1"),
        (["--rate-limit-probability", "1.5"], "--rate-limit-probability must be <= 1"),
        (["--output-tokens", "many"], "--output-tokens must be an integer"),
        (["--retry-after", "soon"], "--retry-after must be an integer"),
        (["--model", "a:1", "--model", "a:2"], "given more than once"),
    ],
)
def test_config_from_args_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config_from_args(_args(*argv))


def test_cli_rejects_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--model", "big"])
    assert exc.value.code == 2
    assert "expected NAME:CAPACITY" in capsys.readouterr().err


def test_management_command_rejects_bad_values() -> None:
    from django.core.management.base import CommandError

    from routing.management.commands.simulate_upstream import Command

    command = Command()
    parser = command.create_parser("manage.py", "simulate_upstream")
    options = vars(parser.parse_args(["--model", "big:4", "--port", "99999"]))
    with pytest.raises(CommandError, match="--port must be <= 65535"):
        command.handle(**options)
    options = vars(parser.parse_args(["--schedule", "soon:big=1"]))
    with pytest.raises(CommandError, match="invalid schedule entry 'soon:big=1'"):
        command.handle(**options)


# ---------------------------------------------------------------------------------------------
# In process (no lifespan, no server)
# ---------------------------------------------------------------------------------------------


async def test_schedule_applies_lazily_without_lifespan() -> None:
    app = Simulator(
        SimulatorConfig(models={"big": 2}, schedule=[(0.0, "big", 0), (3600, "big", 5)])
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        resp = await client.post("/v1/chat/completions", json={"model": "big", "messages": CHAT})
        assert resp.status_code == 503
        assert resp.json() == CAPACITY_BODY
        assert (await client.get("/stats")).json()["models"]["big"]["capacity"] == 0


async def test_partial_rate_limit_is_seeded() -> None:
    async def statuses(seed: int) -> list[int]:
        app = Simulator(SimulatorConfig(models={"m": 8}, rate_limit_probability=0.5, seed=seed))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            out = []
            for _ in range(200):
                body = {"model": "m", "messages": CHAT}
                out.append((await client.post("/v1/chat/completions", json=body)).status_code)
            assert app.models["m"].rate_limited == out.count(429)
            assert app.models["m"].served == out.count(200)
            return out

    first = await statuses(seed=3)
    assert set(first) == {200, 429}
    assert 60 < first.count(429) < 140
    assert await statuses(seed=3) == first


# ---------------------------------------------------------------------------------------------
# Against a running server
# ---------------------------------------------------------------------------------------------


def test_models_list(fast: Server) -> None:
    body = fast.http.get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["big", "small", "full"]
    assert all(m["object"] == "model" for m in body["data"])


def test_chat_completion_and_usage(fast: Server) -> None:
    messages = [
        {"role": "system", "content": "abcdefgh"},
        {"role": "user", "content": [{"type": "text", "text": "abcd"}, {"type": "image_url"}]},
    ]
    resp = fast.http.post("/v1/chat/completions", json={"model": "big", "messages": messages})
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    body = resp.json()
    assert body["id"].startswith("chatcmpl-sim-")
    assert (body["object"], body["model"]) == ("chat.completion", "big")
    assert len(body["choices"]) == 1
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "tok " * 16
    assert choice["finish_reason"] == "stop"
    # 12 characters // 4 + 1 per message
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 16, "total_tokens": 21}

    assert abs(body["created"] - time.time()) < 5

    again = fast.chat("big", max_tokens=5, n=3).json()  # same shape, other prompt: own numbers
    assert again["id"] != body["id"]
    assert [c["index"] for c in again["choices"]] == [0, 1, 2]
    assert again["choices"][2]["message"]["content"] == "tok " * 5
    assert again["usage"] == {"prompt_tokens": 2, "completion_tokens": 15, "total_tokens": 17}
    assert (
        fast.chat("big", max_completion_tokens=2, max_tokens=9).json()["usage"]["completion_tokens"]
        == 2
    )
    assert fast.chat("big", max_tokens=500).json()["usage"]["completion_tokens"] == 16


def test_chat_stream_without_usage(fast: Server) -> None:
    resp = fast.chat("small", stream=True)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = _events(resp.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 1 + 16 + 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-sim-")
    assert all(c["model"] == "small" and "usage" not in c for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]] == ["tok "] * 16
    assert chunks[-1]["choices"][0] == {
        "index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"
    }  # fmt: skip


def test_chat_stream_with_usage(fast: Server) -> None:
    resp = fast.chat("small", stream=True, stream_options={"include_usage": True}, max_tokens=4)
    events = _events(resp.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 1 + 4 + 1 + 1
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}


def test_completions(fast: Server) -> None:
    body = fast.http.post(
        "/v1/completions", json={"model": "big", "prompt": ["abcdefgh", "x"], "max_tokens": 3}
    ).json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-sim-")
    assert [c["text"] for c in body["choices"]] == ["tok " * 3] * 2
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}

    resp = fast.http.post(
        "/v1/completions",
        json={
            "model": "big",
            "prompt": "hi",
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    events = _events(resp.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == "tok " * 16
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] == 16 and chunks[-1]["choices"] == []


def test_embeddings(fast: Server) -> None:
    body = fast.http.post("/v1/embeddings", json={"model": "small", "input": ["abcd", "ef"]}).json()
    assert body["object"] == "list" and body["model"] == "small"
    assert [d["index"] for d in body["data"]] == [0, 1]
    vectors = [d["embedding"] for d in body["data"]]
    assert all(len(v) == 8 and all(isinstance(x, float) for x in v) for v in vectors)
    assert vectors[0] != vectors[1]
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}

    encoded = fast.http.post(
        "/v1/embeddings", json={"model": "small", "input": "abcd", "encoding_format": "base64"}
    ).json()["data"][0]["embedding"]
    decoded = struct.unpack("<8f", base64.b64decode(encoded))
    assert decoded == pytest.approx(vectors[0], abs=1e-6)


def test_errors(fast: Server) -> None:
    resp = fast.chat("nope")
    assert resp.status_code == 404
    assert resp.json() == {
        "error": {
            "message": "The model `nope` does not exist",
            "type": "invalid_request_error",
            "code": "model_not_found",
            "param": None,
        }
    }
    resp = fast.http.post("/v1/chat/completions", content=b'{"model": "big", ')
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error", "invalid_json", None
    )  # fmt: skip
    resp = fast.http.post("/v1/embeddings", json={"model": "big"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "input"
    for resp in (fast.http.get("/v1/nothing"), fast.http.get("/v1/chat/completions")):
        assert resp.status_code == 404
        assert resp.json()["error"]["type"] == "invalid_request_error"


def test_capacity_zero_is_always_full(fast: Server) -> None:
    before = fast.stats("full")
    for _ in range(3):
        resp = fast.chat("full")
        assert resp.status_code == 503
        assert resp.json() == CAPACITY_BODY
    after = fast.stats("full")
    assert after["capacity_errors"] - before["capacity_errors"] == 3
    assert after["served"] == before["served"] == 0


def test_admin_changes_capacity(fast: Server) -> None:
    resp = fast.http.post("/admin/models/adm", json={"capacity": 0})
    assert resp.status_code == 200
    assert resp.json()["capacity"] == 0 and resp.json()["in_flight"] == 0
    assert "adm" in [m["id"] for m in fast.http.get("/v1/models").json()["data"]]
    assert fast.chat("adm").status_code == 503
    assert fast.http.post("/admin/models/adm", json={"capacity": 2}).json()["capacity"] == 2
    assert fast.chat("adm").status_code == 200
    assert fast.stats("adm")["capacity"] == 2
    assert fast.http.post("/admin/models/adm", json={"capacity": -1}).status_code == 400
    assert fast.http.post("/admin/models/adm", content=b"{").status_code == 400
    assert fast.http.post("/admin/models/a%20b", json={"capacity": 1}).status_code == 400


def test_stats_and_reset(fast: Server) -> None:
    fast.http.post("/admin/models/counted", json={"capacity": 8})
    for _ in range(3):
        assert fast.chat("counted", stream=True).status_code == 200
    assert fast.http.post("/v1/embeddings", json={"model": "counted", "input": "x"}).is_success
    stats = fast.http.get("/stats").json()
    assert stats["uptime_s"] > 0
    counted = stats["models"]["counted"]
    assert (counted["requests"], counted["served"], counted["in_flight"]) == (4, 4, 0)
    assert counted["peak_in_flight"] == 1
    assert counted["peak_in_flight_per_key"] == {"-": 1}

    fast.http.post("/admin/models/counted", json={"capacity": 0})
    assert fast.chat("counted").status_code == 503
    assert fast.stats("counted")["capacity_errors"] == 1

    reset = fast.http.post("/stats/reset").json()["models"]["counted"]
    assert reset["capacity"] == 0  # kept
    assert reset["requests"] == reset["served"] == reset["capacity_errors"] == 0
    assert reset["peak_in_flight"] == 0 and reset["peak_in_flight_per_key"] == {}


def test_openai_sdk(fast: Server) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{fast.url}/v1", api_key="x", max_retries=0, timeout=10)
    resp = client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "hi"}]
    )
    assert resp.model == "small"
    assert resp.choices[0].message.content == "tok " * 16
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and resp.usage.completion_tokens == 16

    stream = client.chat.completions.create(
        model="small",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok " * 16
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 1 + 16

    with pytest.raises(openai.InternalServerError) as exc:
        client.chat.completions.create(model="full", messages=[{"role": "user", "content": "hi"}])
    assert exc.value.status_code == 503
    client.close()


async def _wait_for(client: httpx.AsyncClient, model: str, key: str, value: int) -> None:
    deadline = time.monotonic() + 2
    while (await client.get("/stats")).json()["models"][model][key] != value:
        assert time.monotonic() < deadline, f"{model}.{key} never reached {value}"
        await asyncio.sleep(0.01)


async def test_capacity_503_once_in_flight_reaches_capacity(slow: Server) -> None:
    slow.http.post("/stats/reset")
    async with httpx.AsyncClient(base_url=slow.url, timeout=10) as client:

        async def chat(key: str) -> httpx.Response:
            return await client.post(
                "/v1/chat/completions",
                json={"model": "big", "messages": CHAT},
                headers={"Authorization": key},
            )

        held = [asyncio.create_task(chat(KEY_A)) for _ in range(2)]
        await _wait_for(client, "big", "in_flight", 2)
        rejected = await chat("Bearer sk-sluice-test-bbbbbbbbbbbb")
        assert rejected.status_code == 503
        assert rejected.json() == CAPACITY_BODY
        assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200]
        assert (await chat(KEY_A)).status_code == 200  # the slots were freed

    stats = slow.stats("big")
    assert stats["in_flight"] == 0
    assert (stats["requests"], stats["served"], stats["capacity_errors"]) == (4, 3, 1)
    assert stats["peak_in_flight"] == 2
    assert stats["peak_in_flight_per_key"] == {KEY_A[-12:]: 2}  # the rejected key never got in


def test_disconnect_mid_stream_frees_the_slot(slow: Server) -> None:
    slow.http.post("/stats/reset")
    # 30 tokens x 40 ms: the full answer would hold the slot for ~1.5 s.
    with httpx.Client(base_url=slow.url, timeout=10) as client:
        body = {"model": "stream", "messages": CHAT, "stream": True}
        with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            # Keep the iterator referenced: dropping it would already close the connection.
            lines = resp.iter_lines()
            tokens = 0
            while tokens < 3:
                tokens += '"tok "' in next(lines)
            assert slow.stats("stream")["in_flight"] == 1
    closed = time.monotonic()
    while (stats := slow.stats("stream"))["in_flight"]:
        assert time.monotonic() - closed < 0.5, "slot still held after the client left"
        time.sleep(0.01)
    assert (stats["served"], stats["cancelled"]) == (0, 1)


@pytest.mark.parametrize("retry_after", ["7", None])
def test_rate_limited_429(retry_after: str | None) -> None:
    args = ["--model", "big:4", "--model", "full:0", "--rate-limit-probability", "1"]
    if retry_after:
        args += ["--retry-after", retry_after]
    for server in _serve(*args):
        resp = server.chat("big")
        assert resp.status_code == 429
        assert resp.headers.get("retry-after") == retry_after
        error = resp.json()["error"]
        assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
        assert server.chat("full").status_code == 503  # capacity is checked first
        stats = server.stats("big")
        assert (stats["rate_limited"], stats["served"], stats["in_flight"]) == (1, 0, 0)


def test_schedule_changes_capacity() -> None:
    for server in _serve("--model", "big:2", "--schedule", "0.8:big=0,1.6:big=3"):
        uptime = server.stats()["uptime_s"]
        assert uptime < 0.8
        assert server.chat("big").status_code == 200
        time.sleep(0.9 - uptime)
        assert server.chat("big").status_code == 503
        stats = server.stats()
        assert stats["models"]["big"]["capacity"] == 0
        time.sleep(max(0.0, 1.7 - stats["uptime_s"]))
        assert server.stats("big")["capacity"] == 3
        assert server.chat("big").status_code == 200


# ---------------------------------------------------------------------------------------------
# Fault injection
# ---------------------------------------------------------------------------------------------

CONTEXT_LENGTH_BODY = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9000 tokens.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
        "param": "messages",
    }
}


def test_parse_fault() -> None:
    assert parse_fault("big:server_error=1") == FaultSpec("big", "server_error", 1.0, None)
    assert parse_fault(" big:rate_limit=0.5:3 ") == FaultSpec("big", "rate_limit", 0.5, 3.0)
    assert parse_fault("llama3:8b:hang=0.25") == FaultSpec("llama3:8b", "hang", 0.25, None)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("big=1", "expected MODEL:KIND=PROBABILITY"),
        ("big:server_error", "expected MODEL:KIND=PROBABILITY"),
        ("big:boom=1", "unknown fault kind 'boom'"),
        (":auth=1", "model name must be non-empty"),
        ("big:auth=1.5", "probability must be <= 1"),
        ("big:auth=x", "probability must be a number"),
        ("big:auth=1:3", "only rate_limit takes a parameter"),
        ("big:rate_limit=1:-3", "retry-after must be >= 0"),
    ],
)
def test_parse_fault_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fault(spec)


def test_parse_schedule_with_faults() -> None:
    assert parse_schedule("40:big!server_error=0, 10:big!server_error=1,30:big=0") == [
        ScheduledFault(10.0, "big", "server_error", 1.0),
        (30.0, "big", 0),
        ScheduledFault(40.0, "big", "server_error", 0.0),
    ]
    assert parse_schedule("5:m:1!rate_limit=0.5:2") == [
        ScheduledFault(5.0, "m:1", "rate_limit", 0.5, 2.0)
    ]
    for spec, message in [
        ("10:big!boom=1", "unknown fault kind 'boom'"),
        ("10:big!auth=2", "probability must be <= 1"),
        ("10:!auth=1", "model name must be non-empty"),
        ("10:big!auth", "expected SECONDS:MODEL=CAPACITY or SECONDS:MODEL!FAULT=PROBABILITY"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_schedule(spec)


def test_config_from_args_faults() -> None:
    config = config_from_args(
        _args("--model", "big:1", "--model", "medium:2", "--fault", "big:server_error=1",
              "--fault", "medium:rate_limit=0.2:3", "--schedule", "10:big!hang=0.5")
    )  # fmt: skip
    assert config.faults == [
        FaultSpec("big", "server_error", 1.0), FaultSpec("medium", "rate_limit", 0.2, 3.0)
    ]  # fmt: skip
    assert config.schedule == [ScheduledFault(10.0, "big", "hang", 0.5)]
    app = Simulator(config)
    assert app.models["big"].fault_plan == (("server_error", 1.0),)
    assert app.models["medium"].retry_after == 3.0
    assert app.models["big"].stats()["injected"] == dict.fromkeys(FAULT_KINDS, 0)
    with pytest.raises(ValueError, match="model 'x' is not served"):
        SimulatorConfig(models={"m": 1}, faults=[FaultSpec("x", "auth", 1.0)])
    for argv, message in [
        (["--fault", "big:nope=1"], "unknown fault kind"),
        (["--fault", "other:auth=1"], "model 'other', which is not served"),
        (["--schedule", "1:other!auth=1"], "model 'other', which is not served"),
        (["--fault", "big:auth=1", "--fault", "big:auth=0.5"], "given more than once"),
    ]:
        with pytest.raises(ValueError, match=message):
            config_from_args(_args("--model", "big:1", *argv))


def test_fault_flags_rejected_by_both_entry_points(capsys: pytest.CaptureFixture[str]) -> None:
    from django.core.management.base import CommandError

    from routing.management.commands.simulate_upstream import Command

    with pytest.raises(SystemExit):
        main(["--fault", "big:sever_error=1"])
    assert "unknown fault kind 'sever_error'" in capsys.readouterr().err
    command = Command()
    parser = command.create_parser("manage.py", "simulate_upstream")
    options = vars(parser.parse_args(["--fault", "big-server_error=1"]))
    with pytest.raises(CommandError, match="expected MODEL:KIND=PROBABILITY"):
        command.handle(**options)


async def test_fault_draws_are_seeded_in_process() -> None:
    async def statuses(seed: int) -> list[int]:
        config = SimulatorConfig(
            models={"m": 8},
            faults=[FaultSpec("m", "auth", 0.3), FaultSpec("m", "server_error", 0.3)],
            seed=seed,
        )
        app = Simulator(config)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            body = {"model": "m", "messages": CHAT}
            return [
                (await client.post("/v1/chat/completions", json=body)).status_code
                for _ in range(60)
            ]

    first = await statuses(5)
    assert set(first) == {200, 401, 500}
    assert await statuses(5) == first


async def test_reset_outside_uvicorn_raises() -> None:
    app = Simulator(SimulatorConfig(models={"m": 8}, faults=[FaultSpec("m", "reset", 1)]))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        with pytest.raises(ConnectionResetError):
            await client.post("/v1/chat/completions", json={"model": "m", "messages": CHAT})


@pytest.fixture(scope="module")
def faulty() -> Iterator[Server]:
    faults = {
        "cap": "capacity=1", "rl": "rate_limit=1:2.5", "rlg": "rate_limit=1",
        "bare": "rate_limit_bare=1", "ctx": "context_length=1", "auth": "auth=1",
        "gone": "not_found=1", "err": "server_error=1", "garb": "garbage=1", "reset": "reset=1",
        "hang": "hang=1", "cut": "stream_cut=1", "never": "server_error=0",
        "half": "server_error=0.5",
    }  # fmt: skip
    args = ["--retry-after", "7", "--seed", "11", "--model", "plain:4", "--model", "hang:1"]
    for model, fault in faults.items():
        if model != "hang":
            args += ["--model", f"{model}:4"]
        args += ["--fault", f"{model}:{fault}"]
    yield from _serve(*args)


def _error(code: str | None, message: str, type_: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": type_, "code": code, "param": None}}


@pytest.mark.parametrize(
    ("model", "status", "body", "headers"),
    [
        ("cap", 503, CAPACITY_BODY, {}),
        ("rl", 429, None, {"retry-after": "3", "retry-after-ms": "2500"}),
        ("rlg", 429, None, {"retry-after": "7", "retry-after-ms": "7000"}),
        ("bare", 429, None, {"retry-after": None, "retry-after-ms": None}),
        ("ctx", 400, CONTEXT_LENGTH_BODY, {}),
        ("auth", 401, _error("invalid_api_key", "Incorrect API key provided."), {}),
        ("gone", 404, _error("model_not_found", "The model `gone` does not exist"), {}),
        ("err", 500, None, {}),
    ],
)
def test_fault_answers(
    faulty: Server, model: str, status: int, body: dict | None, headers: dict
) -> None:
    for _ in range(2):
        resp = faulty.chat(model)
        assert resp.status_code == status
        assert resp.headers["content-type"] == "application/json"
        error = resp.json()["error"]
        if body is not None:
            assert resp.json() == body
        elif status == 429:
            assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
        else:
            assert (error["type"], error["code"]) == ("server_error", None)
        for name, value in headers.items():
            assert resp.headers.get(name) == value
    stats = faulty.stats(model)
    kind = next(k for k in FAULT_KINDS if k in stats["faults"])
    assert stats["injected"][kind] == stats["requests"] >= 2
    assert (stats["served"], stats["capacity_errors"], stats["rate_limited"]) == (0, 0, 0)


def test_fault_garbage(faulty: Server) -> None:
    resp = faulty.chat("garb")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    assert resp.text == "<html>upstream proxy error</html>"
    with pytest.raises(json.JSONDecodeError):
        resp.json()
    resp = faulty.chat("garb", stream=True)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = _events(resp.text)
    assert events == ["<html>upstream proxy error</html>"]
    assert faulty.stats("garb")["injected"]["garbage"] == 2


async def test_fault_reset(faulty: Server) -> None:
    body = {"model": "reset", "messages": CHAT}
    async with aiohttp.ClientSession() as session:
        for stream in (False, True):
            with pytest.raises(aiohttp.ClientOSError) as exc:
                await session.post(
                    f"{faulty.url}/v1/chat/completions", json={**body, "stream": stream}
                )
            assert exc.value.errno == 104  # ECONNRESET: no HTTP response at all
    with pytest.raises(httpx.ReadError, match="Connection reset by peer"):
        faulty.chat("reset")
    stats = faulty.stats("reset")
    assert stats["injected"]["reset"] == stats["requests"] == 3
    assert stats["in_flight"] == 0


async def test_fault_hang_holds_a_slot_until_the_client_leaves(faulty: Server) -> None:
    url = f"{faulty.url}/v1/chat/completions"
    body = {"model": "hang", "messages": CHAT}
    async with aiohttp.ClientSession() as session:
        hung = asyncio.create_task(
            session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=0.6))
        )
        async with httpx.AsyncClient(base_url=faulty.url, timeout=5) as client:
            await _wait_for(client, "hang", "in_flight", 1)
            # The hanging request holds hang's only slot: the next one is over capacity.
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 503
            with pytest.raises(TimeoutError):
                await hung
            await _wait_for(client, "hang", "in_flight", 0)
    stats = faulty.stats("hang")
    assert (stats["injected"]["hang"], stats["capacity_errors"], stats["served"]) == (1, 1, 0)
    with pytest.raises(httpx.ReadTimeout):
        faulty.http.post("/v1/chat/completions", json=body, timeout=0.3)


async def test_fault_stream_cut(faulty: Server) -> None:
    url = f"{faulty.url}/v1/chat/completions"
    body = {"model": "cut", "messages": CHAT, "stream": True}
    events: list[bytes] = []
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientPayloadError, match="not completed"):
            async with session.post(url, json=body) as resp:
                assert resp.status == 200
                async for line in resp.content:
                    if line.startswith(b"data: "):
                        events.append(line[6:].strip())
        chunks = [json.loads(e) for e in events]  # every chunk that arrived is whole
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert [c["choices"][0]["delta"]["content"] for c in chunks[1:]] == ["tok "] * 8
        # Not streaming: nothing to cut, the connection just drops.
        with pytest.raises(aiohttp.ClientOSError):
            await session.post(url, json={**body, "stream": False})
    with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
        faulty.http.post("/v1/chat/completions", json=body)
    stats = faulty.stats("cut")
    assert (stats["injected"]["stream_cut"], stats["requests"], stats["served"]) == (3, 3, 0)
    assert stats["in_flight"] == 0


def test_fault_stream_cut_with_token_latency(slow: Server) -> None:
    resp = slow.http.post("/admin/models/cut", json={"capacity": 2, "faults": {"stream_cut": 1}})
    assert resp.status_code == 200 and resp.json()["faults"] == {"stream_cut": 1.0}
    body = {"model": "cut", "messages": CHAT, "stream": True}
    tokens = 0
    with slow.http.stream("POST", "/v1/chat/completions", json=body) as resp:
        lines = resp.iter_lines()
        with pytest.raises(httpx.RemoteProtocolError):
            for line in lines:
                tokens += '"tok "' in line
                assert "[DONE]" not in line
                if tokens == 1:
                    assert slow.stats("cut")["in_flight"] == 1  # held while it streams
    assert tokens == 15  # half of 30
    # The server frees the slot just after it drops the connection: a moment, not a call.
    stats = wait_until(lambda: (s := slow.stats("cut"))["in_flight"] == 0 and s, timeout=1)
    assert (stats["served"], stats["cancelled"]) == (0, 0)


def test_fault_probability(faulty: Server) -> None:
    assert all(faulty.chat("never").status_code == 200 for _ in range(20))
    never = faulty.stats("never")
    assert never["faults"] == {} and sum(never["injected"].values()) == 0
    statuses = [faulty.chat("half").status_code for _ in range(200)]
    assert set(statuses) == {200, 500}
    assert 60 <= statuses.count(500) <= 140
    half = faulty.stats("half")
    assert half["faults"] == {"server_error": 0.5}
    assert half["injected"]["server_error"] == statuses.count(500)
    assert (half["requests"], half["served"]) == (200, statuses.count(200))


def test_admin_sets_and_clears_faults(faulty: Server) -> None:
    admin = "/admin/models/plain"
    resp = faulty.http.post(admin, json={"faults": {"server_error": 1.0, "rate_limit": 0.5}})
    assert resp.status_code == 200
    assert resp.json()["faults"] == {"rate_limit": 0.5, "server_error": 1.0}  # check order
    assert resp.json()["capacity"] == 4  # untouched
    assert {faulty.chat("plain").status_code for _ in range(10)} == {429, 500}
    resp = faulty.http.post(admin, json={"faults": {"rate_limit": 1}, "retry_after": 0.25})
    assert resp.json()["faults"] == {"rate_limit": 1.0} and resp.json()["retry_after"] == 0.25
    resp = faulty.chat("plain")
    assert (resp.headers["retry-after"], resp.headers["retry-after-ms"]) == ("1", "250")
    resp = faulty.http.post(admin, json={"faults": {}, "capacity": 2, "retry_after": None})
    assert resp.status_code == 200
    assert (resp.json()["faults"], resp.json()["capacity"], resp.json()["retry_after"]) == (
        {}, 2, None
    )  # fmt: skip
    assert faulty.chat("plain").status_code == 200
    stats = faulty.stats("plain")
    assert stats["injected"]["rate_limit"] + stats["injected"]["server_error"] == 11
    assert stats["requests"] == 12 and stats["served"] == 1

    created = faulty.http.post("/admin/models/new", json={"capacity": 1, "faults": {"auth": 1}})
    assert created.status_code == 200 and faulty.chat("new").status_code == 401
    missing = faulty.http.post("/admin/models/missing", json={"faults": {"auth": 1}})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"faults": {"boom": 1}}, "faults"),
        ({"faults": {"auth": 1.5}}, "faults"),
        ({"faults": {"auth": True}}, "faults"),
        ({"faults": {"auth": "1"}}, "faults"),
        ({"faults": ["auth"]}, "faults"),
        ({"retry_after": -1}, "retry_after"),
        ({"retry_after": "soon"}, "retry_after"),
        ({"capacity": 1, "faults": {"auth": 2}}, "faults"),
        ({"capacity": True}, "capacity"),
        ({}, None),
        ({"fault": {"auth": 1}}, None),
    ],
)
def test_admin_rejects_bad_faults(faulty: Server, body: dict, param: str | None) -> None:
    before = faulty.stats("plain")
    resp = faulty.http.post("/admin/models/plain", json=body)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["code"] == (f"invalid_{param}" if param else "invalid_body")
    after = faulty.stats("plain")  # nothing applied
    assert (after["capacity"], after["faults"]) == (before["capacity"], before["faults"])


def test_schedule_turns_a_fault_on_and_off() -> None:
    schedule = "0.6:big!server_error=1,1.2:big!server_error=0"
    for server in _serve("--model", "big:2", "--schedule", schedule):
        assert server.stats()["uptime_s"] < 0.6
        assert server.chat("big").status_code == 200
        time.sleep(max(0.0, 0.7 - server.stats()["uptime_s"]))
        assert server.chat("big").status_code == 500
        assert server.stats("big")["faults"] == {"server_error": 1.0}
        time.sleep(max(0.0, 1.3 - server.stats()["uptime_s"]))
        assert server.stats("big")["faults"] == {}
        assert server.chat("big").status_code == 200
        stats = server.stats("big")
        assert (stats["requests"], stats["served"], stats["injected"]["server_error"]) == (3, 2, 1)


def test_stats_reset_zeroes_injected(faulty: Server) -> None:
    faulty.chat("err")
    reset = faulty.http.post("/stats/reset").json()["models"]["err"]
    assert reset["injected"] == dict.fromkeys(FAULT_KINDS, 0)
    assert reset["faults"] == {"server_error": 1.0}  # the configuration stays
