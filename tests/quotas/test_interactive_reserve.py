"""Every quota scope keeps a reserve for interactive calls: batch may
use the limit less SLUICE_QUOTA_INTERACTIVE_RESERVE (20 %) of requests per minute, tokens
per minute and concurrency, and a batch call refused there spends nothing."""

import os
import random
import time

import pytest

from core.errors import GatewayError
from quotas.counters import LocalQuotaCounters
from quotas.limits import ScopeLimits
from quotas.reservation import Ticket, _check_requests, _counters, _refusal, _rpm_usage, batch_share

T0 = 1_800_000_000.0


@pytest.fixture(params=["local", "redis"])
async def counters(request):
    """In process, and on Redis when REDIS_URL is set."""
    if request.param == "local":
        yield LocalQuotaCounters()
        return
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    from core.redis_client import redis_client
    from quotas.counters.redis import RedisQuotaCounters

    yield RedisQuotaCounters(url)
    await redis_client(url).aclose()


def scope(**limits) -> ScopeLimits:
    fields = {
        "requests_per_minute": None,
        "tokens_per_minute": None,
        "max_concurrency": None,
        "tokens_per_day": None,
        "tokens_per_month": None,
        "cost_per_month": None,
    }
    target = random.randrange(10**9)
    return ScopeLimits("member", target, f"m{target}@example.com", **(fields | limits))


@pytest.mark.parametrize(
    ("limit", "reserve", "share"),
    [(16, 0.2, 12), (600, 0.2, 480), (5, 0.2, 4), (3, 0.2, 2), (1, 0.2, 1), (10, 0.0, 10)],
)
def test_batch_share(limit, reserve, share):
    assert batch_share(limit, reserve) == share


def _count(s: ScopeLimits, batch: bool) -> None:
    _check_requests(_rpm_usage([s], batch), Ticket(LocalQuotaCounters(), "x"))


def test_batch_is_held_to_its_share_of_requests_per_minute_and_its_refusals_cost_nothing():
    s = scope(requests_per_minute=5)
    for _ in range(4):
        _count(s, batch=True)
    for _ in range(10):  # a batch client retrying hard spends nothing of the reserve
        with pytest.raises(GatewayError) as refused:
            _count(s, batch=True)
    assert refused.value.status == 429
    assert "batch" in refused.value.message
    assert int(refused.value.headers["Retry-After"]) >= 1
    _count(s, batch=False)  # the interactive call gets the fifth
    with pytest.raises(GatewayError):
        _count(s, batch=False)


async def test_batch_is_held_to_its_share_of_concurrency_and_tokens_per_minute():
    counters = LocalQuotaCounters()
    s = scope(max_concurrency=16, tokens_per_minute=10_000)

    async def reserve(slot: str, batch: bool):
        planned = _counters((s,), "UTC", 100, 0.0, T0, batch=batch)
        verdict = await counters.reserve([p.check for p in planned], slot, now=T0)
        if verdict.failed is not None:
            raise _refusal(planned[verdict.failed], verdict.values[0], 100, T0)

    for i in range(12):
        await reserve(f"b{i}", batch=True)
    with pytest.raises(GatewayError) as refused:
        await reserve("b12", batch=True)
    assert refused.value.code == "concurrency_exceeded"
    assert "12 requests in flight for batch calls (of 16" in refused.value.message
    for i in range(4):  # the member's interactive calls find the reserve
        await reserve(f"i{i}", batch=False)
    with pytest.raises(GatewayError):
        await reserve("i4", batch=False)
    # Tokens per minute: batch stops at 8,000 of 10,000.
    t = scope(tokens_per_minute=10_000)
    batch_check = _counters((t,), "UTC", 4_000, 0.0, T0, batch=True)[0].check
    assert batch_check.limit == 8_000
    assert _counters((t,), "UTC", 4_000, 0.0, T0)[0].check.limit == 10_000


async def test_an_interactive_call_is_not_refused_for_its_members_queued_batch(counters):
    """Batch calls waiting in a deployment's queue keep their leases (batch's own count has
    them) but an interactive call's count leaves them out: its own member's queued batch
    never refuses it."""
    from quotas.reservation import Ticket, park

    s = scope(max_concurrency=4)

    async def reserve(slot: str, batch: bool):
        now = time.time()  # a parked lease's expiry is the clock's
        planned = _counters((s,), "UTC", 100, 0.0, now, batch=batch)
        verdict = await counters.reserve([p.check for p in planned], slot, now=now)
        return verdict.failed is None, [p.check.key for p in planned]

    held = []
    for i in range(3):  # batch's share of 4
        admitted, keys = await reserve(f"b{i}", batch=True)
        assert admitted
        held.append(Ticket(counters, f"b{i}", lease_keys=keys))
    assert not (await reserve("b3", batch=True))[0]
    assert (await reserve("i0", batch=False))[0]  # the reserve
    assert not (await reserve("i1", batch=False))[0]  # 4 in flight: full
    for ticket in held[:2]:  # two batch calls wait in a deployment's queue
        await park(ticket, parked=True)
    assert (await reserve("i1", batch=False))[0]
    assert (await reserve("i2", batch=False))[0]
    assert not (await reserve("i3", batch=False))[0]  # 2 sent + 2 interactive: the limit
    assert not (await reserve("b4", batch=True))[0]  # batch still counts its queued ones
    await park(held[0], parked=False)  # granted: counts for everyone again
    await counters.release(held[1].lease_keys, held[1].slot)  # gave up waiting
    assert not (await reserve("i3", batch=False))[0]
