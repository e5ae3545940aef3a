"""One suite, both backends: the in-process state and the Redis state (when REDIS_URL is
set, as in CI's second run) must follow the same rules."""

import time
import uuid

import pytest

from routing.deployment_state import (
    Limits,
    Refusal,
    Result,
)
from routing.deployment_state.rules import FIRST_OPEN, KEEP_EVERY, STATE_TTL
from routing.deployment_state.slot_policy import BATCH, Claim

LIMITS = Limits(max_concurrency=10, threshold=3, cooldown=300, close_after=3, lease=30)
BATCH_CLAIM = Claim(BATCH, member="m", estimate=1.0, wait=60.0)
T0 = 1_800_000_000.0


async def _call(state, name, result, *, limits=LIMITS, now=T0, retry=False, repeat=False):
    slot = uuid.uuid4().hex
    admission = await state.acquire_slot(name, limits, slot, retry=retry, now=now)
    if admission.admitted:
        await state.release(name, limits, slot, result, repeat=repeat, now=now)
    return admission


async def test_breaker_opens_after_three_consecutive_failures(state, name):
    for _ in range(3):
        assert (await _call(state, name, Result.FAILURE)).admitted
    refused = await _call(state, name, Result.SUCCESS, now=T0 + 1)
    assert refused.refusal is Refusal.BREAKER
    assert refused.retry_in == pytest.approx(FIRST_OPEN - 1)  # short at first
    snap = await state.snapshot(name, LIMITS, now=T0 + 1)
    assert (snap.mode, snap.reason) == ("open", "failure")


async def test_success_resets_the_count_and_client_errors_do_not_count(state, name):
    for result in [
        Result.FAILURE,
        Result.FAILURE,
        Result.SUCCESS,
        Result.FAILURE,
        Result.NEUTRAL,
        Result.NEUTRAL,
        Result.FAILURE,
    ]:
        await _call(state, name, result)
    assert (await state.snapshot(name, LIMITS, now=T0)).mode == "closed"
    await _call(state, name, Result.FAILURE)
    assert (await state.snapshot(name, LIMITS, now=T0)).mode == "open"


async def test_half_open_lets_probes_through_step_by_step_then_closes(state, name):
    for _ in range(3):
        await _call(state, name, Result.FAILURE)
    later = T0 + FIRST_OPEN  # the probe goes out as soon as the open time ends
    first = await state.acquire_slot(name, LIMITS, "p1", retry=False, now=later)
    assert first.admitted
    second = await state.acquire_slot(name, LIMITS, "p2", retry=False, now=later)
    assert second.refusal is Refusal.BREAKER  # one probe at a time at first
    await state.release(name, LIMITS, "p1", Result.SUCCESS, now=later)
    assert (await state.acquire_slot(name, LIMITS, "p2", retry=False, now=later)).admitted
    assert (await state.acquire_slot(name, LIMITS, "p3", retry=False, now=later)).admitted
    assert not (await state.acquire_slot(name, LIMITS, "p4", retry=False, now=later)).admitted
    await state.release(name, LIMITS, "p2", Result.SUCCESS, now=later)
    await state.release(name, LIMITS, "p3", Result.SUCCESS, now=later)
    assert (await state.snapshot(name, LIMITS, now=later)).mode == "closed"


async def test_failure_while_half_open_reopens_for_twice_as_long_up_to_the_cooldown(state, name):
    for _ in range(3):
        await _call(state, name, Result.FAILURE)
    now, open_for = T0, FIRST_OPEN
    seen = []
    for _ in range(7):  # each failed probe doubles the open time: 20, 40 … 300 (the cap)
        now += open_for
        assert (await _call(state, name, Result.FAILURE, now=now)).admitted
        snap = await state.snapshot(name, LIMITS, now=now)
        assert snap.mode == "open"
        open_for = snap.open_for
        seen.append(round(open_for))
    assert seen == [20, 40, 80, 160, 300, 300, 300]


