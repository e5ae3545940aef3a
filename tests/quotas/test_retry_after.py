"""A client that waits the Retry-After it was told gets through: at a
window's last second, on the ratelimit cache configured for this run (in memory without
REDIS_URL, Redis with it)."""

import random
import time

import pytest
from django_ratelimit.core import _get_window

from core.errors import GatewayError
from quotas.counters import LocalQuotaCounters
from quotas.limits import ScopeLimits
from quotas.reservation import Ticket, _check_requests, _rpm_usage


def _scope_ending_in(seconds: int) -> ScopeLimits:
    """A key scope (1 request per minute) whose one-minute window has `seconds` whole
    seconds left by django-ratelimit's count: windows are staggered per scope."""
    while True:
        target = random.randrange(10**9)
        if _get_window(f"key:{target}", 60) - int(time.time()) == seconds:
            return ScopeLimits("key", target, f"sk-{target}", 1, None, None, None, None, None)


def _count(scope: ScopeLimits) -> None:
    ticket = Ticket(counters=LocalQuotaCounters(), slot="s")
    _check_requests(_rpm_usage([scope]), ticket)


@pytest.mark.parametrize("left", [0, 1])
def test_waiting_the_retry_after_of_a_requests_per_minute_refusal_gets_through(left):
    scope = _scope_ending_in(left)
    _count(scope)
    with pytest.raises(GatewayError) as refused:
        _count(scope)
    told = int(refused.value.headers["Retry-After"])
    assert refused.value.headers["x-ratelimit-reset-requests"] == f"{told}s"
    time.sleep(told)  # exactly what it was told
    _count(scope)  # a new window: no 429
