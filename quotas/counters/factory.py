"""The process's quota counters, chosen by REDIS_URL (beside both backends, so choosing one
imports no module that imports this one)."""

from django.conf import settings

from quotas.counters.interface import QuotaCounters
from quotas.counters.local import LocalQuotaCounters

_counters: QuotaCounters | None = None


def quota_counters() -> QuotaCounters:
    """The process's backend, chosen by REDIS_URL."""
    global _counters
    if _counters is None:
        if settings.REDIS_URL:
            from quotas.counters.redis import RedisQuotaCounters

            _counters = RedisQuotaCounters(settings.REDIS_URL)
        else:
            _counters = LocalQuotaCounters()
    return _counters