async def test_closing_starts_the_open_time_short_again(state, name):
    for _ in range(3):
        await _call(state, name, Result.FAILURE)
    now = T0 + FIRST_OPEN
    await _call(state, name, Result.FAILURE, now=now)  # a failed probe: 20 s
    now += 2 * FIRST_OPEN
    for _ in range(3):
        await _call(state, name, Result.SUCCESS, now=now)
    assert (await state.snapshot(name, LIMITS, now=now)).mode == "closed"
    for _ in range(3):
        await _call(state, name, Result.FAILURE, now=now)
    assert (await state.snapshot(name, LIMITS, now=now)).open_for == pytest.approx(FIRST_OPEN)


async def test_an_attempt_cut_by_its_deadline_counts_only_when_it_hung(state, name):
    """Calls that take 1 s: one cut after 0.5 s (its deadline was short) is neutral, any
    number of them; one cut after 5 s (over 3 x what it needs) hung, and counts."""
    for i in range(5):
        slot = f"ok{i}"
        assert (await state.acquire_slot(name, LIMITS, slot, retry=False, now=T0)).admitted
        await state.release(name, LIMITS, slot, Result.SUCCESS, took=1.0, now=T0)
    for i in range(10):
        slot = f"short{i}"
        assert (await state.acquire_slot(name, LIMITS, slot, retry=False, now=T0)).admitted
        await state.release(name, LIMITS, slot, Result.DEADLINE, took=0.5, now=T0)
    snap = await state.snapshot(name, LIMITS, now=T0)
    assert (snap.mode, snap.failures) == ("closed", 0)
    for i in range(3):
        slot = f"hung{i}"
        assert (await state.acquire_slot(name, LIMITS, slot, retry=False, now=T0)).admitted
        await state.release(name, LIMITS, slot, Result.DEADLINE, took=5.0, now=T0)
    snap = await state.snapshot(name, LIMITS, now=T0)
    assert (snap.mode, snap.reason) == ("open", "failure")


async def _learn_latency(state, name, limits, seconds, *, now=T0, count=5):
    """`count` calls of `seconds` each, the last ending at `now`."""
    for i in range(count):
        slot = f"learn{i}-{uuid.uuid4().hex[:6]}"
        sent = now - seconds
        assert (await state.acquire_slot(name, limits, slot, retry=False, now=sent)).admitted
        await state.release(name, limits, slot, Result.SUCCESS, took=seconds, now=now)


async def test_a_call_whose_deadline_cannot_cover_the_latency_is_not_sent(state, name):
    await _learn_latency(state, name, LIMITS, 1.0)
    short = await state.acquire_slot(name, LIMITS, "short", retry=False, deadline=T0 + 0.5, now=T0)
    assert (short.admitted, short.refusal) == (False, Refusal.DEADLINE)
    assert short.retry_in >= 1
    ok = await state.acquire_slot(name, LIMITS, "ok", retry=False, deadline=T0 + 1.5, now=T0)
    assert ok.admitted


async def test_before_any_answer_every_deadline_is_enough(state, name):
    soon = await state.acquire_slot(name, LIMITS, "s", retry=False, deadline=T0 + 0.01, now=T0)
    assert soon.admitted


async def test_a_waiter_that_could_no_longer_finish_is_passed_over(state, name):
    """Calls of 1 s; a slot frees after 1.2 s: the waiter whose deadline leaves 1.3 s then
    is skipped (it needs the latency and some of its spread), the next one (2.8 s) gets it."""
    limits = Limits(max_concurrency=1, threshold=0)
    await _learn_latency(state, name, limits, 1.0)
    assert (await state.acquire_slot(name, limits, "held", retry=False, now=T0)).admitted
    args = {"retry": False, "claim": BATCH_CLAIM, "now": T0}
    first = await state.acquire_slot(
        name, limits, "tight", wait_until=T0 + 5, deadline=T0 + 2.5, **args
    )
    second = await state.acquire_slot(
        name, limits, "roomy", wait_until=T0 + 5, deadline=T0 + 4.0, **args
    )
    assert first.queued and second.queued
    assert T0 + 1 < first.until < T0 + 1.2  # the deadline less the latency and its spread
    await state.release(name, limits, "held", Result.SUCCESS, took=1.2, now=T0 + 1.2)
    assert await state.wait(name, "roomy", 1.0)
    departure = await state.leave(name, limits, "tight", now=T0 + 1.2)
    assert not departure.granted
    await state.release(name, limits, "roomy", Result.SUCCESS, took=1.0, now=T0 + 2.2)


