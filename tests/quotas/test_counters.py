"""One suite, both backends: the in-process quota counters and the Redis ones (when
REDIS_URL is set) must follow the same rules. Plus what Redis going away does."""

import asyncio
import os
import subprocess
import time
import uuid

import pytest

from quotas.counters import Check, LeaseLength, LocalQuotaCounters, Verdict

BACKENDS = ["local", "redis"]
DOWN_URL = "redis://127.0.0.1:6390/0"  # nothing listens there


@pytest.fixture(params=BACKENDS)
async def counters(request):
    if request.param == "local":
        yield LocalQuotaCounters()
        return
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    from quotas.counters.redis import RedisQuotaCounters

    backend = RedisQuotaCounters(url)
    yield backend
    await backend._client().aclose()


def _is_redis(counters) -> bool:
    return not isinstance(counters, LocalQuotaCounters)


@pytest.fixture
def key():
    """A fresh key name per call: Redis keeps its keys between runs."""
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    names = iter(range(1_000))
    return lambda: f"{prefix}:q:{next(names)}"


def window(key: str, limit: float, amount: float, *, ttl: float = 60, seed: float = 0.0) -> Check:
    return Check(key, limit, amount, ttl, seed=seed)


def lease(key: str, limit: float, *, ttl: float = 30) -> Check:
    return Check(key, limit, 0, ttl, lease=True)


def slot() -> str:
    return uuid.uuid4().hex


async def peek(counters, key: str, *, seed: float = 0.0) -> float:
    """The counter's value (a reservation of nothing; it creates the key at `seed`)."""
    verdict = await counters.reserve([window(key, 1e18, 0, seed=seed)], slot())
    assert verdict.failed is None
    return verdict.values[0]


# --- window counters ---------------------------------------------------------------------


async def test_window_counter_passes_up_to_the_limit_and_fails_above(counters, key):
    k = key()
    assert await counters.reserve([window(k, 10, 4)], slot()) == Verdict(None, [4.0])
    assert await counters.reserve([window(k, 10, 6)], slot()) == Verdict(None, [10.0])
    refused = await counters.reserve([window(k, 10, 1)], slot())
    assert refused.failed == 0
    assert refused.values[0] == 10.0
    assert await peek(counters, k) == 10.0


async def test_a_request_larger_than_the_limit_never_fits(counters, key):
    k = key()
    refused = await counters.reserve([window(k, 10, 11)], slot())
    assert (refused.failed, refused.values[0]) == (0, 0.0)
    assert await peek(counters, k) == 0.0


async def test_fractional_amounts_add_up(counters, key):
    k = key()
    for _ in range(3):
        assert (await counters.reserve([window(k, 1.0, 0.25)], slot())).failed is None
    refused = await counters.reserve([window(k, 1.0, 0.5)], slot())
    assert refused.failed == 0
    assert refused.values[0] == pytest.approx(0.75)


async def test_values_on_success_include_the_reservation_for_every_check(counters, key):
    a, b, c = key(), key(), key()
    await counters.reserve([window(a, 100, 2)], slot())
    await counters.reserve([lease(c, 5)], slot())
    verdict = await counters.reserve([window(a, 100, 3), window(b, 100, 7), lease(c, 5)], slot())
    assert verdict.failed is None
    assert verdict.values == [5.0, 7.0, 2.0]


async def test_reservation_is_all_or_nothing(counters, key):
    a, b = key(), key()
    await counters.reserve([window(a, 100, 10)], slot())
    await counters.reserve([window(b, 20, 15)], slot())
    refused = await counters.reserve([window(a, 100, 10), window(b, 20, 10)], slot())
    assert refused.failed == 1
    assert refused.values[0] == 15.0  # the failing counter's current value
    assert await peek(counters, a) == 10.0
    assert await peek(counters, b) == 15.0


async def test_failed_index_points_at_the_first_failing_check(counters, key):
    a, b, c = key(), key(), key()
    await counters.reserve([window(c, 5, 5)], slot())
    refused = await counters.reserve([window(a, 100, 1), window(b, 1, 2), window(c, 5, 1)], slot())
    assert (refused.failed, refused.values) == (1, [0.0])
    refused = await counters.reserve([window(a, 100, 1), window(b, 9, 2), window(c, 5, 1)], slot())
    assert (refused.failed, refused.values) == (2, [5.0])
    assert await peek(counters, a) == 0.0
    assert await peek(counters, b) == 0.0


