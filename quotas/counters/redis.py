"""Quota counters in Redis: one Lua script reserves across every scope atomically."""

import logging
import math
import time
from pathlib import Path
from typing import Any

import redis.asyncio as redis
from django.conf import settings
from redis.exceptions import RedisError

from core.fleet import LIVE_WITHIN, gone, worker_name
from core.lua import Scripts, lua_source
from core.redis_client import redis_client
from core.redis_down import RedisDown, RedisDownPolicy
from quotas.counters.interface import Check, LeaseLength, Verdict
from quotas.counters.local import LocalQuotaCounters
from quotas.counters.shares import Owed, worker_share

log = logging.getLogger("sluice.quotas")

ARGS_PER_CHECK = 6  # what `reserve` sends for each check (_check_args)
LEDGER_KEEP = 86_400  # seconds the ledger of pending reservations outlives its last write
LUA_CONSTANTS = {
    "ARGS_PER_CHECK": ARGS_PER_CHECK,
    "SWEEP_BATCH": 16,  # dead reservations taken back per reservation, at most
    "LEDGER_KEEP": LEDGER_KEEP,
}


def pending_lease() -> LeaseLength:
    """A pending reservation's deadline in the ledger, renewed every third of it while its
    call runs (SLUICE_QUOTA_PENDING_LEASE_SECONDS): how soon a dead worker's reserved tokens
    and cost come back, and how long a worker cut off from Redis keeps them."""
    return LeaseLength(settings.SLUICE_QUOTA_PENDING_LEASE_SECONDS, keep=LEDGER_KEEP)


SCRIPTS = Scripts(
    {
        name: lua_source(Path(__file__).parent, ("ledger", name), LUA_CONSTANTS)
        for name in ("reserve", "settle", "pending_workers", "take_back")
    }
)

PARKED_FOR = 120.0  # seconds: the quota lease's length (a queue wait is shorter)


def _check_args(c: Check) -> list[Any]:
    return [c.limit, c.amount, c.ttl, int(c.lease), c.seed, int(c.skip_parked)]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class QuotaStoreDown(RedisDown):
    """Redis is unreachable and SLUICE_QUOTAS_WHEN_REDIS_DOWN is `closed`."""


# Open (the default): go on with this worker's own counters; closed: refuse the call.
POLICY = RedisDownPolicy(
    log,
    open_means="quotas are enforced per worker",
    fail_open=lambda: settings.SLUICE_QUOTAS_WHEN_REDIS_DOWN != "closed",
    error=QuotaStoreDown,
)


def redis_down(exc: Exception) -> None:
    """Redis failed a quota operation (here, or django-ratelimit's requests per minute):
    the policy logs it and raises `QuotaStoreDown` when quotas fail closed."""
    POLICY.failed(exc)


