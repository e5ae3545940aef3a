"""Weighted, atomic counters for limits django-ratelimit cannot express: tokens per
minute/day/month, cost per month, and requests in flight.

A reservation checks every counter of every scope that applies and, only if all pass,
adds to all of them at once (atomic: one Lua script on Redis, no await in process), so
concurrent requests cannot overshoot a limit together. Settlement later adds the
difference between what was reserved and what was used (negative: a refund).

Window counters live in fixed buckets (the key names the minute, the day or the month)
that expire on their own. A counter Redis has lost starts from `seed`, the usage already
recorded in the hourly rollups. Concurrency counters are leases, like deployment slots.

One interface (`interface.py`), two backends (`local.py`, in this process; `redis.py`, with
the Lua in the `.lua` files here), and `factory.quota_counters()` picking one by REDIS_URL.
"""

from quotas.counters.factory import quota_counters
from quotas.counters.interface import Check, LeaseLength, QuotaCounters, Verdict
from quotas.counters.local import LocalQuotaCounters
from quotas.counters.redis import QuotaStoreDown, redis_down

__all__ = [
    "Check",
    "LeaseLength",
    "LocalQuotaCounters",
    "QuotaCounters",
    "QuotaStoreDown",
    "Verdict",
    "quota_counters",
    "redis_down",
]