async def test_a_call_the_queue_cannot_reach_in_time_is_refused_on_arrival(state, name):
    """Two slots, calls of 1 s, ten waiting: the queue needs about 5.5 s to reach an
    eleventh; one that may wait 3 s is told at once, with a Retry-After for the rest."""
    limits = Limits(max_concurrency=2, threshold=0)
    await _learn_latency(state, name, limits, 1.0)
    for i in range(2):
        assert (await state.acquire_slot(name, limits, f"h{i}", retry=False, now=T0)).admitted
    args = {"retry": False, "claim": BATCH_CLAIM, "now": T0}
    for i in range(10):
        queued = await state.acquire_slot(
            name, limits, f"w{i}", wait_until=T0 + 60, deadline=T0 + 60, **args
        )
        assert queued.queued
    hurried = await state.acquire_slot(
        name, limits, "hurried", wait_until=T0 + 3, deadline=T0 + 3, **args
    )
    assert (hurried.queued, hurried.refusal) == (False, Refusal.DEADLINE)
    assert hurried.retry_in >= 2
    patient = await state.acquire_slot(
        name, limits, "patient", wait_until=T0 + 60, deadline=T0 + 60, **args
    )
    assert patient.queued


async def test_misconfigured_deployment_opens_at_once(state, name):
    await _call(state, name, Result.MISCONFIGURED)
    snap = await state.snapshot(name, LIMITS, now=T0)
    assert (snap.mode, snap.reason) == ("open", "misconfigured")


async def test_capacity_errors_cut_the_limit_and_successes_grow_it_back(state, name):
    # One call at a time, each sent after the last cut: every error cuts.
    limits = Limits(max_concurrency=10, threshold=100)
    await _call(state, name, Result.CAPACITY, limits=limits)
    assert (await state.snapshot(name, limits, now=T0)).limit == 7
    await _call(state, name, Result.CAPACITY, limits=limits)
    assert (await state.snapshot(name, limits, now=T0)).limit == 5  # 4.9, rounded
    for _ in range(5):
        await _call(state, name, Result.CAPACITY, limits=limits)
    assert (await state.snapshot(name, limits, now=T0)).limit == 1  # never below 1
    await _call(state, name, Result.SUCCESS, limits=limits)  # 1 success at limit 1 -> 2
    await _call(state, name, Result.SUCCESS, limits=limits)
    await _call(state, name, Result.SUCCESS, limits=limits)  # 2 successes at limit 2 -> 3
    assert (await state.snapshot(name, limits, now=T0)).limit == 3
    for _ in range(100):
        await _call(state, name, Result.SUCCESS, limits=limits)
    assert (await state.snapshot(name, limits, now=T0)).limit == 10  # never above max


async def test_a_capacity_error_just_after_a_raise_steps_back_one_not_to_70_percent(state, name):
    """Sized too large for its provider (8 of 10): a raise to 9 meets "at capacity", and
    the limit goes back to 8, where it worked, not to 6; a second error there cuts."""
    limits = Limits(max_concurrency=10, threshold=100)
    await _call(state, name, Result.CAPACITY, limits=limits)  # 10 -> 7
    for _ in range(7 + 8):  # a limit's worth of successes each: 7 -> 8 -> 9
        await _call(state, name, Result.SUCCESS, limits=limits)
    assert (await state.snapshot(name, limits, now=T0)).limit == 9
    await _call(state, name, Result.CAPACITY, limits=limits)
    assert (await state.snapshot(name, limits, now=T0)).limit == 8  # back one
    await _call(state, name, Result.CAPACITY, limits=limits)
    assert (await state.snapshot(name, limits, now=T0)).limit == 6  # 5.6, rounded


