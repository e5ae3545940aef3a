"""Calls queued for a slot when Redis dies, or comes back without its data, are still
served: a private redis-server on its own port, killed and restarted by the
test. Runs in both CI passes (it needs only the redis-server binary)."""

import asyncio
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from routing.deployment_state import Limits, Result
from routing.deployment_state.redis import RedisDeploymentState
from routing.deployment_state.slot_policy import BATCH, Claim
from tests.support import free_port

pytestmark = pytest.mark.skipif(not shutil.which("redis-server"), reason="no redis-server")
LIMITS = Limits(max_concurrency=1, threshold=0, lease=30, reserve=0.0)


class PrivateRedis:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port, socket_timeout=1).ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    yield server
    if server.proc is not None and server.proc.poll() is None:
        server.kill()


async def _queued(state: RedisDeploymentState, name: str) -> asyncio.Task[bool]:
    """One call holds the only slot ("a"); a batch call ("b") queues behind it."""
    assert (await state.acquire_slot(name, LIMITS, "a", retry=False)).admitted
    claim = Claim(BATCH, "m", 10.0, wait=60)
    admission = await state.acquire_slot(
        name, LIMITS, "b", retry=False, claim=claim, wait_until=time.time() + 60
    )
    assert admission.queued
    return asyncio.create_task(state.wait(name, "b", 30))


async def test_a_call_queued_when_redis_dies_is_served_when_the_slot_frees(private_redis):
    state = RedisDeploymentState(private_redis.url, prefix=f"t-{uuid.uuid4().hex[:6]}")
    name = "dep"
    waiter = await _queued(state, name)
    await asyncio.sleep(0.2)
    private_redis.kill()
    await state.release(name, LIMITS, "a", Result.SUCCESS)  # the stream ends during the outage
    assert await asyncio.wait_for(waiter, 8)
    await state.release(name, LIMITS, "b", Result.SUCCESS)
    snapshot = await state._fallback.snapshot(name, LIMITS)
    assert (snapshot.in_flight, snapshot.waiting_batch) == (0, 0)


async def test_a_call_queued_when_redis_dies_waits_for_a_slot_that_is_really_free(
    private_redis,
):
    """The call holding the only slot is still running when Redis dies: the waiter, moved
    to this worker's own state, must not get that slot (the provider would answer "at
    capacity") until the call ends."""
    state = RedisDeploymentState(private_redis.url, prefix=f"t-{uuid.uuid4().hex[:6]}")
    name = "dep"
    waiter = await _queued(state, name)
    await asyncio.sleep(0.2)
    private_redis.kill()
    await asyncio.sleep(2.5)  # the waiter has moved to the fallback by now
    assert not waiter.done()
    assert (await state._fallback.snapshot(name, LIMITS)).in_flight == 1  # "a", still held
    await state.release(name, LIMITS, "a", Result.SUCCESS)
    assert await asyncio.wait_for(waiter, 3)
    await state.release(name, LIMITS, "b", Result.SUCCESS)
    assert (await state._fallback.snapshot(name, LIMITS)).in_flight == 0


async def test_a_call_queued_when_redis_restarts_empty_is_queued_again(private_redis):
    state = RedisDeploymentState(private_redis.url, prefix=f"t-{uuid.uuid4().hex[:6]}")
    name = "dep"
    waiter = await _queued(state, name)
    await asyncio.sleep(0.2)
    private_redis.kill()
    private_redis.start()  # back at once, without what it held
    await state.release(name, LIMITS, "a", Result.SUCCESS)
    assert await asyncio.wait_for(waiter, 8)
    # "b" holds a slot: in Redis when it was queued again there, in this worker's state
    # when a sweep saw Redis down first. Wherever it is, it is released there.
    shared, own = await state.snapshot(name, LIMITS), await state._fallback.snapshot(name, LIMITS)
    assert (shared.in_flight + own.in_flight, shared.waiting_batch, own.waiting_batch) == (1, 0, 0)
    await state.release(name, LIMITS, "b", Result.SUCCESS)
    assert (await state.snapshot(name, LIMITS)).in_flight == 0
    assert (await state._fallback.snapshot(name, LIMITS)).in_flight == 0
    await state._client().aclose()


async def test_a_call_queued_while_redis_is_down_moves_back_when_it_returns(private_redis):
    state = RedisDeploymentState(private_redis.url, prefix=f"t-{uuid.uuid4().hex[:6]}")
    name = "dep"
    private_redis.kill()
    waiter = await _queued(state, name)  # both in this worker's own state
    private_redis.start()
    # Served: from Redis once it is back (it knows of no call in flight), or here when "a"
    # ends; "a" is released where it was granted, never lost.
    await asyncio.sleep(1.5)
    await state.release(name, LIMITS, "a", Result.SUCCESS)
    assert await asyncio.wait_for(waiter, 8)
    assert (await state._fallback.snapshot(name, LIMITS)).in_flight in (0, 1)
    await state.release(name, LIMITS, "b", Result.SUCCESS)
    assert (await state._fallback.snapshot(name, LIMITS)).in_flight == 0
    assert (await state.snapshot(name, LIMITS)).in_flight == 0
    await state._client().aclose()


def test_gateway_serves_calls_queued_when_redis_dies(
    private_redis, e2e_database, issue_key, slow_simulator
):
    """The issue's probe: four batch calls wait behind four streams of about 2 s on the
    `queue` route (4 slots); Redis is killed; the waiting calls are served once the streams
    end, not refused at their deadline. Then Redis returns and calls go on."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.e2e.test_priority_e2e import _call
    from tests.support import start_gateway, wait_until

    env = {"REDIS_URL": private_redis.url, "SLUICE_WAIT_BATCH": "20"}
    runs = start_gateway(e2e_database, extra_env=env)
    gateway = next(runs)
    try:
        key = issue_key().plaintext
        before = slow_simulator.stats("slow")["in_flight"]
        with ThreadPoolExecutor(8) as pool:
            streams = [pool.submit(_call, gateway, key, "batch", stream=True) for _ in range(4)]
            wait_until(lambda: slow_simulator.stats("slow")["in_flight"] >= before + 4 or None)
            waiting = [pool.submit(_call, gateway, key, "batch") for _ in range(4)]
            time.sleep(0.5)  # they have joined the queue in Redis
            private_redis.kill()
            started = time.monotonic()
            answers = [f.result() for f in waiting]
            took = time.monotonic() - started
            assert [f.result().status_code for f in streams] == [200] * 4
        assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
        assert took < 12  # the streams end after about 2 s; the deadline was 20 s
        private_redis.start()
        assert _call(gateway, key, "batch").status_code == 200
    finally:
        next(runs, None)
