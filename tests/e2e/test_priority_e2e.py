"""Priority admission end to end: a real gateway (one worker; two sharing Redis), the slow
simulator streaming calls of about 2 s, and the `queue` route's deployment of 4 slots with
no reserve, so an interactive call must win a slot that batch calls queued for first."""

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support import GatewayHandle, SimulatorHandle, wait_until

MESSAGES = [{"role": "user", "content": "Wait your turn."}]
CALL_SECONDS = 2.0  # the slow simulator: 40 chunks, 50 ms apart


def _gateway(request: pytest.FixtureRequest, workers: int) -> GatewayHandle:
    if workers == 2 and not os.environ.get("REDIS_URL"):
        pytest.skip("workers share queues only through Redis (REDIS_URL)")
    return request.getfixturevalue("gateway" if workers == 1 else "gateway_two_workers")


def _call(gateway: GatewayHandle, key: str, priority: str, **extra: Any) -> httpx.Response:
    """One call on a new connection (so both workers take some), read to the end."""
    headers = {"authorization": f"Bearer {key}", "x-sluice-priority": priority}
    headers.update(extra.pop("headers", {}))
    body = {"model": "queue", "messages": MESSAGES, **extra}
    with httpx.Client(timeout=60) as client:
        response = client.post(f"{gateway.url}/v1/chat/completions", headers=headers, json=body)
    return response


def _fill(pool: ThreadPoolExecutor, gateway, key, slow: SimulatorHandle, count: int, priority):
    """`count` streaming calls; returns once the deployment's 4 slots are all busy."""
    before = slow.stats("slow")["in_flight"]
    calls = [pool.submit(_call, gateway, key, priority, stream=True) for _ in range(count)]
    wait_until(lambda: slow.stats("slow")["in_flight"] >= before + 4 or None, timeout=10)
    time.sleep(0.3)  # the rest have joined the queue
    return calls


@pytest.mark.parametrize("workers", [1, 2])
def test_interactive_call_gets_through_a_batch_flood(
    request, workers, issue_key, slow_simulator, call_record
):
    gateway = _gateway(request, workers)
    key = issue_key().plaintext
    with ThreadPoolExecutor(32) as pool:
        flood = _fill(pool, gateway, key, slow_simulator, 16, "batch")
        interactive = [pool.submit(_call, gateway, key, "interactive") for _ in range(4)]
        answers = [f.result() for f in interactive]
        batch = [f.result() for f in flood]

    for answer in answers:
        assert answer.status_code == 200
        # Ahead of a dozen batch calls that queued first: in at the next free slot.
        assert int(answer.headers["x-sluice-queue-ms"]) < (CALL_SECONDS + 1) * 1000
        record = call_record(answer.headers["x-sluice-request-id"])
        assert (record.priority, record.outcome) == ("interactive", "success")
        assert record.queue_ms == pytest.approx(int(answer.headers["x-sluice-queue-ms"]), abs=1)
    # Batch lost nothing: every call was served, the last ones after several rounds.
    assert [b.status_code for b in batch] == [200] * 16
    # Threads submit in no set order, so the longest wait, not the last submitted, queued.
    last = max(batch, key=lambda b: int(b.headers["x-sluice-queue-ms"]))
    assert int(last.headers["x-sluice-queue-ms"]) > 2.5 * CALL_SECONDS * 1000
    record = call_record(last.headers["x-sluice-request-id"])
    assert record.priority == "batch"
    assert record.queue_position is not None


def test_waiting_past_the_wait_limit_answers_503_with_retry_after(
    gateway, issue_key, slow_simulator, call_record
):
    """Refused once its wait limit is reached, or at once when the queue could not reach it
    within that limit (once the deployment has learnt that its calls hold a slot ~2 s)."""
    key = issue_key().plaintext
    with ThreadPoolExecutor(8) as pool:
        busy = _fill(pool, gateway, key, slow_simulator, 4, "interactive")
        started = time.monotonic()
        refused = _call(gateway, key, "batch", headers={"x-sluice-max-wait": "0.5"})
        waited = time.monotonic() - started
        for f in busy:
            f.result()
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "capacity_exhausted"
    assert int(refused.headers["retry-after"]) >= 1
    assert waited < 2.0
    record = call_record(refused.headers["x-sluice-request-id"])
    assert record.outcome == "capacity_exhausted"
    assert record.attempt_count == 0
    if record.queue_ms is not None:  # it queued: for its wait limit, not longer
        assert record.queue_ms == pytest.approx(500, abs=300)
        assert waited > 0.4


def test_a_client_that_leaves_while_queued_is_recorded_and_never_sent(
    gateway, issue_key, slow_simulator, call_record
):
    issued = issue_key()
    key = issued.plaintext
    with ThreadPoolExecutor(8) as pool:
        busy = _fill(pool, gateway, key, slow_simulator, 4, "interactive")
        requests_before = slow_simulator.stats("slow")["requests"]
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{gateway.url}/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                json={"model": "queue", "messages": MESSAGES},
                timeout=0.5,
            )
        for f in busy:
            f.result()
    time.sleep(0.5)
    assert slow_simulator.stats("slow")["requests"] == requests_before  # never reached it

    from routing.models import CallRecord

    record = wait_until(
        lambda: CallRecord.objects.filter(
            key_prefix=issued.prefix, outcome="client_cancelled"
        ).first()
    )
    assert record.attempt_count == 0
    assert record.queue_ms == pytest.approx(500, abs=300)