async def test_a_failing_window_check_takes_no_lease(counters, key):
    slots, tokens = key(), key()
    refused = await counters.reserve([lease(slots, 1), window(tokens, 1, 5)], slot())
    assert refused.failed == 1
    assert (await counters.reserve([lease(slots, 1)], slot())).failed is None


async def test_seed_is_the_start_of_a_new_counter_only(counters, key):
    k = key()
    assert await counters.reserve([window(k, 50, 5, seed=40)], slot()) == Verdict(None, [45.0])
    # The counter exists now: another seed is ignored.
    assert await counters.reserve([window(k, 50, 5, seed=1000)], slot()) == Verdict(None, [50.0])
    assert await counters.reserve([window(k, 50, 5, seed=0)], slot()) == Verdict(0, [50.0])


async def test_seed_counts_against_the_limit(counters, key):
    k = key()
    refused = await counters.reserve([window(k, 50, 5, seed=48)], slot())
    assert (refused.failed, refused.values[0]) == (0, 48.0)
    # Nothing was created: a later, smaller seed starts the counter.
    assert await counters.reserve([window(k, 50, 5, seed=10)], slot()) == Verdict(None, [15.0])


async def test_window_counter_expires_ttl_after_its_first_reservation(counters, key):
    k = key()
    t = time.time()
    ttl = 1.0 if _is_redis(counters) else 60.0
    await counters.reserve([window(k, 100, 5, ttl=ttl)], slot(), now=t)
    if _is_redis(counters):
        await asyncio.sleep(0.6)
    later = t + 0.6 * ttl
    # Adding to a live counter does not push its expiry back.
    verdict = await counters.reserve([window(k, 100, 5, ttl=ttl)], slot(), now=later)
    assert verdict.values == [10.0]
    if _is_redis(counters):
        await asyncio.sleep(0.55)
    expired = t + 1.15 * ttl
    verdict = await counters.reserve([window(k, 100, 1, ttl=ttl, seed=3)], slot(), now=expired)
    assert verdict == Verdict(None, [4.0])  # started again, from the seed


# --- adjust --------------------------------------------------------------------------------


async def test_adjust_adds_and_refunds_but_never_below_zero(counters, key):
    a, b = key(), key()
    await counters.reserve([window(a, 100, 10), window(b, 100, 10)], slot())
    await counters.adjust([(a, 5), (b, -4)])
    assert await peek(counters, a) == 15.0
    assert await peek(counters, b) == 6.0
    await counters.adjust([(a, -100), (b, 0.5)])
    assert await peek(counters, a) == 0.0
    assert await peek(counters, b) == pytest.approx(6.5)
    # The refund made room again.
    assert await counters.reserve([window(a, 100, 100)], slot()) == Verdict(None, [100.0])


async def test_adjust_leaves_a_missing_counter_alone(counters, key):
    k = key()
    await counters.adjust([(k, 25)])
    await counters.adjust([(k, -25)])
    assert await peek(counters, k, seed=7) == 7.0  # still a new counter: starts at the seed


async def test_adjust_with_nothing_to_do(counters):
    await counters.adjust([])


# --- leases --------------------------------------------------------------------------------


async def test_lease_limit_counts_distinct_slots(counters, key):
    k = key()
    slots = [slot() for _ in range(3)]
    for i, s in enumerate(slots):
        assert await counters.reserve([lease(k, 3)], s) == Verdict(None, [float(i + 1)])
    refused = await counters.reserve([lease(k, 3)], slot())
    assert (refused.failed, refused.values[0]) == (0, 3.0)
    await counters.release([k], slots[1])
    assert await counters.reserve([lease(k, 3)], slot()) == Verdict(None, [3.0])
    assert (await counters.reserve([lease(k, 3)], slot())).failed == 0


async def test_lease_amount_is_ignored(counters, key):
    k = key()
    check = Check(k, 2, 100, 30, lease=True)
    assert await counters.reserve([check], slot()) == Verdict(None, [1.0])
    assert await counters.reserve([check], slot()) == Verdict(None, [2.0])


