"""Every upstream failure class, end to end: the simulator injects it, the official SDK
calls Sluice under uvicorn, and the audit trail must say what happened, attempt by attempt.
Each scenario has its own route and deployments (tests/support/scenario.py, FAULTS)."""

import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.support import GatewayHandle, SimulatorHandle, wait_until

MESSAGES = [{"role": "user", "content": "How is the weather?"}]


@pytest.fixture
def sdk(gateway: GatewayHandle, issue_key) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=issue_key().plaintext, max_retries=0)


def attempts_of(record: Any) -> list[tuple[str, int | None, str, str]]:
    return list(record.attempts.values_list("deployment", "status_code", "error_class", "skipped"))


# route, (deployment, status, error class, skipped) per attempt, the deployment that served
CLASSES = [
    (
        "r-srv",
        [
            ("f-srv", 500, "server_error", ""),
            ("f-srv", 500, "server_error", ""),
            ("f-ok", 200, "", ""),
        ],
        "f-ok",
    ),
    (
        "r-rl",
        [("f-rl", 429, "rate_limit", ""), ("f-rl", 429, "rate_limit", ""), ("f-ok", 200, "", "")],
        "f-ok",
    ),
    ("r-rlbare", [("f-rlbare", 429, "rate_limit", ""), ("f-ok", 200, "", "")], "f-ok"),
    ("r-ctx", [("f-ctx", 400, "context_length", ""), ("f-big-ctx", 200, "", "")], "f-big-ctx"),
    ("r-auth", [("f-auth", 401, "auth_config", ""), ("f-ok", 200, "", "")], "f-ok"),
    ("r-nf", [("f-nf", 404, "auth_config", ""), ("f-ok", 200, "", "")], "f-ok"),
    (
        "r-hang",
        [
            ("f-hang", None, "read_timeout", ""),
            ("f-hang", None, "read_timeout", ""),
            ("f-ok", 200, "", ""),
        ],
        "f-ok",
    ),
    (
        "r-reset",
        [
            ("f-reset", None, "connection", ""),
            ("f-reset", None, "connection", ""),
            ("f-ok", 200, "", ""),
        ],
        "f-ok",
    ),
    (
        "r-garbage",
        [
            ("f-garbage", 200, "malformed", ""),
            ("f-garbage", 200, "malformed", ""),
            ("f-ok", 200, "", ""),
        ],
        "f-ok",
    ),
]


@pytest.mark.parametrize(("route", "expected", "served"), CLASSES, ids=[c[0] for c in CLASSES])
def test_each_failure_class_is_handled_as_documented(sdk, call_record, route, expected, served):
    raw = sdk.chat.completions.with_raw_response.create(model=route, messages=MESSAGES)

    assert raw.parse().choices[0].message.content
    assert raw.headers["x-sluice-served-model"] == served
    record = call_record(raw.headers["x-sluice-request-id"])
    assert attempts_of(record) == expected
    assert record.attempt_count == int(raw.headers["x-sluice-attempts"]) == len(expected)
    assert record.fell_back is True
    assert record.retries == len(expected) - len({a[0] for a in expected})


def test_retries_wait_as_told(sdk, call_record):
    """Server errors back off (jittered, under the route's 0.2 s cap); a 429 with
    retry-after-ms waits exactly that long."""
    for route, reason, low, high in (
        ("r-srv", "backoff", 0, 200),
        ("r-rl", "retry_after", 200, 200),
    ):
        raw = sdk.chat.completions.with_raw_response.create(model=route, messages=MESSAGES)
        record = call_record(raw.headers["x-sluice-request-id"])
        second = record.attempts.get(number=2)
        assert second.retry_reason == reason
        assert low <= second.retry_delay_ms <= high


def test_misconfigured_deployment_is_marked_and_skipped(sdk, call_record, committed_db):
    from routing.models import Deployment

    sdk.chat.completions.create(model="r-nf", messages=MESSAGES)
    deployment = wait_until(
        lambda: Deployment.objects.filter(name="f-nf").exclude(config_error="").first()
    )
    assert "404" in deployment.config_error
    # Opened at once: the next call does not even try it.
    raw = sdk.chat.completions.with_raw_response.create(model="r-nf", messages=MESSAGES)
    record = call_record(raw.headers["x-sluice-request-id"])
    assert attempts_of(record) == [("f-nf", None, "", "breaker"), ("f-ok", 200, "", "")]


def test_upstream_bad_request_comes_back_as_it_is(sdk, call_record):
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model="r-ok", messages=MESSAGES, n=500)
    response = caught.value.response
    assert response.json()["error"]["param"] == "n"
    record = call_record(response.headers["x-sluice-request-id"])
    assert record.outcome == "upstream_client_error"
    assert attempts_of(record) == [("f-ok", 400, "bad_request", "")]


