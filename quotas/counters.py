"""Weighted, atomic counters for limits django-ratelimit cannot express: tokens per
minute/day/month, cost per month, and requests in flight.

A reservation checks every counter of every scope that applies and, only if all pass,
adds to all of them at once (atomic: one Lua script on Redis, no await in process), so
concurrent requests cannot overshoot a limit together. Settlement later adds the
difference between what was reserved and what was used (negative: a refund).

Window counters live in fixed buckets (the key names the minute, the day or the month)
that expire on their own. A counter Redis has lost starts from `seed`, the usage already
recorded in the hourly rollups. Concurrency counters are leases, like deployment slots.
"""

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger("sluice.quotas")


@dataclass(frozen=True)
class Check:
    key: str
    limit: float
    amount: float  # window counters: what to add; leases: ignored (one slot)
    ttl: float  # window counters: seconds the bucket lives; leases: the lease
    lease: bool = False
    seed: float = 0.0
    # Leases: whether the leases of batch calls waiting in a deployment's queue (parked)
    # are left out of the count: an interactive call's check; a batch call counts them.
    skip_parked: bool = False


@dataclass
class Verdict:
    failed: int | None  # index of the first check that did not pass
    values: list[float] = field(default_factory=list)  # each counter, reservation included


@dataclass(frozen=True)
class LeaseLength:
    lease: float


class QuotaCounters(Protocol):
    async def reserve(
        self, checks: list[Check], slot: str, *, now: float | None = None
    ) -> Verdict: ...

    async def adjust(self, deltas: list[tuple[str, float]]) -> None: ...

    async def release(self, keys: list[str], slot: str) -> None: ...

    async def settle(
        self, deltas: list[tuple[str, float]], lease_keys: list[str], slot: str
    ) -> None: ...

    async def renew(self, held: dict[str, tuple[Any, list[str]]]) -> None: ...

    async def in_flight(self, keys: list[str]) -> list[int]:
        """Live leases of each concurrency counter (the console's "calls in flight")."""
        ...

    async def park(self, keys: list[str], slot: str, *, parked: bool) -> None:
        """Mark (or unmark) a lease as held by a call waiting in a deployment's queue."""


class LocalQuotaCounters:
    """In-process backend: each method runs without an await, so it is atomic with
    respect to the other requests of this worker."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[float, float]] = {}  # key -> (value, expires at)
        self._leases: dict[str, dict[str, float]] = {}  # key -> slot -> expires at
        self._parked: dict[str, set[str]] = {}  # key -> slots waiting in a deployment queue

    def _value(self, check: Check, now: float) -> float:
        found = self._values.get(check.key)
        if found is None or found[1] <= now:
            return check.seed
        return found[0]

    def _in_flight(self, key: str, now: float, *, skip_parked: bool = False) -> int:
        slots = self._leases.get(key)
        if not slots:
            return 0
        live = {s: exp for s, exp in slots.items() if exp > now}
        self._leases[key] = live
        if skip_parked:
            return len(live.keys() - self._parked.get(key, set()))
        return len(live)

    async def in_flight(self, keys: list[str]) -> list[int]:
        now = time.time()
        return [self._in_flight(key, now) for key in keys]

    async def reserve(self, checks: list[Check], slot: str, *, now: float | None = None) -> Verdict:
        now = time.time() if now is None else now
        values = []
        for i, check in enumerate(checks):
            if check.lease:
                current = self._in_flight(check.key, now, skip_parked=check.skip_parked)
                if current + 1 > check.limit:
                    return Verdict(i, [float(current)])
                values.append(current + 1.0)
            else:
                current = self._value(check, now)
                if current + check.amount > check.limit:
                    return Verdict(i, [current])
                values.append(current + check.amount)
        for check, value in zip(checks, values, strict=True):
            if check.lease:
                self._leases.setdefault(check.key, {})[slot] = now + check.ttl
            else:
                found = self._values.get(check.key)
                expires = found[1] if found and found[1] > now else now + check.ttl
                self._values[check.key] = (value, expires)
        if len(self._values) > 100_000:
            self._values = {k: v for k, v in self._values.items() if v[1] > now}
        return Verdict(None, values)

    async def adjust(self, deltas: list[tuple[str, float]]) -> None:
        now = time.time()
        for key, delta in deltas:
            found = self._values.get(key)
            if found is not None and found[1] > now:
                self._values[key] = (max(0.0, found[0] + delta), found[1])

    async def release(self, keys: list[str], slot: str) -> None:
        for key in keys:
            self._leases.get(key, {}).pop(slot, None)
            self._parked.get(key, set()).discard(slot)

    async def park(self, keys: list[str], slot: str, *, parked: bool) -> None:
        for key in keys:
            if parked:
                self._parked.setdefault(key, set()).add(slot)
            elif key in self._parked:
                self._parked[key].discard(slot)
                if not self._parked[key]:
                    del self._parked[key]

    async def settle(
        self, deltas: list[tuple[str, float]], lease_keys: list[str], slot: str
    ) -> None:
        await self.adjust(deltas)
        await self.release(lease_keys, slot)

    async def renew(self, held: dict[str, tuple[Any, list[str]]]) -> None:
        now = time.time()
        for key, (length, slots) in held.items():
            leases = self._leases.get(key, {})
            for slot in slots:
                if slot in leases:
                    leases[slot] = now + length.lease


_counters: Any = None


def quota_counters() -> QuotaCounters:
    """The process's backend, chosen by REDIS_URL."""
    global _counters
    if _counters is None:
        from django.conf import settings

        if settings.REDIS_URL:
            from quotas.counters_redis import RedisQuotaCounters

            _counters = RedisQuotaCounters(settings.REDIS_URL)
        else:
            _counters = LocalQuotaCounters()
    return _counters