async def test_release_of_unknown_slots_and_keys_is_harmless(counters, key):
    k = key()
    await counters.release([], slot())
    await counters.release([k], slot())
    held = slot()
    await counters.reserve([lease(k, 1)], held)
    await counters.release([k], slot())
    assert (await counters.reserve([lease(k, 1)], slot())).failed == 0
    await counters.release([k], held)
    assert (await counters.reserve([lease(k, 1)], slot())).failed is None


async def test_expired_leases_no_longer_count(counters, key):
    k = key()
    t = time.time()
    await counters.reserve([lease(k, 1, ttl=5)], slot(), now=t - 100)
    assert await counters.reserve([lease(k, 1, ttl=5)], slot(), now=t) == Verdict(None, [1.0])
    # The lease is exact: still live just before it ends, gone at its end.
    refused = await counters.reserve([lease(k, 1, ttl=5)], slot(), now=t + 4.9)
    assert refused.failed == 0
    assert (await counters.reserve([lease(k, 1, ttl=5)], slot(), now=t + 5)).failed is None


async def test_renew_keeps_a_lease_alive(counters, key):
    renewed, lapsed = key(), key()
    t = time.time()
    a, b = slot(), slot()
    # Both leases end 0.1 s from now; only the first is renewed, for a minute.
    await counters.reserve([lease(renewed, 1, ttl=1)], a, now=t - 0.9)
    await counters.reserve([lease(lapsed, 1, ttl=1)], b, now=t - 0.9)
    await counters.renew({renewed: (LeaseLength(60), [a])})
    refused = await counters.reserve([lease(renewed, 1)], slot(), now=t + 30)
    assert (refused.failed, refused.values[0]) == (0, 1.0)
    assert (await counters.reserve([lease(lapsed, 1)], slot(), now=t + 30)).failed is None
    assert (await counters.reserve([lease(renewed, 1)], slot(), now=t + 61)).failed is None


async def test_renew_does_not_bring_back_a_released_lease(counters, key):
    k = key()
    a = slot()
    await counters.reserve([lease(k, 1)], a)
    await counters.release([k], a)
    await counters.renew({k: (LeaseLength(60), [a])})
    assert (await counters.reserve([lease(k, 1)], slot())).failed is None


async def test_a_renewed_lease_outlives_its_first_term(counters, key, request):
    k = key()
    held = slot()
    t = time.time()
    ttl = 0.5
    await counters.reserve([lease(k, 1, ttl=ttl)], held, now=t)
    await counters.renew({k: (LeaseLength(30), [held])})
    if _is_redis(counters):
        await asyncio.sleep(1.1)  # past the key's expiry, ceil(2 * ttl) = 1 s
    refused = await counters.reserve([lease(k, 1, ttl=ttl)], slot(), now=t + 1.1)
    assert refused.failed == 0


# --- concurrency ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["window", "lease"])
async def test_concurrent_reservations_never_overshoot(counters, key, kind, request):
    k = key()
    check = window(k, 50, 1) if kind == "window" else lease(k, 50)
    verdicts = await asyncio.gather(*(counters.reserve([check], slot()) for _ in range(200)))
    admitted = [v for v in verdicts if v.failed is None]
    assert len(admitted) == 50
    assert sorted(v.values[0] for v in admitted) == [float(i) for i in range(1, 51)]
    assert all(v.values == [50.0] for v in verdicts if v.failed is not None)


async def test_concurrent_multi_check_reservations_stay_consistent(counters, key):
    """Two counters, the second tighter: every admitted call added to both, no other."""
    a, b = key(), key()
    checks = [window(a, 1000, 2), window(b, 30, 1)]
    verdicts = await asyncio.gather(*(counters.reserve(checks, slot()) for _ in range(100)))
    assert sum(v.failed is None for v in verdicts) == 30
    assert {v.failed for v in verdicts if v.failed is not None} == {1}
    assert await peek(counters, a) == 60.0
    assert await peek(counters, b) == 30.0


# --- Redis down ----------------------------------------------------------------------------


