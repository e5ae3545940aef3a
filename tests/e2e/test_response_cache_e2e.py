"""The response cache as a client meets it: the gateway under uvicorn (Redis-backed when
REDIS_URL is set, else in process), applications that opt in, and the audit trail."""

import time
import uuid
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.support import GatewayHandle, SimulatorHandle

MESSAGES = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture
def cached_key(committed_db, issue_key):
    """A key of a new application of the demo team that may call `secret` (served by the
    simulator's `small`) with the response cache set to `ttl` seconds."""
    from accounts.models import Team
    from accounts.services import SYSTEM, application_create
    from routing.models import Route

    def make(ttl: int = 60, *, issued: bool = False) -> Any:
        slug = f"cache-{uuid.uuid4().hex[:8]}"
        application_create(
            actor=SYSTEM,
            team=Team.objects.get(slug="demo"),
            slug=slug,
            routes=[Route.objects.get(name="secret")],
            cache_ttl_seconds=ttl,
        )
        key = issue_key(application=slug)
        return key if issued else key.plaintext

    return make


def post(gateway: GatewayHandle, key: str, headers=None, **body) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}", **(headers or {})},
        json={"model": "secret", "messages": MESSAGES, **body},
        timeout=30,
    )


def test_an_identical_deterministic_request_is_answered_from_the_cache(
    gateway, cached_key, call_record, simulator: SimulatorHandle
):
    key = cached_key()
    before = simulator.stats("small")["requests"]
    first = post(gateway, key, temperature=0)
    assert first.status_code == 200 and first.headers["x-sluice-cache"] == "miss"
    second = post(gateway, key, temperature=0)
    assert second.status_code == 200 and second.headers["x-sluice-cache"] == "hit"
    assert second.json() == first.json()  # the same answer, id included
    assert second.headers["x-sluice-attempts"] == "0"
    assert second.headers["x-sluice-served-model"] == "small"
    assert simulator.stats("small")["requests"] == before + 1  # one upstream call for two

    miss = call_record(first.headers["x-sluice-request-id"])
    hit = call_record(second.headers["x-sluice-request-id"])
    assert (miss.cache, miss.attempt_count, miss.outcome) == ("miss", 1, "success")
    assert miss.tokens_in > 0 and miss.tokens_out > 0
    assert (hit.cache, hit.attempt_count, hit.outcome, hit.status_code) == (
        "hit",
        0,
        "success",
        200,
    )
    assert (hit.tokens_in, hit.tokens_out, hit.cost) == (0, 0, 0)  # no tokens were used
    assert hit.attempts.count() == 0 and not hit.fell_back


def test_the_official_sdk_gets_a_cached_answer(gateway, cached_key):
    client = OpenAI(base_url=f"{gateway.url}/v1", api_key=cached_key(), max_retries=0)
    ask = client.chat.completions.with_raw_response.create
    first = ask(model="secret", messages=MESSAGES, seed=42)
    second = ask(model="secret", messages=MESSAGES, seed=42)
    assert (first.headers["x-sluice-cache"], second.headers["x-sluice-cache"]) == ("miss", "hit")
    assert second.parse().choices[0].message.content == first.parse().choices[0].message.content


def test_answers_are_never_shared_across_applications(gateway, cached_key, simulator):
    one, other = cached_key(), cached_key()
    assert post(gateway, one, temperature=0).headers["x-sluice-cache"] == "miss"
    assert post(gateway, one, temperature=0).headers["x-sluice-cache"] == "hit"
    before = simulator.stats("small")["requests"]
    response = post(gateway, other, temperature=0)
    assert response.headers["x-sluice-cache"] == "miss"
    assert simulator.stats("small")["requests"] == before + 1


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        ({"temperature": 0.7}, {}),
        ({}, {}),
        (
            {"temperature": 0, "tools": [{"type": "function", "function": {"name": "send_mail"}}]},
            {},
        ),
        ({"temperature": 0}, {"cache-control": "no-cache"}),
    ],
    ids=["sampled", "default-temperature", "tools", "no-cache"],
)
def test_other_requests_always_go_upstream(
    gateway, cached_key, call_record, simulator, body, headers
):
    key = cached_key()
    before = simulator.stats("small")["requests"]
    for _ in range(2):
        response = post(gateway, key, headers, **body)
        assert response.status_code == 200
        assert response.headers["x-sluice-cache"] == "bypass"
    assert simulator.stats("small")["requests"] == before + 2
    assert call_record(response.headers["x-sluice-request-id"]).cache == "bypass"


