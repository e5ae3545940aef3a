"""Who gets a deployment's next free slot: one deterministic suite (explicit clocks), both
backends (Redis when REDIS_URL is set, as in CI's second run)."""

import asyncio
import os
import time
import uuid

import pytest

from routing.deployment_state import Limits, Refusal, Result
from routing.deployment_state.rules import headroom, loudest
from routing.deployment_state.slot_policy import (
    BATCH,
    INTERACTIVE,
    Claim,
    batch_cap,
    queue_retry_after,
)

T0 = 1_800_000_000.0
WAIT = T0 + 100  # queue until then


def limits(concurrency: int, reserve: float = 0.0) -> Limits:
    return Limits(max_concurrency=concurrency, threshold=0, lease=30, reserve=reserve)


class Deployment:
    """One deployment under test, with a clock that only moves when told."""

    def __init__(self, state, name: str, limits: Limits) -> None:
        self.state, self.name, self.limits, self.now = state, name, limits, T0

    async def ask(
        self,
        slot: str,
        priority: str = INTERACTIVE,
        member: str = "m",
        *,
        wait=WAIT,
        cost=100.0,
        preemptible=False,
    ):
        self.now += 0.001  # arrivals are ordered
        return await self.state.acquire_slot(
            self.name,
            self.limits,
            slot,
            retry=False,
            claim=Claim(priority, member, cost, wait=0, preemptible=preemptible),
            wait_until=wait,
            now=self.now,
        )

    async def done(self, slot: str, service: float | None = None) -> None:
        self.now += 0.001
        await self.state.release(
            self.name, self.limits, slot, Result.SUCCESS, service=service, now=self.now
        )

    async def granted(self, *slots: str) -> list[str]:
        return await self.state.sweep(self.name, self.limits, list(slots), now=self.now)

    async def snapshot(self):
        return await self.state.snapshot(self.name, self.limits, now=self.now)

    async def serve_in_order(self, holder: str, waiting: list[str]) -> list[str]:
        """Free `holder`'s slot, then each granted one in turn: the order of grants."""
        await self.done(holder)
        return await self.serve_in_order_from(waiting)

    async def serve_in_order_from(self, waiting: list[str]) -> list[str]:
        """With one slot, held by the last grant: release each grant in turn."""
        order: list[str] = []
        while len(order) < len(waiting):
            (current,) = set(await self.granted(*waiting)) - set(order)
            order.append(current)
            await self.done(current)
        return order


async def test_a_free_slot_is_taken_at_once_and_a_full_deployment_queues(state, name):
    d = Deployment(state, name, limits(1))
    assert (await d.ask("a")).admitted
    queued = await d.ask("b")
    assert (queued.admitted, queued.queued, queued.refusal) == (False, True, Refusal.CONCURRENCY)
    refused = await d.ask("c", wait=None)  # not willing to wait: told at once, not queued
    assert (refused.admitted, refused.queued) == (False, False)
    snap = await d.snapshot()
    assert (snap.in_flight, snap.waiting_interactive) == (1, 1)


async def test_interactive_goes_before_batch_that_waited_longer(state, name):
    d = Deployment(state, name, limits(2))
    for slot in ("x1", "x2"):
        assert (await d.ask(slot, BATCH)).admitted
    assert (await d.ask("batch-1", BATCH)).queued
    assert (await d.ask("batch-2", BATCH)).queued
    assert (await d.ask("inter-1", INTERACTIVE)).queued
    order = await d.serve_in_order("x1", ["batch-1", "batch-2", "inter-1"])
    assert order == ["inter-1", "batch-1", "batch-2"]


async def test_batch_never_takes_the_reserve_kept_for_interactive(state, name):
    d = Deployment(state, name, limits(5, reserve=0.2))
    admitted = [(await d.ask(f"b{i}", BATCH, member=f"m{i}")).admitted for i in range(5)]
    assert admitted == [True, True, True, True, False]  # 4 of 5: one slot kept
    snap = await d.snapshot()
    assert (snap.in_flight, snap.batch_in_flight, snap.waiting_batch) == (4, 4, 1)
    assert (await d.ask("i", INTERACTIVE)).admitted  # the reserve is there at once
    await d.done("b0")
    assert await d.granted("b4") == ["b4"]  # batch back under its cap