async def test_redis_down_open_falls_back_to_this_process(settings, key):
    from quotas.counters.redis import RedisQuotaCounters

    settings.SLUICE_QUOTAS_WHEN_REDIS_DOWN = "open"
    backend = RedisQuotaCounters(DOWN_URL)
    try:
        k, slots = key(), key()
        assert await backend.reserve([window(k, 10, 6)], slot()) == Verdict(None, [6.0])
        refused = await backend.reserve([window(k, 10, 6)], slot())
        assert (refused.failed, refused.values[0]) == (0, 6.0)
        await backend.adjust([(k, -4)])
        assert await backend.reserve([window(k, 10, 6)], slot()) == Verdict(None, [8.0])

        held = slot()
        assert (await backend.reserve([lease(slots, 1)], held)).failed is None
        assert (await backend.reserve([lease(slots, 1)], slot())).failed == 0
        await backend.renew({slots: (LeaseLength(60), [held])})
        await backend.release([slots], held)
        assert (await backend.reserve([lease(slots, 1)], slot())).failed is None
    finally:
        await backend._client().aclose()


async def test_redis_down_closed_refuses(settings, key):
    from quotas.counters.redis import QuotaStoreDown, RedisQuotaCounters

    settings.SLUICE_QUOTAS_WHEN_REDIS_DOWN = "closed"
    backend = RedisQuotaCounters(DOWN_URL)
    k = key()
    try:
        with pytest.raises(QuotaStoreDown):
            await backend.reserve([window(k, 10, 1)], slot())
        with pytest.raises(QuotaStoreDown):
            await backend.adjust([(k, 1)])
        with pytest.raises(QuotaStoreDown):
            await backend.release([k], slot())
        with pytest.raises(QuotaStoreDown):
            await backend.renew({k: (LeaseLength(60), [slot()])})
    finally:
        await backend._client().aclose()


# --- one backend, several event loops ------------------------------------------------------


def test_redis_backend_serves_two_live_event_loops(key):
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    from quotas.counters.redis import RedisQuotaCounters

    backend = RedisQuotaCounters(url)
    k = key()
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        assert first.run_until_complete(backend.reserve([window(k, 10, 1)], slot())).values == [1]
        assert second.run_until_complete(backend.reserve([window(k, 10, 1)], slot())).values == [2]
        assert first.run_until_complete(backend.reserve([window(k, 10, 1)], slot())).values == [3]
    finally:
        from core.redis_client import _clients
        from core.redis_wire import close_script_wires

        for loop in (first, second):
            close_script_wires(loop)
            client = _clients.pop((url, loop), None)
            if client is not None:
                loop.run_until_complete(client.aclose())
            loop.close()


async def test_settle_adjusts_and_releases_in_one_step(counters, key):
    tokens, leases = key(), key()
    held = slot()
    verdict = await counters.reserve([window(tokens, 100, 80), lease(leases, 1)], held)
    assert verdict.failed is None
    await counters.settle([(tokens, -60.0)], [leases], held)
    after = await counters.reserve([window(tokens, 100, 80), lease(leases, 1)], slot())
    assert after.failed is None
    assert after.values == [100.0, 1.0]  # 20 left after the refund, and the slot was free


# --- the ledger of pending reservations (Redis: shared by workers that may die) ----------


@pytest.fixture
async def shared(key):
    """Redis counters with a ledger of their own (dead reservations are swept by time)."""
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    from quotas.counters.redis import RedisQuotaCounters

    backend = RedisQuotaCounters(url, ledger=key() + ":pending")
    yield backend
    await backend._client().aclose()


async def test_a_dead_workers_reservation_is_taken_back_after_its_deadline(shared, key):
    from quotas.counters.redis import pending_lease

    k = key()
    t = time.time()
    lease = pending_lease()
    held = await shared.reserve([window(k, 100, 80)], slot(), now=t)
    assert held.pending == (shared.ledger, lease)
    # Nobody settles or renews it (its worker died): it holds until its deadline...
    late = lease.lease - 1
    assert (await shared.reserve([window(k, 100, 30)], slot(), now=t + late)).failed == 0
    # ...and is taken back by the first reservation after it.
    after = t + lease.lease + 1
    assert await shared.reserve([window(k, 100, 30)], slot(), now=after) == Verdict(None, [30.0])


async def test_a_renewed_reservation_is_not_taken_back(shared, key):
    from quotas.counters.redis import pending_lease

    k = key()
    t = time.time()
    a = slot()
    lease = pending_lease()
    await shared.reserve([window(k, 100, 80)], a, now=t - lease.lease + 1)  # deadline t + 1
    await shared.renew({shared.ledger: (lease, [a])})  # now: t + the lease
    assert (await shared.reserve([window(k, 100, 30)], slot(), now=t + 5)).failed == 0