def test_no_cache_header_and_no_cache_record_without_the_setting(gateway, issue_key, call_record):
    response = post(gateway, issue_key().plaintext, temperature=0, model="fast")
    assert response.status_code == 200 and "x-sluice-cache" not in response.headers
    assert call_record(response.headers["x-sluice-request-id"]).cache == ""


def test_an_answer_expires_after_the_applications_ttl(gateway, cached_key):
    key = cached_key(ttl=1)
    assert post(gateway, key, temperature=0).headers["x-sluice-cache"] == "miss"
    assert post(gateway, key, temperature=0).headers["x-sluice-cache"] == "hit"
    time.sleep(1.3)
    assert post(gateway, key, temperature=0).headers["x-sluice-cache"] == "miss"


def test_hits_count_towards_request_limits(gateway, cached_key, call_record):
    from quotas.services import limit_set

    issued = cached_key(issued=True)
    limit_set(scope="key", name=issued.prefix, requests_per_minute=3)
    key = issued.plaintext
    answers = [post(gateway, key, temperature=0) for _ in range(3)]
    assert [a.headers["x-sluice-cache"] for a in answers] == ["miss", "hit", "hit"]
    assert [a.headers["x-ratelimit-remaining-requests"] for a in answers] == ["2", "1", "0"]
    refused = post(gateway, key, temperature=0)
    assert refused.status_code == 429
    assert call_record(refused.headers["x-sluice-request-id"]).outcome == "rate_limited"


def test_the_responses_api_shares_the_entry_and_gets_the_hit_in_its_own_shape(
    gateway, cached_key, call_record
):
    key = cached_key()
    chat = post(gateway, key, temperature=0)
    assert chat.headers["x-sluice-cache"] == "miss"
    response = httpx.post(
        f"{gateway.url}/v1/responses",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "secret", "input": MESSAGES[0]["content"], "temperature": 0},
        timeout=30,
    )
    assert response.status_code == 200 and response.headers["x-sluice-cache"] == "hit"
    body = response.json()
    assert body["object"] == "response"
    text = body["output"][0]["content"][0]["text"]
    assert text == chat.json()["choices"][0]["message"]["content"]
    record = call_record(response.headers["x-sluice-request-id"])
    assert (record.cache, record.client_protocol, record.attempt_count) == (
        "hit",
        "openai-responses",
        0,
    )


def test_a_streamed_request_is_replayed_from_a_stored_answer(gateway, cached_key, call_record):
    key = cached_key()
    client = OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    # A stream that misses stores nothing (only whole answers are kept).
    streamed = client.chat.completions.with_raw_response.create(
        model="secret", messages=MESSAGES, temperature=0, stream=True
    )
    assert streamed.headers["x-sluice-cache"] == "miss"
    list(streamed.parse())
    whole = post(gateway, key, temperature=0)
    assert whole.headers["x-sluice-cache"] == "miss"
    answer = whole.json()

    raw = client.chat.completions.with_raw_response.create(
        model="secret",
        messages=MESSAGES,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert raw.headers["x-sluice-cache"] == "hit" and raw.headers["x-sluice-attempts"] == "0"
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == answer["choices"][0]["message"]["content"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.total_tokens == answer["usage"]["total_tokens"]
    record = call_record(raw.headers["x-sluice-request-id"])
    assert (record.cache, record.stream, record.attempt_count, record.tokens_out) == (
        "hit",
        True,
        0,
        0,
    )

    events = list(
        OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0).responses.create(
            model="secret", input=MESSAGES[0]["content"], temperature=0, stream=True
        )
    )
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == text