async def test_no_more_in_flight_than_the_effective_limit(state, name):
    limits = Limits(max_concurrency=3)
    slots = [f"s{i}" for i in range(3)]
    for slot in slots:
        assert (await state.acquire_slot(name, limits, slot, retry=False, now=T0)).admitted
    refused = await state.acquire_slot(name, limits, "s3", retry=False, now=T0)
    assert refused.refusal is Refusal.CONCURRENCY
    await state.release(name, limits, "s0", Result.NEUTRAL, now=T0)
    assert (await state.acquire_slot(name, limits, "s3", retry=False, now=T0)).admitted
    assert (await state.snapshot(name, limits, now=T0)).in_flight == 3


async def test_slots_of_a_dead_worker_expire_with_their_lease(state, name):
    limits = Limits(max_concurrency=1, lease=30)
    assert (await state.acquire_slot(name, limits, "dead", retry=False, now=T0)).admitted
    assert not (await state.acquire_slot(name, limits, "b", retry=False, now=T0 + 29)).admitted
    assert (await state.acquire_slot(name, limits, "b", retry=False, now=T0 + 31)).admitted


async def test_renewed_lease_keeps_its_slot(state, name):
    limits = Limits(max_concurrency=1, lease=30)
    now = time.time()
    assert (await state.acquire_slot(name, limits, "long", retry=False, now=now - 29)).admitted
    await state.renew({name: (limits, ["long"])})
    assert not (await state.acquire_slot(name, limits, "b", retry=False, now=now + 5)).admitted


async def test_retry_budget_is_a_tenth_of_first_attempts(state, name):
    limits = Limits(max_concurrency=1000, retry_ratio=0.1, retry_floor=3, threshold=10**6)
    # With no traffic a few retries are still allowed (the floor)...
    assert [
        (await _call(state, name, Result.SUCCESS, limits=limits, retry=True)).admitted
        for _ in range(4)
    ] == [True, True, True, False]
    for _ in range(100):
        await _call(state, name, Result.SUCCESS, limits=limits)
    allowed = [
        (await _call(state, name, Result.SUCCESS, limits=limits, retry=True)).admitted
        for _ in range(10)
    ]
    assert allowed.count(True) == 7  # 10 % of 100 firsts, 3 of them already spent
    refused = await _call(state, name, Result.SUCCESS, limits=limits, retry=True)
    assert refused.refusal is Refusal.BUDGET
    # A minute later the window has moved on.
    assert (
        await _call(state, name, Result.SUCCESS, limits=limits, retry=True, now=T0 + 61)
    ).admitted


async def test_threshold_zero_switches_the_breaker_off(state, name):
    limits = Limits(max_concurrency=10, threshold=0)
    for result in [Result.FAILURE] * 10 + [Result.MISCONFIGURED]:
        await _call(state, name, result, limits=limits)
    assert (await state.snapshot(name, limits, now=T0)).mode == "closed"


async def _burst(state, name, limits, count, now):
    slots = [uuid.uuid4().hex for _ in range(count)]
    for slot in slots:
        assert (await state.acquire_slot(name, limits, slot, retry=False, now=now)).admitted
    return slots


async def test_a_burst_of_capacity_errors_cuts_the_limit_once_and_leaves_the_breaker_closed(
    state, name
):
    """40 calls sent at once to a provider that takes 4: 36 "at capacity" answers come back
    within milliseconds. One congestion, one cut; the breaker does not count it."""
    limits = Limits(max_concurrency=64, threshold=3, cooldown=300)
    slots = await _burst(state, name, limits, 40, T0)
    congested = [
        await state.release(name, limits, slot, Result.CAPACITY, now=T0 + 0.01 + i / 1000)
        for i, slot in enumerate(slots[:36])
    ]
    assert congested == [True] * 36  # each may queue again: none is a failure of the deployment
    snap = await state.snapshot(name, limits, now=T0 + 0.1)
    assert (snap.mode, snap.limit, snap.failures) == ("closed", 45, 0)
    # A call sent after that cut meets capacity again: the next round trip, the next cut.
    (late,) = await _burst(state, name, limits, 1, T0 + 0.2)
    assert await state.release(name, limits, late, Result.CAPACITY, now=T0 + 0.21)
    snap = await state.snapshot(name, limits, now=T0 + 0.3)
    assert (snap.mode, snap.limit) == ("closed", 31)