async def test_batch_waits_while_any_interactive_request_waits(state, name):
    d = Deployment(state, name, limits(3))
    for slot in ("i1", "i2", "i3"):
        assert (await d.ask(slot)).admitted
    assert (await d.ask("wait-i", INTERACTIVE)).queued
    assert (await d.ask("wait-b", BATCH)).queued
    await d.done("i1")
    assert await d.granted("wait-i", "wait-b") == ["wait-i"]
    await d.done("i2")
    assert await d.granted("wait-b") == ["wait-b"]


async def test_members_are_served_fairly_not_first_come(state, name):
    """A member who queued six requests first does not make a second member wait behind
    all six, nor behind the first of them: the newcomer is lifted to the counter of those
    waiting, a tie goes to the member with fewer calls waiting, and grants alternate while
    both wait (least weighted service first)."""
    d = Deployment(state, name, limits(1))
    assert (await d.ask("x", member="other")).admitted
    heavy = [f"h{i}" for i in range(1, 7)]
    for slot in heavy:
        assert (await d.ask(slot, member="heavy")).queued
    for slot in ("l1", "l2"):
        assert (await d.ask(slot, member="light")).queued
    order = await d.serve_in_order("x", [*heavy, "l1", "l2"])
    assert order == ["l1", "h1", "l2", "h2", "h3", "h4", "h5", "h6"]


@pytest.mark.parametrize(
    ("usage", "order"),
    [
        # As estimated: small-1 evens the counters, the tie goes to big (fewer waiting).
        (None, ["big-1", "small-1", "big-2", "small-2", "small-3"]),
        (10_000, ["big-1", "small-1", "small-2", "small-3", "big-2"]),  # far bigger
    ],
)
async def test_members_are_charged_the_service_they_actually_used(state, name, usage, order):
    d = Deployment(state, name, limits(1))
    assert (await d.ask("seat", member="other")).admitted
    waiting = ["big-1", "small-1", "small-2", "small-3", "big-2"]
    for slot in waiting:
        assert (await d.ask(slot, member=slot.split("-")[0])).queued
    await d.done("seat")
    assert await d.granted(*waiting) == ["big-1"]
    await d.done("big-1", service=usage)
    assert ["big-1", *await d.serve_in_order_from(waiting[1:])] == order


async def test_a_member_alone_gets_every_slot(state, name):
    d = Deployment(state, name, limits(3))
    for i in range(6):
        await d.ask(f"s{i}", member="alone")
    snap = await d.snapshot()
    assert (snap.in_flight, snap.waiting_interactive) == (3, 3)
    for i in range(3):
        await d.done(f"s{i}")
    assert sorted(await d.granted("s3", "s4", "s5")) == ["s3", "s4", "s5"]
    assert (await d.snapshot()).in_flight == 3  # never an idle slot while someone waits


async def crowd(d: Deployment, member: str, held: int, waiting: int) -> list[str]:
    """`member` takes `held` slots and queues `waiting` more calls: the queued slots."""
    for i in range(held):
        assert (await d.ask(f"{member}-held-{i}", member=member, cost=10)).admitted
    queued = [f"{member}-waits-{i}" for i in range(waiting)]
    for slot in queued:
        assert (await d.ask(slot, member=member, cost=10)).queued
    return queued


async def test_the_loudest_member_leaves_the_last_free_slots_to_the_others(state, name):
    """Eight slots, a loud member asking for far more calls than its share: once a quiet
    member is active too, the loud member queues for the last three free slots instead of
    taking them, and the quiet member's calls find them free at once. Once the quiet
    member is gone a while, the loud one takes all."""
    d = Deployment(state, name, limits(8))
    loud = await crowd(d, "loud", held=8, waiting=30)
    assert (await d.ask("q1", member="quiet", cost=10)).queued  # full
    d.now += 1.0  # calls hold their slots a second
    for i in range(4):
        await d.done(f"loud-held-{i}")
    assert await d.granted("q1", *loud) == ["q1"]  # the quiet call first; three kept free
    for slot in ("q2", "q3", "q4"):
        assert (await d.ask(slot, member="quiet", cost=10)).admitted  # no wait
    assert (await d.snapshot()).in_flight == 8
    d.now += 1.0
    for slot in ("q1", "q2", "q3"):
        await d.done(slot)
    assert await d.granted(*loud) == []  # the last three free: still kept
    await d.done("q4")
    assert await d.granted(*loud) == loud[:1]  # four were free
    d.now += 10  # the quiet member no longer counts as active: the loud one takes all
    assert await d.granted(*loud) == loud[:4]
    assert (await d.snapshot()).in_flight == 8