async def test_a_settled_reservation_is_never_taken_back_twice(shared, key):
    k = key()
    t = time.time()
    a = slot()
    await shared.reserve([window(k, 100, 80)], a, now=t)
    await shared.settle([(k, -60.0)], [], a, reserved=[80.0])  # used 20
    assert await peek(shared, k) == 20.0
    assert (await shared.reserve([window(k, 100, 0)], slot(), now=t + 60)).values == [20.0]


async def test_a_settle_sent_again_charges_once(shared, key):
    """A settle whose answer was lost (the link to Redis went down after the script ran) is
    sent again when Redis answers: the refund must not be made twice (here it let the
    budget pass its limit by a call in the fleet bench's cut-off host)."""
    k = key()
    a = slot()
    assert (await shared.reserve([window(k, 100, 80)], a)).failed is None
    for _ in range(2):
        await shared.settle([(k, -60.0)], [], a, reserved=[80.0])  # used 20
    assert await peek(shared, k) == 20.0


async def test_a_settle_sent_again_after_a_sweep_charges_once(shared, key):
    from quotas.counters.redis import pending_lease

    k = key()
    t = time.time()
    a = slot()
    await shared.reserve([window(k, 100, 80)], a, now=t - pending_lease().lease - 5)
    assert (await shared.reserve([window(k, 100, 0)], slot(), now=t)).values == [0.0]  # swept
    for _ in range(2):
        await shared.settle([(k, -30.0)], [], a, reserved=[80.0])  # used 50
    assert await peek(shared, k) == 50.0


async def test_a_late_settle_of_a_swept_reservation_charges_what_was_used(shared, key):
    """A worker that stalled past its deadline and then finishes: the sweep took its 80
    back; its settle (used 50) adds the 50, not 50 - 80."""
    from quotas.counters.redis import pending_lease

    k, other = key(), key()
    t = time.time()
    a = slot()
    past = t - pending_lease().lease - 5  # its deadline is behind us
    await shared.reserve([window(k, 100, 80), window(other, 100, 0.8)], a, now=past)
    assert (await shared.reserve([window(k, 100, 0)], slot(), now=t)).values == [0.0]
    await shared.settle([(k, -30.0), (other, -0.3)], [], a, reserved=[80.0, 0.8])
    assert await peek(shared, k) == 50.0
    assert await peek(shared, other) == pytest.approx(0.5)


# --- a worker's reservations when it ends ---------------------------------------------------


@pytest.fixture
async def host(key):
    """Redis counters of workers of this host on one ledger: `worker(ended=True)` is one
    whose process has ended (killed: it never settles what it reserved)."""
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    from core.fleet import worker_name
    from quotas.counters.redis import RedisQuotaCounters

    ledger = key() + ":pending"
    made = []

    def worker(*, ended: bool = False, name: str | None = None) -> RedisQuotaCounters:
        backend = RedisQuotaCounters(url, ledger=ledger)
        if ended:
            child = subprocess.Popen(["sleep", "30"])
            backend.worker = worker_name(child.pid)
            child.kill()
            child.wait()
        elif name is not None:
            backend.worker = name
        made.append(backend)
        return backend

    yield worker
    for backend in made:
        await backend._client().aclose()


async def test_a_starting_worker_takes_back_at_once_what_ended_workers_of_its_host_reserved(
    host, key
):
    """A worker killed with calls under way: their reservations would hold the limit until
    their leases ran out (30 s); the next worker to start on its host takes them back."""
    k, other = key(), key()
    killed = host(ended=True)
    for _ in range(2):
        assert (
            await killed.reserve([window(k, 100, 40), window(other, 10, 2)], slot())
        ).failed is None
    starting = host()
    assert (await starting.reserve([window(k, 100, 30)], slot())).failed == 0
    assert await starting.take_back_ended() == 2
    assert await starting.reserve([window(k, 100, 30)], slot()) == Verdict(None, [30.0])
    assert await peek(starting, other) == 0.0
    assert await starting.take_back_ended() == 0  # once


