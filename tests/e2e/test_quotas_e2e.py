"""Limits as a user meets them: the gateway under uvicorn, limits set the way an admin sets
them, and the answers, headers and audit records a client and an auditor see."""

import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support import GatewayHandle, SimulatorHandle, wait_until

MESSAGES = [{"role": "user", "content": "Count to three."}]


@pytest.fixture
def set_limit(committed_db):
    from quotas.services import limit_set

    return limit_set


def post(gateway: GatewayHandle, key: str, **body) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "fast", "messages": MESSAGES, **body},
        timeout=30,
    )


def _seconds(duration: str) -> int:
    """OpenAI's reset format (1s, 1m0s) in seconds."""
    minutes, _, seconds = duration.removesuffix("s").rpartition("m")
    return 60 * int(minutes or 0) + int(seconds)


def test_requests_per_minute_answer_429_with_headers_and_cost_the_upstream_nothing(
    gateway, issue_key, set_limit, call_record, simulator: SimulatorHandle
):
    # django-ratelimit counts in fixed one-minute windows whose edge falls anywhere in the
    # minute (staggered per key): a window that ends between these calls, or just before
    # the fourth, starts the count again. Then the same with a fresh key, whose edge is
    # elsewhere in the minute.
    for _ in range(3):
        key = issue_key()
        set_limit(scope="key", name=key.prefix, requests_per_minute=3)
        remaining = []
        for _ in range(3):
            response = post(gateway, key.plaintext)
            assert response.status_code == 200
            assert response.headers["x-ratelimit-limit-requests"] == "3"
            remaining.append(response.headers["x-ratelimit-remaining-requests"])
            reset = response.headers["x-ratelimit-reset-requests"]
            assert reset.endswith("s")
        window_left = _seconds(reset)
        if remaining == ["2", "1", "0"] and window_left > 3:
            break
        if remaining != ["2", "1", "0"]:
            assert remaining[0] == "2" and "2" in remaining[1:], remaining  # only a new window
    assert remaining == ["2", "1", "0"] and window_left > 3

    served = simulator.stats("small")["requests"]
    refused = post(gateway, key.plaintext)
    assert refused.status_code == 429
    error = refused.json()["error"]
    # OpenAI's own type for a 429 (SDKs switch on it); Sluice's reason in the code.
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert error["message"].startswith(f"key {key.prefix}: 3 requests per minute. Resets in ")
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert simulator.stats("small")["requests"] == served  # the upstream saw nothing
    record = call_record(refused.headers["x-sluice-request-id"])
    assert (record.outcome, record.status_code, record.attempt_count) == ("rate_limited", 429, 0)
    assert "3 requests per minute" in record.error_message


def test_tokens_per_minute_are_reserved_up_front_and_reported(gateway, issue_key, set_limit):
    key = issue_key()
    set_limit(scope="member", name=key.email, tokens_per_minute=200)
    ok = post(gateway, key.plaintext, max_tokens=20)
    assert ok.status_code == 200
    assert ok.headers["x-ratelimit-limit-tokens"] == "200"
    assert int(ok.headers["x-ratelimit-remaining-tokens"]) < 200
    too_big = post(gateway, key.plaintext, max_tokens=500)
    assert too_big.status_code == 429
    message = too_big.json()["error"]["message"]
    assert message.startswith(f"member {key.email}: 200 tokens per minute")
    assert "It can never fit" in message


def test_settlement_refunds_what_was_reserved_but_not_used(gateway, issue_key, set_limit):
    key = issue_key()
    # Each call reserves ~ prompt + 60 tokens but uses ~ prompt + 16: without the refund
    # the third call would not fit.
    set_limit(scope="key", name=key.prefix, tokens_per_minute=150)
    statuses = []
    for _ in range(3):
        statuses.append(post(gateway, key.plaintext, max_tokens=60).status_code)
        time.sleep(0.2)  # settlement happens right after the answer
    assert statuses == [200, 200, 200]


def test_concurrency_limit_refuses_the_request_over_it(gateway, issue_key, set_limit):
    key = issue_key()
    set_limit(scope="key", name=key.prefix, max_concurrency=2)

    def stream() -> int:
        with httpx.stream(
            "POST",
            f"{gateway.url}/v1/chat/completions",
            headers={"authorization": f"Bearer {key.plaintext}"},
            json={"model": "slow", "messages": MESSAGES, "stream": True},
            timeout=30,
        ) as response:
            response.read()
            return response.status_code

    with ThreadPoolExecutor(2) as pool:
        running = [pool.submit(stream) for _ in range(2)]
        time.sleep(0.5)  # both streams are in flight (each takes ~2 s)
        refused = post(gateway, key.plaintext)
        assert [f.result() for f in running] == [200, 200]
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "requests"
    assert refused.json()["error"]["code"] == "concurrency_exceeded"
    assert post(gateway, key.plaintext).status_code == 200  # slots were given back


