"""Quota counters in this process (the embedded default, one worker)."""

import time
from typing import Any

from quotas.counters.interface import Check, Verdict


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
                current: float = self._in_flight(check.key, now, skip_parked=check.skip_parked)
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
        self,
        deltas: list[tuple[str, float]],
        lease_keys: list[str],
        slot: str,
        *,
        reserved: list[float] | None = None,  # a process's reservations die with it
    ) -> None:
        await self.adjust(deltas)
        await self.release(lease_keys, slot)

    async def take_back_ended(self) -> int:
        return 0  # one worker: no other worker's reservations live here

    async def renew(self, held: dict[str, tuple[Any, list[str]]]) -> None:
        now = time.time()
        for key, (length, slots) in held.items():
            leases = self._leases.get(key, {})
            for slot in slots:
                if slot in leases:
                    leases[slot] = now + length.lease
