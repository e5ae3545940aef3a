"""With Redis unreachable, every operation of the Redis deployment state answers from this
worker's own state (the one policy: open), the reads and the sweep included."""

import time

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