async def test_the_loudest_member_is_the_one_asking_for_most_calls_not_the_most_served(state, name):
    """A quiet member's big call outweighs the loud member's small ones in tokens served;
    the loud member, asking for far more calls, is still the one kept off the last slots."""
    d = Deployment(state, name, limits(8))
    assert (await d.ask("q1", member="quiet", cost=5000)).admitted
    loud = await crowd(d, "loud", held=7, waiting=30)
    d.now += 1.0
    await d.done("q1", service=5000)
    assert await d.granted(*loud) == []
    assert (await d.ask("q2", member="quiet", cost=5000)).admitted


async def test_a_member_served_more_is_not_refused_for_the_loud_members_backlog(state, name):
    """The loud member's backlog waits for more than the headroom, so it is not counted
    ahead of another member's call, even one whose member was served more: that call
    queues (and gets the next free slot) instead of being refused on arrival."""
    d = Deployment(state, name, limits(8))
    assert (await d.ask("big", member="quiet", cost=5000)).admitted
    await crowd(d, "loud", held=7, waiting=30)
    assert (await d.ask("next", member="quiet", cost=5000, wait=d.now + 3)).queued
    await d.done("big", service=5000)
    assert await d.granted("next") == ["next"]


@pytest.mark.parametrize(
    ("calls", "hold", "loud"),
    [
        ({"a": 20, "b": 20, "c": 20}, 1.0, None),  # alike: nobody
        ({"a": 20, "b": 2}, 1.0, "a"),  # 6.9 slots wanted, a share of 4
        ({"a": 20, "b": 2}, 0.5, None),  # 3.5 slots wanted: within its share
        ({"a": 6, "b": 1}, 1.0, None),  # a burst, not a rate beyond its share
        ({"a": 30, "b": 25, "c": 20}, 1.0, None),  # most, but not 1.5 times the average
        ({"a": 40}, 5.0, None),  # alone: takes every slot
    ],
)
def test_the_loud_member_asks_for_more_than_its_share_and_than_the_others(calls, hold, loud):
    assert loudest(calls, 8, hold) == loud


@pytest.mark.parametrize(("allowed", "kept"), [(1, 0), (3, 0), (4, 1), (5, 1), (8, 3), (64, 3)])
def test_the_headroom_is_three_slots_at_most_and_none_for_a_small_deployment(allowed, kept):
    assert headroom(allowed) == kept


async def test_members_served_alike_keep_no_slot_free(state, name):
    d = Deployment(state, name, limits(4))
    for i, member in enumerate(("a", "b", "a", "b")):
        assert (await d.ask(f"s{i}", member=member)).admitted
    assert (await d.snapshot()).in_flight == 4


async def test_a_kept_slot_goes_to_no_batch_call_while_an_interactive_one_waits(state, name):
    d = Deployment(state, name, limits(8))
    loud = await crowd(d, "loud", held=8, waiting=30)  # interactive
    assert (await d.ask("qb", BATCH, member="quiet", cost=10)).queued
    d.now += 1.0
    for i in range(3):
        await d.done(f"loud-held-{i}")
    assert await d.granted(*loud, "qb") == []  # three free: kept from both
    await d.done("loud-held-3")
    assert await d.granted(*loud, "qb") == loud[:1]  # four free: the interactive call first


async def test_a_waiter_past_its_wait_limit_is_not_granted(state, name):
    d = Deployment(state, name, limits(1))
    assert (await d.ask("holder")).admitted
    assert (await d.ask("short", wait=T0 + 5)).queued
    assert (await d.ask("long", wait=T0 + 500)).queued
    d.now = T0 + 10
    assert await d.granted("short", "long") == []  # their worker is alive and says so
    await d.done("holder")
    assert await d.granted("short", "long") == ["long"]
    departure = await state.leave(name, d.limits, "short", now=d.now)
    assert departure.granted is False