class RedisQuotaCounters:
    def __init__(self, url: str, *, ledger: str | None = None) -> None:
        self.url = url
        self._fallback = LocalQuotaCounters()
        # The pending reservations of every worker (reserve.lua): one sorted set.
        self.ledger = ledger or f"{settings.SLUICE_REDIS_PREFIX}:q:pending"
        # Every worker that reserves, by when it last did: how many share a limit while
        # Redis is away (shares.py).
        self.workers_key = f"{self.ledger}:workers"
        self.worker = worker_name()
        self._workers = 1
        self._seen: dict[str, float] = {}  # counter -> its value at Redis's last answer
        self._owed = Owed()

    def _client(self) -> redis.Redis:
        return redis_client(self.url)

    async def reserve(self, checks: list[Check], slot: str, *, now: float | None = None) -> Verdict:
        now = time.time() if now is None else now
        args: list[Any] = [now, slot, len(checks)]
        for c in checks:
            args += _check_args(c)
        lease = pending_lease()
        args += [self.ledger, now + lease.lease, self.workers_key, self.worker]
        args.append(now - LIVE_WITHIN)
        try:
            result = await SCRIPTS.run(self.url, "reserve", keys=[c.key for c in checks], args=args)
        except (RedisError, OSError) as exc:
            POLICY.failed(exc)
            return await self._reserve_alone(checks, slot, now)
        POLICY.recovered()
        if self._owed:
            await self._repay()
        failed = int(result[0])
        values = [float(v) for v in result[1:-1]]
        self._workers = int(result[-1])
        if failed:
            self._seen[checks[failed - 1].key] = values[0]
            return Verdict(failed - 1, values)
        self._seen.update((c.key, v) for c, v in zip(checks, values, strict=True) if not c.lease)
        if len(self._seen) > 100_000:
            self._seen.clear()  # keys of windows long gone; the next answers fill it again
        pending = any(not c.lease and c.amount > 0 for c in checks)
        return Verdict(None, values, pending=(self.ledger, lease) if pending else None)

    async def _reserve_alone(self, checks: list[Check], slot: str, now: float) -> Verdict:
        """Redis is away: this worker's share of each limit, on its own counters; what it
        reserves is owed to Redis."""
        shares = [worker_share(c, self._seen.get(c.key), self._workers) for c in checks]
        verdict = await self._fallback.reserve(shares, slot, now=now)
        if verdict.failed is None:
            self._owed.add([(c.key, c.amount) for c in checks if not c.lease and c.amount])
        return verdict

    async def _repay(self) -> None:
        """Redis answers again: add what was counted here meanwhile (only to counters it
        still has: one it lost is seeded again from the audit trail, which holds them),
        settle the ledger entries of calls that ended meanwhile, and start this worker's
        own counters afresh for the next time."""
        owed, self._owed = self._owed, Owed()
        self._fallback = LocalQuotaCounters()
        batches: list[tuple[list[tuple[str, float]], str, list[float] | None]] = list(owed.settles)
        if owed.amounts:
            batches.append((list(owed.amounts.items()), "", None))
        try:
            for deltas, slot, reserved in batches:
                await SCRIPTS.run(
                    self.url,
                    "settle",
                    keys=[k for k, _ in deltas],
                    args=[
                        len(deltas),
                        slot,
                        *(d for _, d in deltas),
                        self.ledger if reserved is not None else "",
                        *(reserved or [0.0] * len(deltas)),
                    ],
                )
        except (RedisError, OSError) as exc:
            POLICY.failed(exc, refuse=False)  # lost: the audit trail still holds the calls

    async def take_back_ended(self) -> int:
        """What workers of this host that have ended (killed, crashed) left reserved in the
        ledger, taken back now: they will never settle it, and their leases would hold it
        until they run out. Run by a worker as it starts; a host that never comes back has
        its reservations taken back when their leases end. Answers how many."""
        try:
            workers = await SCRIPTS.run(self.url, "pending_workers", args=[self.ledger])
            ended = [name for name in map(_text, workers) if gone(name)]
            if not ended:
                return 0
            taken = await SCRIPTS.run(self.url, "take_back", args=[self.ledger, *ended])
        except (RedisError, OSError) as exc:
            POLICY.failed(exc, refuse=False)  # their leases still run out
            return 0
        log.info("took back %s reservations of %s ended workers", taken, len(ended))
        return int(taken)

    async def adjust(self, deltas: list[tuple[str, float]]) -> None:
        await self.settle(deltas, [], "")

    async def settle(
        self,
        deltas: list[tuple[str, float]],
        lease_keys: list[str],
        slot: str,
        *,
        reserved: list[float] | None = None,
    ) -> None:
        """`adjust` and `release` in one round trip: how every call ends. With `reserved`
        (what the reservation added to each counter of `deltas`), the call's entry in the
        ledger of pending reservations is settled too."""
        if not deltas and not lease_keys:
            return
        ledger = self.ledger if reserved is not None else ""
        try:
            await SCRIPTS.run(
                self.url,
                "settle",
                keys=[k for k, _ in deltas] + lease_keys,
                args=[
                    len(deltas),
                    slot,
                    *(d for _, d in deltas),
                    ledger,
                    *(reserved or [0.0] * len(deltas)),
                ],
            )
        except (RedisError, OSError) as exc:
            if reserved is None:
                self._owed.add(deltas)
            else:
                self._owed.add_settle(deltas, slot, reserved)
            POLICY.failed(exc)
            await self._fallback.settle(deltas, lease_keys, slot)

    async def release(self, keys: list[str], slot: str) -> None:
        await self.settle([], keys, slot)

    async def in_flight(self, keys: list[str]) -> list[int]:
        if not keys:
            return []
        now = time.time()
        try:
            async with self._client().pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.zcount(key, f"({now}", "+inf")  # leases not yet expired
                return [int(n) for n in await pipe.execute()]
        except (RedisError, OSError) as exc:
            # A read for the console: never refuse over it, show this worker's own view.
            POLICY.failed(exc, refuse=False)
            return await self._fallback.in_flight(keys)

    async def park(self, keys: list[str], slot: str, *, parked: bool) -> None:
        """A parked lease expires with the lease it marks (a dead worker's come free)."""
        if not keys:
            return
        try:
            async with self._client().pipeline(transaction=False) as pipe:
                for key in keys:
                    if parked:
                        pipe.zadd(f"{key}:parked", {slot: time.time() + PARKED_FOR})
                        pipe.expire(f"{key}:parked", math.ceil(PARKED_FOR * 2))
                    else:
                        pipe.zrem(f"{key}:parked", slot)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            POLICY.failed(exc)
            await self._fallback.park(keys, slot, parked=parked)

    async def renew(self, held: dict[str, tuple[Any, list[str]]]) -> None:
        now = time.time()
        try:
            async with self._client().pipeline(transaction=False) as pipe:
                for key, (length, slots) in held.items():
                    if slots:
                        pipe.zadd(key, {s: now + length.lease for s in slots}, xx=True)
                        keep = max(length.lease * 2, getattr(length, "keep", 0.0))
                        pipe.expire(key, math.ceil(keep))
                await pipe.execute()
        except (RedisError, OSError) as exc:
            POLICY.failed(exc)
            await self._fallback.renew(held)
