"""Quota counters in Redis: one Lua script reserves across every scope atomically."""

import logging
import math
import time
from typing import Any

import redis.asyncio as redis
from django.conf import settings
from redis.exceptions import RedisError

from core.redis_client import redis_client
from quotas.counters import Check, LocalQuotaCounters, Verdict

log = logging.getLogger("sluice.quotas")

_RESERVE = """
local now, slot, n = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local values = {}
for i = 1, n do
  local b = 3 + (i - 1) * 6
  local limit, amount = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local lease, seed = ARGV[b + 4] == '1', tonumber(ARGV[b + 5])
  local current
  if lease then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    current = redis.call('ZCARD', KEYS[i])
    if ARGV[b + 6] == '1' then  -- leave out the leases of batch calls waiting in a queue
      local parked = KEYS[i] .. ':parked'
      redis.call('ZREMRANGEBYSCORE', parked, '-inf', now)
      current = math.max(0, current - redis.call('ZCARD', parked))
    end
    amount = 1
  else
    current = tonumber(redis.call('GET', KEYS[i]) or seed)
  end
  if current + amount > limit then return {i, tostring(current)} end
  values[i] = tostring(current + amount)
end
for i = 1, n do
  local b = 3 + (i - 1) * 6
  local ttl = tonumber(ARGV[b + 3])
  if ARGV[b + 4] == '1' then
    redis.call('ZADD', KEYS[i], now + ttl, slot)
    redis.call('EXPIRE', KEYS[i], math.ceil(ttl * 2))
  else
    if redis.call('EXISTS', KEYS[i]) == 0 then
      redis.call('SET', KEYS[i], ARGV[b + 5], 'EX', math.ceil(ttl))
    end
    redis.call('INCRBYFLOAT', KEYS[i], ARGV[b + 2])
  end
end
return {0, unpack(values)}
"""

_SETTLE = """
local n = tonumber(ARGV[1])
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    if tonumber(redis.call('INCRBYFLOAT', KEYS[i], ARGV[i + 2])) < 0 then
      redis.call('SET', KEYS[i], 0, 'KEEPTTL')
    end
  end
end
for i = n + 1, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[2])
  redis.call('ZREM', KEYS[i] .. ':parked', ARGV[2])
end
return 1
"""


PARKED_FOR = 120.0  # seconds: the quota lease's length (a queue wait is shorter)


class QuotaStoreDown(Exception):
    """Redis is unreachable and SLUICE_QUOTAS_WHEN_REDIS_DOWN is `closed`."""


class RedisQuotaCounters:
    def __init__(self, url: str) -> None:
        self.url = url
        self._scripts: dict[int, tuple[Any, Any]] = {}  # per client (and so per loop)
        self._fallback = LocalQuotaCounters()

    def _client(self) -> redis.Redis:
        client = redis_client(self.url)
        if self._scripts.get(id(client)) is None:
            self._scripts[id(client)] = (
                client.register_script(_RESERVE),
                client.register_script(_SETTLE),
            )
        self._reserve, self._settle = self._scripts[id(client)]
        return client

    def down(self, exc: Exception) -> None:
        redis_down(exc)

    async def reserve(self, checks: list[Check], slot: str, *, now: float | None = None) -> Verdict:
        now = time.time() if now is None else now
        args: list[Any] = [now, slot, len(checks)]
        for c in checks:
            args += [c.limit, c.amount, c.ttl, int(c.lease), c.seed, int(c.skip_parked)]
        try:
            self._client()
            result = await self._reserve(keys=[c.key for c in checks], args=args)
        except (RedisError, OSError) as exc:
            self.down(exc)
            return await self._fallback.reserve(checks, slot, now=now)
        failed = int(result[0])
        values = [float(v) for v in result[1:]]
        return Verdict(failed - 1 if failed else None, values)

    async def adjust(self, deltas: list[tuple[str, float]]) -> None:
        await self.settle(deltas, [], "")

    async def settle(
        self, deltas: list[tuple[str, float]], lease_keys: list[str], slot: str
    ) -> None:
        """`adjust` and `release` in one round trip: how every call ends."""
        if not deltas and not lease_keys:
            return
        try:
            self._client()
            await self._settle(
                keys=[k for k, _ in deltas] + lease_keys,
                args=[len(deltas), slot, *(d for _, d in deltas)],
            )
        except (RedisError, OSError) as exc:
            self.down(exc)
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
        except (RedisError, OSError):
            # A read for the console: never refuse over it, show this worker's own view.
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
            self.down(exc)
            await self._fallback.park(keys, slot, parked=parked)

    async def renew(self, held: dict[str, tuple[Any, list[str]]]) -> None:
        now = time.time()
        try:
            async with self._client().pipeline(transaction=False) as pipe:
                for key, (length, slots) in held.items():
                    if slots:
                        pipe.zadd(key, {s: now + length.lease for s in slots}, xx=True)
                        pipe.expire(key, math.ceil(length.lease * 2))
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self.down(exc)
            await self._fallback.renew(held)


_last_logged = float("-inf")


def redis_down(exc: Exception) -> None:
    """Redis failed a quota operation: go on with this worker's own counters (the default,
    "open"), or refuse the call ("closed"). Logged loudly, at most every 10 seconds."""
    global _last_logged
    fail_open = settings.SLUICE_QUOTAS_WHEN_REDIS_DOWN != "closed"
    now = time.monotonic()
    if now - _last_logged > 10:
        log.error(
            "Redis unreachable (%s): quotas are %s",
            exc,
            "enforced per worker" if fail_open else "refusing calls",
        )
        _last_logged = now
    if not fail_open:
        raise QuotaStoreDown from exc