async def test_a_waiter_that_leaves_is_skipped_and_told_when_to_retry(state, name):
    d = Deployment(state, name, limits(1))
    assert (await d.ask("holder")).admitted
    for slot in ("gone", "next", "last"):
        assert (await d.ask(slot)).queued
    departure = await state.leave(name, d.limits, "gone", now=d.now)
    assert departure.granted is False
    assert departure.retry_in >= 1
    assert (await d.snapshot()).waiting_interactive == 2
    await d.done("holder")
    assert await d.granted("gone", "next", "last") == ["next"]


async def test_leaving_just_after_the_grant_keeps_the_slot(state, name):
    d = Deployment(state, name, limits(1))
    assert (await d.ask("holder")).admitted
    assert (await d.ask("late")).queued
    await d.done("holder")
    departure = await state.leave(name, d.limits, "late", now=d.now)
    assert departure.granted is True
    assert (await d.snapshot()).in_flight == 1  # it holds the slot until it releases it


async def test_a_dead_workers_slot_goes_to_a_waiter_when_its_lease_runs_out(state, name):
    d = Deployment(state, name, limits(1))
    assert (await d.ask("dead-worker")).admitted  # never released, never renewed
    assert (await d.ask("waiter")).queued
    d.now = T0 + 29
    assert await d.granted("waiter") == []
    d.now = T0 + 31
    assert await d.granted("waiter") == ["waiter"]


async def test_a_dead_workers_waiters_are_passed_over(name):
    """Redis only: in process, the waiters die with the state. Each worker's sweep vouches
    for its own waiters every second; a waiter nobody vouches for is skipped."""
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    from routing.deployment_state.redis import WAITER_SILENCE, RedisDeploymentState

    state = RedisDeploymentState(url, prefix=f"test-{uuid.uuid4().hex[:8]}")
    d = Deployment(state, name, limits(1))
    assert (await d.ask("holder")).admitted
    assert (await d.ask("dead-worker-waiter")).queued
    assert (await d.ask("live-waiter")).queued
    d.now = T0 + WAITER_SILENCE + 1
    assert await d.granted("live-waiter") == []  # the live worker's sweep
    await d.done("holder")
    assert await d.granted("dead-worker-waiter", "live-waiter") == ["live-waiter"]
    assert (await d.snapshot()).waiting_interactive == 0
    await state._client().aclose()


async def test_a_dead_workers_waiters_are_not_counted_once_silent(name):
    """Redis only. A runner killed with its calls queued: once silent, its waiters count
    neither as waiting (the batch spare a runner paces by) nor as ahead of a newcomer, even
    when no call is sent or released to pass over them."""
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    from batches.pacing import deployment_spare
    from routing.deployment_state.redis import WAITER_SILENCE, RedisDeploymentState

    state = RedisDeploymentState(url, prefix=f"test-{uuid.uuid4().hex[:8]}")
    d = Deployment(state, name, limits(2))
    assert (await d.ask("dead-holder-1", BATCH)).admitted
    assert (await d.ask("dead-holder-2", BATCH)).admitted
    for slot in ("dead-1", "dead-2", "dead-3"):
        assert (await d.ask(slot, BATCH)).queued
    assert (await d.snapshot()).waiting_batch == 3
    d.now = T0 + 31  # past the holders' leases and the waiters' silence
    assert d.now - T0 > WAITER_SILENCE
    snap = await d.snapshot()
    assert (snap.waiting_batch, snap.in_flight) == (0, 0)
    assert deployment_spare(snap, reserve=0) == 2
    newcomer = await d.ask("new", BATCH)
    assert newcomer.admitted
    await state._client().aclose()