async def test_capacity_errors_open_the_breaker_only_at_the_floor(state, name):
    """A deployment that answers "at capacity" even one call at a time is really full: at
    the floor, `threshold` consecutive errors open the breaker (docs/routing.md)."""
    limits = Limits(max_concurrency=8, threshold=3, cooldown=300)
    now = T0
    for _ in range(20):  # one call at a time, each after the last cut
        now += 1
        if (await state.snapshot(name, limits, now=now)).limit == 1:
            break
        await _call(state, name, Result.CAPACITY, limits=limits, now=now)
    snap = await state.snapshot(name, limits, now=now)
    assert (snap.mode, snap.limit, snap.failures) == ("closed", 1, 0)
    for _ in range(2):
        now += 1
        await _call(state, name, Result.CAPACITY, limits=limits, now=now)
    assert (await state.snapshot(name, limits, now=now)).mode == "closed"
    await _call(state, name, Result.CAPACITY, limits=limits, now=now + 1)
    snap = await state.snapshot(name, limits, now=now + 1)
    assert (snap.mode, snap.reason) == ("open", "capacity")


async def test_one_call_retrying_a_failing_deployment_never_opens_its_breaker(state, name):
    """The retries of one call count once: three bad answers to one call on a
    one-deployment route must not shut the route for every call."""
    await _call(state, name, Result.FAILURE)  # one call's first attempt...
    for _ in range(4):
        await _call(state, name, Result.FAILURE, repeat=True)  # ... and its retries
    assert (await state.snapshot(name, LIMITS, now=T0)).mode == "closed"
    await _call(state, name, Result.FAILURE)  # a second call
    assert (await state.snapshot(name, LIMITS, now=T0)).mode == "closed"
    await _call(state, name, Result.FAILURE)  # three calls failed in a row: open
    assert (await state.snapshot(name, LIMITS, now=T0)).mode == "open"


async def test_a_breaker_refusal_says_why_it_opened(state, name):
    for _ in range(3):
        await _call(state, name, Result.FAILURE)
    refused = await _call(state, name, Result.SUCCESS, now=T0 + 1)
    assert (refused.refusal, refused.reason) == (Refusal.BREAKER, "failure")


async def test_redis_keys_live_a_day_from_the_last_use_renewed_every_few_seconds(state, name):
    """Each script used to give every key of the deployment its time to live again (a
    quarter of a call's time in Redis); now at most every KEEP_EVERY seconds: a key made in
    between has none until the next renewal, which covers every key there is."""
    if not hasattr(state, "_keys"):
        pytest.skip("the in-process state keeps nothing in Redis")
    client = state._client()
    keys = dict(zip(("state", "slots", "budget", "held", "batch"), state._keys(name), strict=False))

    async def ttls() -> dict[str, int]:
        return {part: await client.ttl(key) for part, key in keys.items()}

    assert (await state.acquire_slot(name, LIMITS, "a", retry=False, now=T0)).admitted
    first = await ttls()
    assert first["batch"] == -2  # no batch call yet: no key
    assert all(STATE_TTL - 5 < first[k] <= STATE_TTL for k in ("state", "slots", "held", "budget"))
    later = T0 + KEEP_EVERY / 2  # a first batch call makes its key, not yet kept
    batch = await state.acquire_slot(name, LIMITS, "b", retry=False, claim=BATCH_CLAIM, now=later)
    assert batch.admitted
    assert (await ttls())["batch"] == -1
    await client.expire(keys["state"], 100)  # and the state's time to live is left alone
    assert (await state.acquire_slot(name, LIMITS, "c", retry=False, now=later + 0.1)).admitted
    assert 0 < (await ttls())["state"] <= 100
    renewed = T0 + KEEP_EVERY  # all of them, the key made in between too
    assert (await state.acquire_slot(name, LIMITS, "d", retry=False, now=renewed)).admitted
    assert all(STATE_TTL - 5 < t <= STATE_TTL for t in (await ttls()).values())
