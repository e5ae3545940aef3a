"""A batch slot asked back for a waiting interactive call (routing/deployment_state/slot_policy.py
rule 5): the contract both backends keep (Redis when REDIS_URL is set, as in CI's second run)."""

import asyncio

from routing.deployment_state import Limits, Result
from routing.deployment_state.slot_policy import BATCH
from tests.routing.test_slot_queue import Deployment, limits


async def asked_back(future: asyncio.Future[None], within: float = 2.0) -> bool:
    """Whether the holder hears within `within` s (Redis: through the listener's pub/sub)."""
    try:
        await asyncio.wait_for(asyncio.shield(future), within)
    except TimeoutError:
        return False
    return True


async def watched(d: Deployment, *slots: str) -> dict[str, asyncio.Future[None]]:
    return {s: await d.state.watch_preemption(d.name, s) for s in slots}


async def test_an_interactive_call_at_a_full_deployment_takes_the_youngest_batch_slot(state, name):
    d = Deployment(state, name, limits(3))
    asked = await watched(d, "old", "young")
    assert (await d.ask("old", BATCH, preemptible=True)).admitted
    assert (await d.ask("young", BATCH, preemptible=True)).admitted
    assert (await d.ask("i1")).admitted  # the last free slot: nothing asked back
    assert not await asked_back(asked["young"], within=0.2)

    assert (await d.ask("i2")).queued  # full: the youngest batch call is asked to leave
    assert await asked_back(asked["young"])
    assert not asked["old"].done()
    await d.done("young")  # what the holder does: cancel upstream, release
    assert await d.granted("i2") == ["i2"]
    snap = await d.snapshot()
    assert (snap.in_flight, snap.batch_in_flight, snap.waiting_interactive) == (3, 1, 0)


async def test_one_batch_slot_is_asked_back_per_waiting_interactive_call(state, name):
    d = Deployment(state, name, limits(4))
    slots = ["b1", "b2", "b3", "b4"]
    asked = await watched(d, *slots)
    for slot in slots:
        assert (await d.ask(slot, BATCH, preemptible=True)).admitted
    assert (await d.ask("i1")).queued
    assert (await d.ask("i2")).queued
    assert await asked_back(asked["b4"]) and await asked_back(asked["b3"])
    # A sweep (or any later dispatch) asks no more while the two asked are not yet back.
    await d.granted("i1", "i2")
    assert not await asked_back(asked["b2"], within=0.2)
    assert not asked["b1"].done()
    await d.done("b4")
    await d.done("b3")
    assert sorted(await d.granted("i1", "i2")) == ["i1", "i2"]


async def test_batch_calls_not_preemptible_and_batch_waiters_ask_nothing_back(state, name):
    d = Deployment(state, name, limits(2))
    asked = await watched(d, "plain", "runner")
    assert (await d.ask("plain", BATCH)).admitted  # a live client's batch call keeps its slot
    assert (await d.ask("runner", BATCH, preemptible=True)).admitted
    assert (await d.ask("b-waits", BATCH)).queued  # batch waiting for batch: nobody asked
    assert not await asked_back(asked["runner"], within=0.2)
    assert (await d.ask("i1")).queued
    assert await asked_back(asked["runner"])
    assert not asked["plain"].done()
    await d.done("runner")
    assert await d.granted("i1", "b-waits") == ["i1"]  # interactive first


async def test_a_slot_asked_back_whose_lease_ran_out_is_not_counted_again(state, name):
    """A holder that died never releases: once its lease runs out, the next interactive
    waiter asks another slot back."""
    d = Deployment(state, name, limits(2))
    asked = await watched(d, "dead", "new")
    assert (await d.ask("dead", BATCH, preemptible=True)).admitted
    assert (await d.ask("i0")).admitted
    assert (await d.ask("i1")).queued
    assert await asked_back(asked["dead"])
    d.now += 31  # past every lease: the sweep hands a slot to i1
    assert await d.granted("i1") == ["i1"]
    assert (await d.ask("new", BATCH, preemptible=True)).admitted
    assert (await d.ask("i2")).queued
    assert await asked_back(asked["new"])


async def test_at_capacity_on_a_slot_just_given_back_is_not_congestion(state, name):
    """The upstream may see the interactive call before the preempted call's cancel: its
    "at capacity" answer then cuts no limit and counts to no breaker; the call queues
    again (congested). The same answer on an ordinary slot cuts the limit."""
    lim = Limits(max_concurrency=2, threshold=1, lease=30, reserve=0.0)
    d = Deployment(state, name, lim)
    asked = await watched(d, "batch")
    assert (await d.ask("batch", BATCH, preemptible=True)).admitted
    assert (await d.ask("i0")).admitted
    assert (await d.ask("i1")).queued
    assert await asked_back(asked["batch"])
    await d.done("batch")  # given back: i1 has it
    assert await d.granted("i1") == ["i1"]
    d.now += 0.001
    congested = await state.release(name, lim, "i1", Result.CAPACITY, now=d.now)
    snap = await d.snapshot()
    assert congested and (snap.limit, snap.mode, snap.failures) == (2, "closed", 0)

    d.now += 0.001
    assert await state.release(name, lim, "i0", Result.CAPACITY, now=d.now)  # ordinary slot
    assert (await d.snapshot()).limit == 1  # cut


async def test_a_call_that_only_asks_for_a_free_slot_or_an_open_breaker_asks_nothing_back(
    state, name
):
    """A call that will not wait here (it tries the chain's next deployment) costs no batch
    call its work; nor does one waiting at a deployment whose breaker is open (a slot
    given back could go to nobody)."""
    lim = Limits(max_concurrency=1, threshold=1, cooldown=60, lease=30, reserve=0.0)
    d = Deployment(state, name, lim)
    asked = await watched(d, "batch")
    assert (await d.ask("batch", BATCH, preemptible=True)).admitted
    assert not (await d.ask("passing", wait=None)).admitted
    assert not await asked_back(asked["batch"], within=0.2)

    # An interactive call waits; its breaker opens meanwhile: once the slot asked back is
    # back, no other is asked for (nobody may have it while the breaker is open).
    lim3 = Limits(max_concurrency=3, threshold=1, cooldown=60, lease=30, reserve=0.0)
    other = Deployment(state, f"{name}-open", lim3)
    watch = await watched(other, "b1", "b2")
    assert (await other.ask("b1", BATCH, preemptible=True)).admitted
    assert (await other.ask("b2", BATCH, preemptible=True)).admitted
    assert (await other.ask("i0")).admitted
    assert (await other.ask("i1")).queued
    assert await asked_back(watch["b2"])
    other.now += 0.001
    await state.release(other.name, lim3, "i0", Result.FAILURE, now=other.now)  # opens it
    assert (await other.snapshot()).mode == "open"
    await other.done("b2")
    assert not await asked_back(watch["b1"], within=0.2)