async def test_position_and_oldest_wait_are_reported(state, name):
    d = Deployment(state, name, limits(1))
    assert (await d.ask("holder")).admitted
    first = await d.ask("w1", BATCH)
    second = await d.ask("w2", BATCH)
    other_class = await d.ask("w3", INTERACTIVE)
    assert (first.position, second.position, other_class.position) == (0, 1, 0)
    d.now = T0 + 7
    assert await d.granted("w1", "w2", "w3") == []  # their worker's sweep: still alive
    snap = await d.snapshot()
    assert (snap.waiting_batch, snap.waiting_interactive) == (2, 1)
    assert snap.oldest_wait == pytest.approx(7, abs=0.01)


async def test_wait_wakes_on_a_grant_from_a_release(state, name):
    """The real clock and the real wake-up path (Redis: published, heard by the listener)."""
    lim = limits(1)
    assert (await state.acquire_slot(name, lim, "holder", retry=False)).admitted
    loop = asyncio.get_running_loop()
    queued = await state.acquire_slot(name, lim, "waiter", retry=False, wait_until=time.time() + 30)
    assert queued.queued
    waiting = asyncio.create_task(state.wait(name, "waiter", 5))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    started = loop.time()
    await state.release(name, lim, "holder", Result.SUCCESS)
    assert await waiting is True
    assert loop.time() - started < 0.5  # woken, not found by the once-a-second sweep


async def test_wait_times_out_without_a_grant(state, name):
    lim = limits(1)
    assert (await state.acquire_slot(name, lim, "holder", retry=False)).admitted
    assert (
        await state.acquire_slot(name, lim, "w", retry=False, wait_until=time.time() + 30)
    ).queued
    assert await state.wait(name, "w", 0.1) is False
    assert (await state.leave(name, lim, "w")).granted is False


@pytest.mark.parametrize(
    ("allowed", "reserve", "cap"),
    [(4, 0.2, 3), (10, 0.2, 8), (5, 0.2, 4), (1, 0.2, 1), (2, 0.5, 1), (3, 0.0, 3), (0, 0.2, 0)],
)
def test_batch_cap(allowed, reserve, cap):
    assert batch_cap(allowed, reserve) == cap


def test_queue_retry_after_grows_with_the_queue():
    assert queue_retry_after(0, 4, 1.0) == 1
    assert queue_retry_after(39, 4, 2.0) == 20
    assert queue_retry_after(10, 0, 1.0) == 11  # no slot at all: as if one


async def test_with_redis_unreachable_the_queue_works_per_worker(name, caplog):
    """A closed port: slots and queues fall back to this worker's own state, loudly."""
    from routing.deployment_state.redis import RedisDeploymentState

    state = RedisDeploymentState("redis://127.0.0.1:1/0", prefix="unreachable")
    lim = limits(1)
    assert (await state.acquire_slot(name, lim, "holder", retry=False)).admitted
    queued = await state.acquire_slot(name, lim, "waiter", retry=False, wait_until=time.time() + 30)
    assert queued.queued
    waiting = asyncio.create_task(state.wait(name, "waiter", 5))
    await state.release(name, lim, "holder", Result.SUCCESS)
    assert await waiting is True
    assert "Redis unreachable" in caplog.text


async def test_a_quiet_member_is_not_refused_for_a_loud_members_backlog(state, name):
    """Calls of 1 s on one slot; a loud member has 30 calls waiting (30 s of work). A call
    of a quiet member that may wait 3 s is next in line by fair share: it queues (and is
    served next), where one more of the loud member's is refused on arrival."""
    d = Deployment(state, name, limits(1))
    for i in range(3):  # the deployment learns that calls hold their slot 1 s
        assert (await d.ask(f"warm{i}", member="loud")).admitted
        d.now += 1.0
        await d.done(f"warm{i}", service=100.0)
    assert (await d.ask("held", member="loud")).admitted
    for i in range(30):
        assert (await d.ask(f"loud{i}", member="loud", wait=T0 + 600)).queued
    soon = d.now + 3
    quiet = await d.ask("quiet", member="quiet", wait=soon)
    assert quiet.queued
    loud = await d.ask("loud-more", member="loud", wait=soon)
    assert (loud.queued, loud.refusal) == (False, Refusal.DEADLINE)
    d.now += 1.0
    await d.done("held", service=100.0)
    assert await d.granted("quiet", "loud0") == ["quiet"]
