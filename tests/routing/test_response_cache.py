"""The response cache's rules (what may be cached, the key) and its two backends, one
contract suite: in process always, Redis when REDIS_URL is set."""

import asyncio
import json
import os
import uuid

import pytest

from routing.request_path.cache_replay import replay
from routing.request_path.payloads import Endpoint, parse_request
from routing.request_path.response_cache import (
    CachedAnswer,
    LocalResponseCache,
    RedisResponseCache,
    cache_key,
    deterministic,
    wanted,
)


def chat(**body):
    raw = {"model": "fast", "messages": [{"role": "user", "content": "Hi"}], **body}
    return parse_request(Endpoint.CHAT, json.dumps(raw).encode())


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.0, "max_tokens": 5}, True),
        ({"seed": 7}, True),
        ({"seed": 7, "temperature": 1.2}, True),  # a seed asks for repeatable sampling
        ({}, False),  # the default temperature samples
        ({"temperature": 0.7}, False),
        ({"temperature": 0, "tools": [{"type": "function", "function": {"name": "f"}}]}, False),
        ({"seed": 1, "functions": [{"name": "f"}]}, False),
        ({"temperature": 0, "tool_choice": "auto"}, False),
    ],
)
def test_only_deterministic_requests_without_tools_are_cacheable(body, expected):
    assert deterministic(chat(**body)) is expected


def test_embeddings_are_always_deterministic():
    request = parse_request(Endpoint.EMBEDDINGS, b'{"model":"e","input":"x"}')
    assert deterministic(request)


def test_no_cache_bypasses_the_cache_and_streams_may_be_replayed():
    assert wanted(chat(temperature=0), None)
    assert not wanted(chat(temperature=0), "no-cache")
    assert not wanted(chat(temperature=0), "max-age=0, No-Cache")
    assert wanted(chat(temperature=0, stream=True), None)
    key = cache_key(route="fast", application_id=1, request=chat(temperature=0))
    streamed = chat(temperature=0, stream=True, stream_options={"include_usage": True})
    assert cache_key(route="fast", application_id=1, request=streamed) == key


async def test_a_replayed_stream_adds_up_to_the_stored_answer():
    answer = {
        "id": "chatcmpl-1",
        "created": 3,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hi",
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }
    request = chat(temperature=0, stream=True, stream_options={"include_usage": True})
    raw = b"".join([part async for part in replay(answer, request, None)])
    events = [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["content"] == "Hi"
    assert chunks[0]["choices"][0]["delta"]["tool_calls"][0]["index"] == 0
    assert chunks[1]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[2] == {**chunks[2], "choices": [], "usage": answer["usage"]}
    without_usage = chat(temperature=0, stream=True)
    raw = b"".join([part async for part in replay(answer, without_usage, None)])
    assert b'"usage"' not in raw


def test_the_key_is_canonical_and_per_route_and_application():
    a = chat(temperature=0, max_tokens=5)
    reordered = parse_request(
        Endpoint.CHAT,
        b'{"max_tokens":5,"temperature":0,"messages":[{"content":"Hi","role":"user"}],'
        b'"model":"fast"}',
    )
    key = cache_key(route="fast", application_id=1, request=a)
    assert cache_key(route="fast", application_id=1, request=reordered) == key
    assert cache_key(route="fast", application_id=2, request=a) != key  # never shared
    assert cache_key(route="smart", application_id=1, request=a) != key
    assert cache_key(route="fast", application_id=1, request=chat(temperature=0)) != key


@pytest.fixture(params=["local", "redis"])
async def backend(request):
    def make(max_bytes: int = 10_000, max_entry_bytes: int = 5_000):
        if request.param == "local":
            return LocalResponseCache(max_bytes, max_entry_bytes)
        url = os.environ.get("REDIS_URL")
        if not url:
            pytest.skip("REDIS_URL is not set")
        made = RedisResponseCache(url, f"test-{uuid.uuid4().hex[:8]}", max_bytes, max_entry_bytes)
        created.append(made)
        return made

    created: list[RedisResponseCache] = []
    yield make
    for cache in created:
        await cache.clear()


def answer(size: int = 10, deployment: str = "small") -> CachedAnswer:
    return CachedAnswer(body=b"{" + b"x" * size + b"}", deployment=deployment)


async def test_a_stored_answer_is_found_until_it_expires(backend):
    cache = backend()
    assert await cache.get("k") is None
    await cache.put("k", answer(deployment="big"), ttl=0.3)
    assert await cache.get("k") == answer(deployment="big")
    await asyncio.sleep(0.4)
    assert await cache.get("k") is None


async def test_the_least_recently_used_goes_first_past_the_cap(backend):
    cache = backend(max_bytes=3_000)
    for name in ("a", "b", "c"):
        await cache.put(name, answer(900), ttl=60)
    assert await cache.get("a") is not None  # a used again: b is now the oldest
    await cache.put("d", answer(900), ttl=60)
    assert await cache.get("b") is None
    assert all([await cache.get(n) for n in ("a", "c", "d")])


async def test_an_answer_over_the_entry_limit_is_not_stored(backend):
    cache = backend(max_entry_bytes=500)
    await cache.put("big", answer(600), ttl=60)
    assert await cache.get("big") is None


async def test_storing_again_replaces_and_counts_the_bytes_once(backend):
    cache = backend(max_bytes=2_500)
    for _ in range(5):
        await cache.put("same", answer(900), ttl=60)
    await cache.put("other", answer(900), ttl=60)
    assert await cache.get("same") is not None and await cache.get("other") is not None


async def test_expired_entries_free_their_room(backend):
    cache = backend(max_bytes=2_000)
    await cache.put("old", answer(900), ttl=0.2)
    await asyncio.sleep(0.3)
    assert await cache.get("old") is None
    await cache.put("a", answer(900), ttl=60)
    await cache.put("b", answer(900), ttl=60)
    assert await cache.get("a") is not None and await cache.get("b") is not None


async def test_redis_down_is_a_miss_not_a_failure():
    cache = RedisResponseCache("redis://127.0.0.1:1/0", "down", 10_000, 5_000)
    await cache.put("k", answer(), ttl=60)
    assert await cache.get("k") is None


def _app_config(ttl: object) -> dict:
    return {
        "teams": [{"slug": "cachers"}],
        "applications": [{"slug": "cached", "team": "cachers", "cache_ttl_seconds": ttl}],
    }


@pytest.mark.django_db
def test_the_config_file_sets_an_applications_cache_and_refuses_a_bad_one():
    from accounts.models import Application
    from routing.catalog.config_export import catalog_entries
    from routing.catalog.config_file import ConfigError, apply_config, validate_config

    apply_config(validate_config(_app_config(300)))
    assert Application.objects.get(slug="cached").cache_ttl_seconds == 300
    assert catalog_entries()["applications"]["cached"]["cache_ttl_seconds"] == 300
    for bad in (-1, 8 * 24 * 3600, "60"):
        with pytest.raises(ConfigError, match="cache_ttl_seconds"):
            validate_config(_app_config(bad))
