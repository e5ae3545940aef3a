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

LIMITS = Limits(max_concurrency=10, threshold=3, cooldown=300, close_after=3, lease=30)
T0 = 1_800_000_000.0


async def _call(state, name, result, *, limits=LIMITS, now=T0, retry=False):
    slot = uuid.uuid4().hex
    admission = await state.acquire(name, limits, slot, retry=retry, now=now)
    if admission.admitted:
        await state.release(name, limits, slot, result, now=now)
    return admission


async def test_breaker_opens_after_three_consecutive_failures(state, name):
    for _ in range(3):
        assert (await _call(state, name, Result.FAILURE)).admitted
    refused = await _call(state, name, Result.SUCCESS, now=T0 + 1)
    assert refused.refusal is Refusal.BREAKER
    assert refused.retry_in == pytest.approx(299)
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
    await _call(state, name, Result.CAPACITY)
    assert (await state.snapshot(name, LIMITS, now=T0)).mode == "open"


async def test_half_open_lets_probes_through_step_by_step_then_closes(state, name):
    for _ in range(3):
        await _call(state, name, Result.CAPACITY)
    later = T0 + 301
    first = await state.acquire(name, LIMITS, "p1", retry=False, now=later)
    assert first.admitted
    second = await state.acquire(name, LIMITS, "p2", retry=False, now=later)
    assert second.refusal is Refusal.BREAKER  # one probe at a time at first
    await state.release(name, LIMITS, "p1", Result.SUCCESS, now=later)
    assert (await state.acquire(name, LIMITS, "p2", retry=False, now=later)).admitted
    assert (await state.acquire(name, LIMITS, "p3", retry=False, now=later)).admitted
    assert not (await state.acquire(name, LIMITS, "p4", retry=False, now=later)).admitted
    await state.release(name, LIMITS, "p2", Result.SUCCESS, now=later)
    await state.release(name, LIMITS, "p3", Result.SUCCESS, now=later)
    assert (await state.snapshot(name, LIMITS, now=later)).mode == "closed"


async def test_failure_while_half_open_reopens(state, name):
    for _ in range(3):
        await _call(state, name, Result.FAILURE)
    later = T0 + 301
    assert (await _call(state, name, Result.FAILURE, now=later)).admitted
    snap = await state.snapshot(name, LIMITS, now=later)
    assert snap.mode == "open"
    assert snap.open_for == pytest.approx(300)


async def test_misconfigured_deployment_opens_at_once(state, name):
    await _call(state, name, Result.MISCONFIGURED)
    snap = await state.snapshot(name, LIMITS, now=T0)
    assert (snap.mode, snap.reason) == ("open", "misconfigured")


async def test_capacity_errors_cut_the_limit_and_successes_grow_it_back(state, name):
    limits = Limits(max_concurrency=10, threshold=100)
    await _call(state, name, Result.CAPACITY, limits=limits)
    assert (await state.snapshot(name, limits, now=T0)).limit == 7
    await _call(state, name, Result.CAPACITY, limits=limits)
    assert (await state.snapshot(name, limits, now=T0)).limit == 4
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


async def test_no_more_in_flight_than_the_effective_limit(state, name):
    limits = Limits(max_concurrency=3)
    slots = [f"s{i}" for i in range(3)]
    for slot in slots:
        assert (await state.acquire(name, limits, slot, retry=False, now=T0)).admitted
    refused = await state.acquire(name, limits, "s3", retry=False, now=T0)
    assert refused.refusal is Refusal.CONCURRENCY
    await state.release(name, limits, "s0", Result.NEUTRAL, now=T0)
    assert (await state.acquire(name, limits, "s3", retry=False, now=T0)).admitted
    assert (await state.snapshot(name, limits, now=T0)).in_flight == 3


async def test_slots_of_a_dead_worker_expire_with_their_lease(state, name):
    limits = Limits(max_concurrency=1, lease=30)
    assert (await state.acquire(name, limits, "dead", retry=False, now=T0)).admitted
    assert not (await state.acquire(name, limits, "b", retry=False, now=T0 + 29)).admitted
    assert (await state.acquire(name, limits, "b", retry=False, now=T0 + 31)).admitted


async def test_renewed_lease_keeps_its_slot(state, name):
    limits = Limits(max_concurrency=1, lease=30)
    now = time.time()
    assert (await state.acquire(name, limits, "long", retry=False, now=now - 29)).admitted
    await state.renew({name: (limits, ["long"])})
    assert not (await state.acquire(name, limits, "b", retry=False, now=now + 5)).admitted


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
