"""What real OpenAI clients rely on, against a real server: the upstream's
request id passed back (the SDK's `_request_id`), OpenAI account headers forwarded only to
upstreams set to take them, garbage in a stream answered as an error event the SDK knows,
and a hanging first deployment leaving time for the rest of the chain.

The upstream here is a small server run by the test, so it can show what it received."""

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from tests.support import GatewayHandle, free_port, wait_until_served

MESSAGES = [{"role": "user", "content": "hi"}]
ACCOUNT = {"OpenAI-Organization": "org-abc", "OpenAI-Project": "proj_1", "OpenAI-Beta": "x=v1"}


def _completion(model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


def _chunk(model: str, content: str) -> bytes:
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class Upstream:
    """Models: `echo` answers (streaming or not), `late-garbage` streams one good chunk
    then an HTML page, `hang` never answers. Remembers the headers of each request."""

    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[dict[str, str]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append({k.lower(): v for k, v in request.headers.items()})
        model = body["model"]
        headers = {"x-request-id": f"req-up-{model}", "openai-processing-ms": "42"}
        if model == "hang":
            await asyncio.sleep(3600)
        if not body.get("stream"):
            return web.json_response(_completion(model), headers=headers)
        response = web.StreamResponse(headers={**headers, "content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_chunk(model, "Hel"))
        if model == "late-garbage":
            await response.write(b"data: <html>upstream proxy error</html>\n\n")
        else:
            await response.write(_chunk(model, "lo") + b"data: [DONE]\n\n")
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

    async def _shutdown(self) -> None:
        await self._runner.cleanup()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:  # the `hang` handlers
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)


@pytest.fixture(scope="module")
def upstream(e2e_database: str, django_db_blocker: Any) -> Iterator[Upstream]:
    from routing.catalog.config_file import apply_config, validate_config

    served = Upstream()
    served.start()
    base = f"http://127.0.0.1:{served.port}/v1"
    fast = {"backoff_base": 0.05, "backoff_cap": 0.1}
    config = {
        "upstreams": [
            {"name": "p-account", "base_url": base, "forward_openai_headers": True},
            {"name": "p-plain", "base_url": base},
            # Waits long for an answer: the call's deadline must still leave room.
            {"name": "p-patient", "base_url": base, "read_timeout": 60},
        ],
        "deployments": [
            {"name": "p-account", "upstream": "p-account", "model": "echo"},
            {"name": "p-plain", "upstream": "p-plain", "model": "echo"},
            {"name": "p-late", "upstream": "p-plain", "model": "late-garbage"},
            {"name": "p-hang", "upstream": "p-patient", "model": "hang"},
        ],
        "routes": [
            {"name": "p-account", "chain": ["p-account"]},
            {"name": "p-plain", "chain": ["p-plain"]},
            {"name": "p-late", "chain": ["p-late"]},
            {"name": "p-hang", "chain": ["p-hang", "p-plain"], "timeout_seconds": 4, **fast},
        ],
        "applications": [
            {
                "slug": "protocol",
                "team": "demo",
                "routes": ["p-account", "p-plain", "p-late", "p-hang", "r-garbage"],
            }
        ],
    }
    with django_db_blocker.unblock():
        apply_config(validate_config(config))
    yield served
    served.stop()


@pytest.fixture
def key(gateway: GatewayHandle, upstream: Upstream, issue_key) -> str:
    plaintext = issue_key(application="protocol").plaintext
    wait_until_served(gateway.url, plaintext, "p-plain", MESSAGES)
    return plaintext


@pytest.fixture
def sdk(gateway: GatewayHandle, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)


def test_the_upstream_request_id_reaches_the_sdk(sdk):
    completion = sdk.chat.completions.create(model="p-plain", messages=MESSAGES)
    assert completion._request_id == "req-up-echo"
    raw = sdk.chat.completions.with_raw_response.create(model="p-plain", messages=MESSAGES)
    assert raw.headers["openai-processing-ms"] == "42"
    assert raw.headers["x-sluice-request-id"].startswith("req_")
    stream = sdk.chat.completions.with_raw_response.create(
        model="p-plain", messages=MESSAGES, stream=True
    )
    assert stream.headers["x-request-id"] == "req-up-echo"
    assert "".join(c.choices[0].delta.content or "" for c in stream.parse() if c.choices) == (
        "Hello"
    )


def test_account_headers_go_only_to_an_upstream_set_to_take_them(gateway, key, upstream):
    def call(route: str) -> dict[str, str]:
        response = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            headers={"authorization": f"Bearer {key}", **ACCOUNT},
            json={"model": route, "messages": MESSAGES},
        )
        assert response.status_code == 200
        return upstream.seen[-1]

    forwarded, plain = call("p-account"), call("p-plain")
    assert {k.lower(): v for k, v in ACCOUNT.items()}.items() <= forwarded.items()
    assert not {k.lower() for k in ACCOUNT} & set(plain)
    for seen in (forwarded, plain):
        assert key not in json.dumps(seen)  # the Sluice key never travels upstream


def test_garbage_after_the_first_byte_ends_with_an_error_event_the_sdk_raises(sdk, call_record):
    raw = sdk.chat.completions.with_raw_response.create(
        model="p-late", messages=MESSAGES, stream=True
    )
    stream = raw.parse()
    got = []
    with pytest.raises(openai.APIError) as raised:
        for chunk in stream:
            got += [c.delta.content for c in chunk.choices]
    assert got == ["Hel"]
    assert "malformed" in str(raised.value)
    record = call_record(raw.headers["x-sluice-request-id"])
    assert (record.outcome, record.status_code) == ("upstream_error", 502)


def test_garbage_before_the_first_byte_falls_back_like_a_malformed_answer(sdk, call_record):
    raw = sdk.chat.completions.with_raw_response.create(
        model="r-garbage", messages=MESSAGES, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert text
    assert raw.headers["x-sluice-served-model"] == "f-ok"
    record = call_record(raw.headers["x-sluice-request-id"])
    classes = list(record.attempts.values_list("deployment", "error_class"))
    assert classes[0] == ("f-garbage", "malformed") and classes[-1] == ("f-ok", "")


def test_a_hanging_first_deployment_leaves_time_for_the_chain(sdk, call_record):
    """The upstream waits 60 s for an answer, the call has 4: the first deployment gets a
    share of them, and the next one serves the call in time."""
    started = time.monotonic()
    raw = sdk.chat.completions.with_raw_response.create(model="p-hang", messages=MESSAGES)
    assert time.monotonic() - started < 4.5
    assert raw.headers["x-sluice-served-model"] == "p-plain"
    record = call_record(raw.headers["x-sluice-request-id"])
    classes = list(record.attempts.values_list("deployment", "error_class"))
    assert classes[0] == ("p-hang", "read_timeout") and classes[-1] == ("p-plain", "")