def test_stream_cut_after_the_first_byte_ends_with_an_error_event(gateway, issue_key, call_record):
    key = issue_key()
    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key.plaintext}"},
        json={"model": "r-cut", "messages": MESSAGES, "stream": True},
    ) as response:
        assert response.status_code == 200
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert '"error"' in events[-1]
    assert "stream_interrupted" in events[-1]
    assert "[DONE]" not in events[-1]
    assert len(events) > 2  # chunks did reach the client first: no fallback possible
    record = call_record(response.headers["x-sluice-request-id"])
    assert record.outcome == "upstream_error"
    assert attempts_of(record) == [("f-cut", 200, "connection", "")]
    assert record.tokens_out > 0


def test_breaker_opens_after_three_failing_calls_and_recovers_after_cooldown(
    sdk, call_record, faulty_simulator: SimulatorHandle
):
    faulty_simulator.set_faults("brk", {"server_error": 1.0})
    try:
        for _ in range(3):  # three calls met server errors in a row (each counts once): open
            sdk.chat.completions.create(model="r-brk", messages=MESSAGES)
        reached = faulty_simulator.stats("brk")["requests"]
        for _ in range(5):
            raw = sdk.chat.completions.with_raw_response.create(model="r-brk", messages=MESSAGES)
            assert raw.headers["x-sluice-served-model"] == "f-ok"
        assert faulty_simulator.stats("brk")["requests"] == reached  # nothing went there
        record = call_record(raw.headers["x-sluice-request-id"])
        assert attempts_of(record)[0] == ("f-brk", None, "", "breaker")
    finally:
        faulty_simulator.set_faults("brk", {})
    time.sleep(2.2)  # the cooldown: then a probe goes through, and succeeds
    raw = sdk.chat.completions.with_raw_response.create(model="r-brk", messages=MESSAGES)
    assert raw.headers["x-sluice-served-model"] == "f-brk"


def test_drain_moves_traffic_down_the_chain_and_undo_brings_it_back(sdk, call_record, committed_db):
    from routing.catalog.services import deployment_drain

    def served_by() -> str:
        raw = sdk.chat.completions.with_raw_response.create(model="r-drn", messages=MESSAGES)
        return raw.headers["x-sluice-served-model"], raw.headers["x-sluice-request-id"]

    assert served_by()[0] == "f-drn"
    deployment_drain(name="f-drn", minutes=5)
    try:
        request_id = wait_until(lambda: served_by()[0] == "f-ok" and served_by()[1], timeout=6)
        record = call_record(request_id)
        assert attempts_of(record) == [("f-drn", None, "", "drain"), ("f-ok", 200, "", "")]
    finally:
        deployment_drain(name="f-drn", minutes=None)
    wait_until(lambda: served_by()[0] == "f-drn", timeout=6)


@pytest.mark.parametrize(
    ("policy", "outcome"),
    [("any", "f-t2"), ("same-tier", "f-t2"), ("none", 503)],
)
def test_fallback_policy_header(gateway, issue_key, policy, outcome):
    key = issue_key()
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key.plaintext}", "x-sluice-fallback": policy},
        json={"model": "r-tier", "messages": MESSAGES},
    )
    if outcome == 503:
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "capacity_exhausted"
        assert int(response.headers["retry-after"]) >= 1
    else:
        assert response.headers["x-sluice-served-model"] == outcome


def test_same_tier_never_downgrades(gateway, issue_key, faulty_simulator, call_record):
    key = issue_key()
    faulty_simulator.set_faults("t2", {"capacity": 1.0})
    try:
        response = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            headers={"authorization": f"Bearer {key.plaintext}", "x-sluice-fallback": "same-tier"},
            json={"model": "r-tier", "messages": MESSAGES},
        )
    finally:
        faulty_simulator.set_faults("t2", {})
    assert response.status_code == 503
    record = call_record(response.headers["x-sluice-request-id"])
    assert {a[0] for a in attempts_of(record)} == {"f-t1", "f-t2"}  # never f-t3 (small)


def test_max_wait_header_bounds_the_whole_call(gateway, issue_key):
    key = issue_key()
    started = time.monotonic()
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={
            "authorization": f"Bearer {key.plaintext}",
            "x-sluice-max-wait": "0.5",
            "x-sluice-fallback": "none",
        },
        json={"model": "r-hang", "messages": MESSAGES},
        timeout=10,
    )
    assert time.monotonic() - started < 1.5
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"


def test_breaker_opened_by_one_worker_is_respected_by_the_other(
    gateway_two_workers: GatewayHandle, issue_key, faulty_simulator: SimulatorHandle
):
    import os

    if not os.environ.get("REDIS_URL"):
        pytest.skip("workers share breaker state only through Redis (REDIS_URL)")
    key = issue_key()
    call: Callable[[], httpx.Response] = lambda: httpx.post(  # noqa: E731
        f"{gateway_two_workers.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key.plaintext}"},
        json={"model": "r-shared", "messages": MESSAGES},
    )
    faulty_simulator.set_faults("shared", {"server_error": 1.0})
    try:
        for _ in range(3):  # three calls met server errors: open, whichever worker saw them
            call()
        reached = faulty_simulator.stats("shared")["requests"]
        for _ in range(20):  # new connections: both workers take some of these
            assert call().headers["x-sluice-served-model"] == "f-ok"
        assert faulty_simulator.stats("shared")["requests"] == reached
    finally:
        faulty_simulator.set_faults("shared", {})