def test_daily_token_budget(gateway, issue_key, set_limit, call_record):
    key = issue_key()
    set_limit(scope="member", name=key.email, tokens_per_day=120)
    assert post(gateway, key.plaintext, max_tokens=16).status_code == 200
    time.sleep(0.2)
    refused = post(gateway, key.plaintext, max_tokens=100)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("insufficient_quota", "budget_exceeded")
    assert "tokens per day" in error["message"]
    assert call_record(refused.headers["x-sluice-request-id"]).outcome == "budget_exceeded"


def test_monthly_cost_budget(gateway, issue_key, set_limit):
    key = issue_key()
    # small: $0.6 per million output tokens; 1024 reserved tokens cost ~ $0.0006.
    set_limit(scope="key", name=key.prefix, cost_per_month=0.0001)
    refused = post(gateway, key.plaintext)
    assert refused.status_code == 429
    assert "USD per month" in refused.json()["error"]["message"]


def test_limit_change_takes_effect_within_five_seconds(gateway, issue_key, set_limit):
    key = issue_key()
    set_limit(scope="key", name=key.prefix, requests_per_minute=1000)
    assert post(gateway, key.plaintext).status_code == 200
    set_limit(scope="key", name=key.prefix, max_concurrency=0, tokens_per_minute=1)
    changed = time.monotonic()
    wait_until(lambda: post(gateway, key.plaintext).status_code == 429, timeout=5, every=0.25)
    assert time.monotonic() - changed < 5


@pytest.mark.parametrize(("application", "status"), [("capped", 200), ("strict", 400)])
def test_max_tokens_ceiling_clamps_or_refuses(gateway, issue_key, application, status):
    key = issue_key(application=application)
    response = post(gateway, key.plaintext, max_tokens=100)
    assert response.status_code == status
    if status == 200:
        assert response.json()["usage"]["completion_tokens"] == 8  # clamped to the ceiling
    else:
        assert response.json()["error"]["param"] == "max_tokens"
    too_many = post(gateway, key.plaintext, n=3)
    assert too_many.status_code == 400
    assert too_many.json()["error"]["param"] == "n"


def test_usage_rollups_add_up_per_key_and_deployment(gateway, issue_key, committed_db):
    from quotas.models import UsageRollup

    key = issue_key()
    for _ in range(3):
        assert post(gateway, key.plaintext, max_tokens=5).status_code == 200
    row = wait_until(lambda: UsageRollup.objects.filter(key_prefix=key.prefix, requests=3).first())
    assert row.deployment == "small"
    assert row.tokens_out == 15
    assert row.tokens_in > 0
    assert row.cost > 0


# --- across processes: 4 workers sharing Redis ---------------------------------------


def _redis_only() -> None:
    if not os.environ.get("REDIS_URL"):
        pytest.skip("limits hold across workers only through Redis (REDIS_URL)")


def test_rpm_limit_is_exact_across_four_workers(gateway_four_workers, issue_key, set_limit):
    _redis_only()
    import asyncio

    import aiohttp

    key = issue_key()
    set_limit(scope="key", name=key.prefix, requests_per_minute=100)
    url = f"{gateway_four_workers.url}/v1/chat/completions"
    headers = {"authorization": f"Bearer {key.plaintext}"}
    body = json.dumps({"model": "fast", "messages": MESSAGES, "max_tokens": 1})

    # All 1000 must land in one window: when this one is about to end, wait for the next.
    first = httpx.post(url, headers=headers, content=body)
    assert first.status_code == 200
    minutes, _, seconds = first.headers["x-ratelimit-reset-requests"].rstrip("s").rpartition("m")
    reset = int(minutes or 0) * 60 + int(seconds)
    fresh_window = reset < 20
    if fresh_window:
        time.sleep(reset + 1)

    async def flood() -> list[int]:
        connector = aiohttp.TCPConnector(limit=200, force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def one() -> int:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    return response.status

            return await asyncio.gather(*(one() for _ in range(1000)))

    statuses = asyncio.run(flood())
    assert statuses.count(429) + statuses.count(200) == 1000
    assert statuses.count(200) == (100 if fresh_window else 99)  # the first took one


def test_concurrency_limit_holds_across_four_workers(
    gateway_four_workers, issue_key, set_limit, slow_simulator: SimulatorHandle
):
    _redis_only()
    key = issue_key()
    set_limit(scope="key", name=key.prefix, max_concurrency=10)
    httpx.post(f"{slow_simulator.url}/stats/reset")

    def stream(_: int) -> int:
        with httpx.stream(
            "POST",
            f"{gateway_four_workers.url}/v1/chat/completions",
            headers={"authorization": f"Bearer {key.plaintext}"},
            json={"model": "slow", "messages": MESSAGES, "stream": True, "user": uuid.uuid4().hex},
            timeout=30,
        ) as response:
            response.read()
            return response.status_code

    with ThreadPoolExecutor(40) as pool:
        statuses = list(pool.map(stream, range(40)))
    assert statuses.count(200) >= 10
    assert set(statuses) <= {200, 429}
    assert slow_simulator.stats("slow")["peak_in_flight"] <= 10
