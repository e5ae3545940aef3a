"""Upstreams set to `http2`, end to end: the simulator served by granian (HTTP/1.1 and
HTTP/2 on one port), the gateway calling it over HTTP/2. The official SDKs and the coding
agents get the answers they get over HTTP/1.1 (chat, Messages and Responses, whole and
streamed), the simulator sees every call arrive over HTTP/2, and streams held open together
share a few upstream connections where HTTP/1.1 takes one each."""

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.e2e.test_agents_e2e import agents, claude, codex  # noqa: F401  (a fixture)
from tests.support import GatewayHandle, SimulatorHandle, start_simulator, wait_until_served

ROUTES = {"h2-chat": "h2c-chat", "h2-claude": "h2c-claude", "h2-resp": "h2c-resp"}
ROUTES_H1 = {"h1-chat": "h1c-chat"}  # the same simulator, over HTTP/1.1: the comparison
# Streams long enough to be held open together: on a simulator of their own, both ways.
ROUTES_LONG = {"h2-long": "h2c-long", "h1-long": "h1c-long"}


@pytest.fixture(scope="module")
def h2_sim() -> Iterator[SimulatorHandle]:
    yield from start_simulator(
        "--http2", "--model", "chat:1000", "--model", "claude:8:anthropic",
        "--model", "resp:8:openai-responses", "--token-latency-ms", "10",
    )  # fmt: skip


@pytest.fixture(scope="module")
def long_sim() -> Iterator[SimulatorHandle]:
    """Streams of six seconds (600 tokens, 10 ms apart): longer than opening 150 of them
    takes on a busy machine."""
    yield from start_simulator(
        "--http2", "--model", "chat:1000", "--token-latency-ms", "10", "--output-tokens", "600"
    )


@pytest.fixture(scope="module")
def h2_catalog(
    e2e_database: str, h2_sim: SimulatorHandle, long_sim: SimulatorHandle, django_db_blocker: Any
) -> None:
    from routing.catalog.config_file import apply_config, validate_config

    sim, long = f"{h2_sim.url}/v1", f"{long_sim.url}/v1"
    wide = {"max_concurrency": 1000, "breaker_threshold": 0}
    config = {
        "upstreams": [
            {"name": "h2-openai", "base_url": sim, "http2": True},
            {"name": "h2-anthropic", "kind": "anthropic", "base_url": sim, "http2": True},
            {"name": "h2-responses", "kind": "openai-responses", "base_url": sim, "http2": True},
            {"name": "h1-openai", "base_url": sim},
            {"name": "h2-long", "base_url": long, "http2": True},
            {"name": "h1-long", "base_url": long},
        ],
        "deployments": [
            {"name": "h2c-chat", "upstream": "h2-openai", "model": "chat", **wide},
            {"name": "h2c-claude", "upstream": "h2-anthropic", "model": "claude"},
            {"name": "h2c-resp", "upstream": "h2-responses", "model": "resp"},
            {"name": "h1c-chat", "upstream": "h1-openai", "model": "chat", **wide},
            {"name": "h2c-long", "upstream": "h2-long", "model": "chat", **wide},
            {"name": "h1c-long", "upstream": "h1-long", "model": "chat", **wide},
        ],
        "routes": [
            {"name": name, "chain": [deployment], "timeout_seconds": 20}
            for name, deployment in (ROUTES | ROUTES_H1 | ROUTES_LONG).items()
        ],
        "applications": [
            {"slug": "h2", "team": "demo", "routes": [*ROUTES, *ROUTES_H1, *ROUTES_LONG]}
        ],
    }
    with django_db_blocker.unblock():
        apply_config(validate_config(config))


@pytest.fixture
def h2_key(gateway: GatewayHandle, h2_catalog: None, issue_key: Any) -> str:
    plaintext = issue_key(application="h2").plaintext
    wait_until_served(gateway.url, plaintext, "h2-chat", [{"role": "user", "content": "hi"}])
    return plaintext


def _over_h2(sim: SimulatorHandle) -> int:
    return httpx.get(f"{sim.url}/stats").json()["http_versions"].get("2", 0)


def test_the_sdks_get_their_answers_over_http2(gateway, h2_sim, h2_key):
    before = _over_h2(h2_sim)
    chat = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=h2_key, max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    answer = chat.chat.completions.create(model="h2-chat", messages=messages)
    assert answer.choices[0].message.content == "tok " * 16
    stream = chat.chat.completions.create(model="h2-chat", messages=messages, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "tok " * 16
    claude_sdk = anthropic.Anthropic(base_url=gateway.url, api_key=h2_key, max_retries=0)
    with claude_sdk.messages.stream(
        model="h2-claude", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as events:
        assert events.get_final_message().content[0].text.startswith("tok")
    response = chat.responses.create(model="h2-resp", input="hi")
    assert response.output_text.startswith("tok")
    assert _over_h2(h2_sim) - before == 4


def _agents_ran(done: Any) -> None:
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tok tok" in done.stdout


def test_claude_code_and_codex_over_http2_upstreams(agents, gateway, h2_sim, h2_key, tmp_path):  # noqa: F811
    before = _over_h2(h2_sim)
    _agents_ran(claude(gateway, h2_key, "h2-claude", "say hello", tmp_path))
    _agents_ran(codex(gateway, h2_key, "h2-resp", "say hello", tmp_path))
    assert _over_h2(h2_sim) - before >= 2


def _upstream_connections(port: int) -> int:
    """Established TCP connections to the simulator's port (the gateway's: the test calls
    only the gateway meanwhile)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                count += 1
    return count


async def _held_open(gateway: GatewayHandle, key: str, route: str, n: int, port: int) -> int:
    """N streams opened together through the gateway; the upstream connections once every
    one has begun, then each read to its end."""
    body = {"model": route, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    limits = httpx.Limits(max_connections=n)
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=gateway.url, limits=limits, timeout=30) as client:
        began = asyncio.Event()
        started = 0

        async def one() -> bytes:
            nonlocal started
            async with client.stream(
                "POST", "/v1/chat/completions", json=body, headers=headers
            ) as r:
                chunks = r.aiter_bytes()
                first = await anext(chunks)
                started += 1
                if started == n:
                    began.set()
                return first + b"".join([chunk async for chunk in chunks])

        calls = [asyncio.create_task(one()) for _ in range(n)]
        await asyncio.wait_for(began.wait(), 20)
        connections = _upstream_connections(port)
        bodies = await asyncio.gather(*calls)
    assert all(b.rstrip().endswith(b"data: [DONE]") for b in bodies)
    return connections


def test_streams_held_together_share_a_few_upstream_connections(gateway, long_sim, h2_key):
    """Each stream lasts six seconds: all 150 are open at once. A call first, as to the other
    simulator: 150 at once on no connection yet may open two while the first is set up."""
    port = int(long_sim.url.rsplit(":", 1)[1])
    wait_until_served(gateway.url, h2_key, "h2-long", [{"role": "user", "content": "hi"}])
    over_h2 = asyncio.run(_held_open(gateway, h2_key, "h2-long", 150, port))
    over_h1 = asyncio.run(_held_open(gateway, h2_key, "h1-long", 150, port))
    assert over_h2 == 1  # granian allows 200 streams a connection
    assert over_h1 >= 150
