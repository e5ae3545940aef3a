"""With Redis unreachable, every operation of the Redis deployment state answers from this
worker's own state (the one policy: open), the reads and the sweep included."""

import os
import time
import uuid

import pytest

from routing.deployment_state import Limits, Result
from routing.deployment_state.redis import RedisDeploymentState

DOWN_URL = "redis://127.0.0.1:1/0"  # nothing listens there


def limits(concurrency: int) -> Limits:
    return Limits(max_concurrency=concurrency, threshold=0, lease=30)


async def test_snapshot_and_sweep_answer_from_this_worker_while_redis_is_down(name, caplog):
    state = RedisDeploymentState(DOWN_URL, prefix="unreachable")
    lim = limits(1)
    assert (await state.acquire_slot(name, lim, "holder", retry=False)).admitted
    queued = await state.acquire_slot(name, lim, "waiter", retry=False, wait_until=time.time() + 30)
    assert queued.queued

    snapshot = await state.snapshot(name, lim)
    assert (snapshot.in_flight, snapshot.waiting_interactive) == (1, 1)
    assert await state.sweep(name, lim, ["waiter"]) == []
    assert state.policy.down
    assert "Redis unreachable" in caplog.text

    await state.release(name, lim, "holder", Result.SUCCESS)
    assert await state.sweep(name, lim, ["waiter"]) == ["waiter"]
    await state.reset(name)  # never raises either
    assert (await state.snapshot(name, lim)).in_flight == 0


async def test_while_redis_is_down_each_worker_takes_its_share_of_a_deployment(name):
    """Two workers renewing slots in Redis count each other; cut off from it, each admits
    half of a deployment's 4 slots on its own, not 4 (8 in flight at a provider of 4)."""
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    prefix = f"share-{uuid.uuid4().hex[:6]}"
    workers = [RedisDeploymentState(url, prefix=prefix) for _ in range(2)]
    lim = limits(4)
    for state in (*workers, workers[0]):  # each renewal counts the workers heard from
        slot = uuid.uuid4().hex
        assert (await state.acquire_slot(name, lim, slot, retry=False)).admitted
        await state.renew({name: (lim, [slot])})
        await state.release(name, lim, slot, Result.SUCCESS)
    try:
        for state in workers:
            state.url = DOWN_URL
        admitted = [
            sum(
                [
                    (await s.acquire_slot(name, lim, f"{i}-{n}", retry=False)).admitted
                    for n in range(4)
                ]
            )
            for i, s in enumerate(workers)
        ]
        assert admitted == [2, 2]
    finally:
        for state in workers:
            state.url = url
            await state._client().aclose()
