"""With Redis, a worker whose listener proves it hears every change keeps cached values past
their time to live without reloading them, and falls back to the time to live the moment
it cannot prove it: a lost, killed or silently replaced subscription."""

import asyncio
import os
import random
import time
import uuid

import pytest
import redis

from core.refresh import RefreshingCache, changes_heard, heard, invalidation_channel
from routing.deployment_state.grant_listener import PING_SECONDS, GrantListener
from tests.support.caches import Source

pytestmark = pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs REDIS_URL")

TTL = 1.0
TRUSTED = 60.0


def cache(kind: str = "keys") -> RefreshingCache[str]:
    return RefreshingCache(lambda: TTL, name=kind, trusted=lambda: TRUSTED)


async def until(condition, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.02)


@pytest.fixture
async def listener():
    from routing.deployment_state.redis import RedisDeploymentState

    changes_heard(None)
    state = RedisDeploymentState(os.environ["REDIS_URL"], f"test-{uuid.uuid4().hex[:8]}")
    listening = GrantListener(state)
    listening.start()
    await until(lambda: heard.through is not None)
    yield listening
    for task in listening._tasks:
        task.cancel()
    await asyncio.gather(*listening._tasks, return_exceptions=True)


async def test_while_the_listener_hears_a_value_outlives_its_ttl_without_a_read(listener):
    values, source = cache(), Source("a")
    assert await values.get("k", source.load) == "a"
    source.value = "b"  # behind Sluice's back: no message
    await asyncio.sleep(TTL * 1.5)
    assert heard.through is not None and heard.through > time.monotonic() - 2 * PING_SECONDS
    assert await values.get("k", source.load) == "a"
    assert source.reads == 1


async def test_a_published_change_still_drops_the_value_at_once(listener):
    values, source = cache(), Source("valid")
    await values.get("k", source.load)
    source.value = "revoked"
    redis.Redis.from_url(os.environ["REDIS_URL"]).publish(invalidation_channel(), "keys")
    await until(lambda: not values._values)
    assert await values.get("k", source.load) == "revoked"


async def test_a_lost_subscription_starts_afresh(listener):
    """Redis drops the listener's connection (a restart, a failover, a client kill): a
    change published before it subscribes again is lost, so every cached value goes once
    the new subscription answers."""
    values, source = cache(), Source("a")
    await values.get("k", source.load)
    source.value = "b"
    redis.Redis.from_url(os.environ["REDIS_URL"]).client_kill_filter(_type="pubsub")
    await until(lambda: not values._values)
    await until(lambda: heard.through is not None)
    assert await values.get("k", source.load) == "b"


async def test_once_the_listener_stops_a_value_older_than_its_ttl_is_reloaded(listener):
    values, source = cache(), Source("a")
    await values.get("k", source.load)
    for task in listener._tasks:
        task.cancel()
    await asyncio.gather(*listener._tasks, return_exceptions=True)
    assert heard.through is None
    source.value = "b"
    await asyncio.sleep(TTL * 1.1)
    assert await values.get("k", source.load) == "b"


async def test_a_listener_that_stops_hearing_lapses_within_the_ttl():
    """Redis stops answering (paused, a network partition): no pong moves the mark on, and
    values go back to their time to live without anyone noticing the silence."""
    values, source = cache(), Source("a")
    changes_heard(time.monotonic())
    await values.get("k", source.load)
    source.value = "b"
    await asyncio.sleep(TTL * 0.6)
    assert await values.get("k", source.load) == "a"  # heard recently enough: kept
    await asyncio.sleep(TTL * 0.6)
    assert await values.get("k", source.load) == "b"  # the mark is older than the ttl
    changes_heard(None)


async def test_a_cancelled_listener_stops_though_redis_py_swallows_some_cancellations(
    monkeypatch,
):
    """A cancellation that lands in redis-py's pub/sub `ping` is at times swallowed; the
        pinger went on every PING_SECONDS, and a worker's shutdown (the loop's close waits for
        every task it cancels) hung with it. Pings back to back, the client closed under them (its
    connections reopen), cancelled at 150 moments."""
    from routing.deployment_state import grant_listener as module
    from routing.deployment_state.redis import RedisDeploymentState

    monkeypatch.setattr(module, "PING_SECONDS", 0.0005)
    moments, pinging = random.Random(7), 0
    for _ in range(150):
        state = RedisDeploymentState(os.environ["REDIS_URL"], f"test-{uuid.uuid4().hex[:8]}")
        GrantListener(state).start()
        await asyncio.sleep(moments.uniform(0.002, 0.02))
        await state._client().aclose()  # as a test's end does, its listener still running
        await asyncio.sleep(moments.uniform(0, 0.01))
        tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("sluice-")]
        pinging += any(t.get_name() == "sluice-change-pinger" for t in tasks)
        for task in tasks:
            task.cancel()
        _, pending = await asyncio.wait(tasks, timeout=3)
        assert not pending, [t.get_name() for t in pending]
    changes_heard(None)
    assert pinging > 100  # most cancellations found the pinger at work