async def test_reservations_of_live_workers_and_of_other_hosts_are_left_to_their_leases(host, key):
    """Only a worker of this host whose process has ended is known to be gone: one still
    running (this process) and one of another host (its pid means nothing here) keep
    theirs until they settle or their leases end."""
    from core.fleet import worker_name

    k = key()
    running = host()
    elsewhere = host(name="other-host/0000abcd:" + worker_name(2**22 + 7).split(":", 1)[1])
    for w in (running, elsewhere):
        assert (await w.reserve([window(k, 100, 40)], slot())).failed is None
    assert await host().take_back_ended() == 0
    assert (await running.reserve([window(k, 100, 30)], slot())).failed == 0


async def test_a_taken_back_reservation_settled_after_all_charges_what_was_used(host, key):
    """Should a worker thought ended still settle (it was not), the counter ends charged
    what its call used, as after a reservation swept at its deadline."""
    k = key()
    a = slot()
    stalled = host(ended=True)
    assert (await stalled.reserve([window(k, 100, 80)], a)).failed is None
    assert await host().take_back_ended() == 1
    await stalled.settle([(k, -30.0)], [], a, reserved=[80.0])  # used 50
    assert await peek(stalled, k) == 50.0


async def test_the_in_process_counters_have_no_other_worker_to_take_back_from(key):
    counters = LocalQuotaCounters()
    assert (await counters.reserve([window(key(), 100, 80)], slot())).failed is None
    assert await counters.take_back_ended() == 0


# --- a worker's share while Redis is away --------------------------------------------------


@pytest.fixture
async def fleet(key, settings):
    """Two workers' Redis counters on one ledger, and a way to cut them off from Redis
    (pointed at a port nobody listens on) and back, Redis keeping its data meanwhile."""
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    from quotas.counters.redis import RedisQuotaCounters

    settings.SLUICE_QUOTAS_WHEN_REDIS_DOWN = "open"
    ledger = key() + ":pending"
    workers = [RedisQuotaCounters(url, ledger=ledger) for _ in range(2)]

    def cut(away: bool) -> None:
        for w in workers:
            w.url = DOWN_URL if away else url

    yield workers, cut
    cut(False)
    for w in workers:
        await w._client().aclose()


async def admitted(counters, check: Check, tries: int = 50) -> int:
    n = 0
    for _ in range(tries):
        if (await counters.reserve([check], slot())).failed is not None:
            break
        n += 1
    return n


async def test_while_redis_is_away_each_worker_admits_its_share_of_what_was_left(fleet, key):
    """A limit of 100 with 40 used: cut off from Redis, each of two workers admits its
    half of what it last saw left (a saw 30 used, b 40: 3 calls of 10 each), 100 in all;
    each on the whole of it would admit 7 and 6: 170."""
    (a, b), cut = fleet
    k = key()
    for w in (a, b, a, b):  # each has heard of the other
        assert (await w.reserve([window(k, 100, 10)], slot())).failed is None
    cut(True)
    assert [await admitted(w, window(k, 100, 10)) for w in (a, b)] == [3, 3]


async def test_while_redis_is_away_a_concurrency_limit_is_split_between_the_workers(fleet, key):
    (a, b), cut = fleet
    k, other = key(), key()
    for w in (a, b, a):  # each has heard of the other
        assert (await w.reserve([window(other, 100, 1)], slot())).failed is None
    cut(True)
    assert [await admitted(w, lease(k, 6)) for w in (a, b)] == [3, 3]


async def test_what_a_worker_counted_on_its_own_is_added_to_redis_when_it_answers(fleet, key):
    (a, b), cut = fleet
    k = key()
    reserved = await a.reserve([window(k, 1000, 100)], held := slot())  # in Redis's ledger
    assert reserved.failed is None and reserved.pending is not None
    cut(True)
    assert (await a.reserve([window(k, 1000, 30)], slot())).failed is None  # on its own
    await a.settle([(k, -60)], [], held, reserved=[100.0])  # used 40 of its 100
    await a.adjust([(k, 5)])  # the one made alone used 35
    cut(False)
    assert (await a.reserve([window(k, 1000, 0)], slot())).values == [100.0]  # then repaid
    assert await peek(b, k) == 75.0  # 40 + 35: what the two calls used
    assert await peek(a, k) == 75.0  # once
