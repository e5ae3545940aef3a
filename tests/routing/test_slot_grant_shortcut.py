"""Both backends grant a slot at once when nothing is to be weighed (nobody waits, slots free
beyond the headroom, batch under its cap): the same grant the fair-share pass makes.
Checked against that pass alone on random traffic: every admission and the whole state
after each step must match (for Redis: every key of the deployment, as stored). The same
for the bound a queued call's wait is checked against first (below)."""

import asyncio
import os
import random
import uuid

import pytest

from core.lua import Scripts
from routing.deployment_state import Limits, Result, grant_listener
from routing.deployment_state import redis as redis_state
from routing.deployment_state.local import LocalDeploymentState
from routing.deployment_state.slot_policy import BATCH, INTERACTIVE, Claim, queue_retry_after

T0 = 1_800_000_000.0


class _FairSharePassOnly(LocalDeploymentState):
    def _free_for(self, d, limits, waiter, now) -> bool:  # type: ignore[no-untyped-def]
        return False


def _state(s: LocalDeploymentState) -> tuple:
    """Everything a grant touches, per deployment (the waiters' futures aside)."""
    return tuple(
        (
            name,
            d.mode,
            d.limit,
            sorted(d.slots.items()),
            sorted(d.held.items(), key=lambda kv: kv[0]),
            sorted(d.waiting),
            {p: {m: list(q) for m, q in members.items()} for p, members in d.queues.items()},
            sorted(d.service.items()),
            sorted(d.demand.items()),
            sorted(d.budget.items()),
            sorted(d.preempting),
        )
        for name, d in sorted(s._deployments.items())
    )


async def _replay(state, seed: int, snapshot=None) -> list:
    rng = random.Random(seed)
    limits = Limits(max_concurrency=rng.choice([1, 3, 8, 20]), threshold=0, lease=30, reserve=0.25)
    now, held, queued, seen = T0, [], [], []
    for step in range(300):
        now += rng.choice([0.0005, 0.01, 0.3])
        roll = rng.random()
        if roll < 0.55 or not (held or queued):
            slot = f"s{step}"
            claim = Claim(
                rng.choice([INTERACTIVE, INTERACTIVE, BATCH]),
                rng.choice(["ann", "bob", "cy", "loud"]),
                rng.choice([50.0, 400.0]),
                wait=1.0,
                preemptible=rng.random() < 0.5,
            )
            admission = await state.acquire_slot(
                "d",
                limits,
                slot,
                retry=False,
                claim=claim,
                wait_until=now + rng.choice([0.0, 2.0]),
                deadline=rng.choice([None, now + 5.0]),
                now=now,
            )
            seen.append(admission)
            if admission.admitted:
                held.append(slot)
            elif admission.queued:
                queued.append(slot)
        elif held and (roll < 0.9 or not queued):
            slot = held.pop(rng.randrange(len(held)))
            result = rng.choice([Result.SUCCESS, Result.SUCCESS, Result.CAPACITY])
            seen.append(await state.release("d", limits, slot, result, now=now))
        else:
            slot = queued.pop(rng.randrange(len(queued)))
            departure = await state.leave("d", limits, slot, now=now)
            seen.append(departure)
            if departure.granted:
                held.append(slot)
        seen.append(await snapshot() if snapshot else _state(state))
    return seen


@pytest.mark.parametrize("seed", range(40))
def test_the_shortcut_grants_what_the_fair_share_pass_grants(seed: int) -> None:
    with_shortcut = asyncio.run(_replay(LocalDeploymentState(), seed))
    pass_only = asyncio.run(_replay(_FairSharePassOnly(), seed))
    assert with_shortcut == pass_only


async def _redis_replay(seed: int, scripts: Scripts) -> list:
    """The replay on a Redis state of its own; the deployment's keys after each step."""
    backend = redis_state.RedisDeploymentState(
        os.environ["REDIS_URL"], prefix=f"test-{uuid.uuid4().hex[:8]}"
    )
    client = backend._client()

    async def stored() -> list:
        keys = sorted(backend._keys("d"))
        async with client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.type(key)
            kinds = [kind.decode() for kind in await pipe.execute()]
        async with client.pipeline(transaction=False) as pipe:
            for key, kind in zip(keys, kinds, strict=True):
                {
                    "hash": lambda k: pipe.hgetall(k),
                    "zset": lambda k: pipe.zrange(k, 0, -1, withscores=True),
                    "set": lambda k: pipe.smembers(k),
                }.get(kind, pipe.type)(key)
            values = await pipe.execute()
        return [
            (key.split(":", 3)[-1], sorted(v.items()) if isinstance(v, dict) else v)
            for key, v in zip(keys, values, strict=True)
        ]

    saved = redis_state.SCRIPTS
    redis_state.SCRIPTS = scripts
    try:
        return await _replay(backend, seed, stored)
    finally:
        redis_state.SCRIPTS = saved
        await client.delete(*backend._keys("d"))
        await client.aclose()


def _scripts_with(old: str, new: str) -> Scripts:
    """The same scripts with `old` (a line of the acquire script) replaced by `new`."""
    assert old in redis_state.SCRIPTS.sources["acquire"]
    sources = redis_state.SCRIPTS.sources.items()
    return Scripts({name: source.replace(old, new) for name, source in sources})


# What each Redis shortcut turns into when switched off: the Lua's grant at once answering
# no (every grant by the dispatch), the queue's bound never fitting (every decision by the
# exact count; see below).
_WITHOUT = {
    "shortcut": (
        "local function free_for(class)",
        "local function free_for(class) do return false end",
    ),
    "bound": ("local wait = expected_wait(ahead_of(class) - 1, allowed)", "local wait = math.huge"),
}


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("without", sorted(_WITHOUT))
def test_the_redis_shortcuts_decide_what_the_full_pass_decides(
    without: str, seed: int, monkeypatch
) -> None:
    if not os.environ.get("REDIS_URL"):
        pytest.skip("REDIS_URL is not set")
    # The waiters' sweep runs on the real clock, the replay on its own: not during it.
    monkeypatch.setattr(grant_listener, "SWEEP_SECONDS", 3600.0)
    with_shortcut = asyncio.run(_redis_replay(seed, redis_state.SCRIPTS))
    full_pass = asyncio.run(_redis_replay(seed, _scripts_with(*_WITHOUT[without])))
    assert with_shortcut == full_pass


# A call that must queue is refused at once when the queue would not reach it in time. The
# wait is first bounded by everyone waiting (at least what fair share serves before it);
# only when that bound does not fit is the exact count made. Checked against the exact
# count alone, on the same random traffic.


class _ExactCountOnly(LocalDeploymentState):
    def _ahead(self, d, priority) -> int:  # type: ignore[no-untyped-def]
        return 10**9  # the bound never fits: every decision by the exact count

    def _drain(self, d, priority) -> int:  # type: ignore[no-untyped-def]
        ahead = LocalDeploymentState._ahead(self, d, priority)
        return queue_retry_after(ahead, self._allowed(d), d.hold)


@pytest.mark.parametrize("seed", range(40))
def test_the_queue_bound_decides_what_the_exact_count_decides(seed: int) -> None:
    with_bound = asyncio.run(_replay(LocalDeploymentState(), seed))
    exact_only = asyncio.run(_replay(_ExactCountOnly(), seed))
    assert with_bound == exact_only
