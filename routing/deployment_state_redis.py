"""The deployment state in Redis, shared by every worker and host.

Each operation is one Lua script (atomic on the server, one round trip) implementing the
same rules as `LocalDeploymentState`; keys expire on their own. If Redis cannot be reached
the worker falls back to its own in-process state for the duration and says so loudly:
routing keeps working (each worker then judges deployments on what it sees itself) rather
than failing every call.
"""

import logging
import math
import time
from typing import Any

import redis.asyncio as redis
from redis.exceptions import RedisError

from routing.deployment_state import (
    BUDGET_BUCKET,
    BUDGET_BUCKETS,
    Admission,
    Limits,
    LocalDeploymentState,
    Refusal,
    Result,
    Snapshot,
)
from routing.redis_client import redis_client

log = logging.getLogger("sluice.state")

STATE_TTL = 86_400  # an idle deployment's state is forgotten after a day

_ACQUIRE = """
local now, maxc, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local retry, slot = ARGV[4] == '1', ARGV[5]
local ratio, floor_ = tonumber(ARGV[6]), tonumber(ARGV[7])
local width, buckets = tonumber(ARGV[8]), tonumber(ARGV[9])
local st = redis.call('HMGET', KEYS[1], 'mode', 'open_until', 'half_successes', 'limit')
local mode = st[1] or 'closed'
local half = tonumber(st[3] or '0')
local limit = math.min(tonumber(st[4] or maxc), maxc)
if mode == 'open' then
  local open_until = tonumber(st[2] or '0')
  if now < open_until then return {0, 'breaker', tostring(open_until - now)} end
  mode, half = 'half_open', 0
  redis.call('HSET', KEYS[1], 'mode', mode, 'half_successes', 0)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local allowed = math.floor(limit)
if mode == 'half_open' then allowed = math.min(allowed, 1 + half) end
if redis.call('ZCARD', KEYS[2]) >= allowed then
  if mode == 'half_open' then return {0, 'breaker', '0'} end
  return {0, 'concurrency', '0'}
end
local bucket = math.floor(now / width)
local fields = {}
for b = bucket - buckets + 1, bucket do
  fields[#fields + 1] = 'f:' .. b
  fields[#fields + 1] = 'r:' .. b
end
local counts = redis.call('HMGET', KEYS[3], unpack(fields))
local firsts, retries = 0, 0
for i = 1, #counts, 2 do
  firsts = firsts + tonumber(counts[i] or '0')
  retries = retries + tonumber(counts[i + 1] or '0')
end
if retry then
  if retries >= math.max(floor_, ratio * firsts) then return {0, 'budget', '0'} end
  redis.call('HINCRBY', KEYS[3], 'r:' .. bucket, 1)
else
  redis.call('HINCRBY', KEYS[3], 'f:' .. bucket, 1)
end
local stale = {}
for b = bucket - 2 * buckets, bucket - buckets do
  stale[#stale + 1] = 'f:' .. b
  stale[#stale + 1] = 'r:' .. b
end
redis.call('HDEL', KEYS[3], unpack(stale))
redis.call('EXPIRE', KEYS[3], math.ceil(width * buckets * 2))
redis.call('ZADD', KEYS[2], now + lease, slot)
redis.call('EXPIRE', KEYS[2], math.ceil(lease * 4))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[10]))
return {1, '', '0'}
"""

_RELEASE = """
redis.call('ZREM', KEYS[2], ARGV[3])
local result = ARGV[4]
if result == 'neutral' then return 0 end
local now, maxc = tonumber(ARGV[1]), tonumber(ARGV[2])
local threshold, cooldown, close_after = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local st = redis.call('HMGET', KEYS[1], 'mode', 'failures', 'half_successes', 'limit', 'streak',
                      'reason', 'open_until')
local mode, reason = st[1] or 'closed', st[6] or ''
local failures, half = tonumber(st[2] or '0'), tonumber(st[3] or '0')
local limit = math.min(tonumber(st[4] or maxc), maxc)
local streak, open_until = tonumber(st[5] or '0'), tonumber(st[7] or '0')
if result == 'success' then
  failures = 0
  if mode == 'half_open' then
    half = half + 1
    if half >= close_after then mode, reason = 'closed', '' end
  end
  streak = streak + 1
  if streak >= math.floor(limit) then limit, streak = math.min(maxc, limit + 1), 0 end
else
  if result == 'capacity' then limit, streak = math.max(1, math.floor(limit * 0.7)), 0 end
  failures = failures + 1
  if threshold > 0 and (result == 'misconfigured' or mode == 'half_open'
                        or failures >= threshold) then
    mode, open_until, failures, half, reason = 'open', now + cooldown, 0, 0, result
  end
end
redis.call('HSET', KEYS[1], 'mode', mode, 'failures', failures, 'half_successes', half,
           'limit', limit, 'streak', streak, 'reason', reason, 'open_until', open_until)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[8]))
return 1
"""


class RedisDeploymentState:
    def __init__(self, url: str, prefix: str = "sluice") -> None:
        self.url = url
        self.prefix = prefix
        self._scripts: dict[int, tuple[Any, Any]] = {}  # per client (and so per loop)
        self._fallback = LocalDeploymentState()
        self._failing_since: float | None = None

    def _keys(self, name: str) -> list[str]:
        # The hash tag keeps a deployment's keys on one Redis Cluster slot.
        base = f"{self.prefix}:dep:{{{name}}}"
        return [f"{base}:state", f"{base}:slots", f"{base}:budget"]

    def _client(self) -> redis.Redis:
        client = redis_client(self.url)
        if self._scripts.get(id(client)) is None:
            self._scripts[id(client)] = (
                client.register_script(_ACQUIRE),
                client.register_script(_RELEASE),
            )
        self._acquire, self._release = self._scripts[id(client)]
        return client

    def _down(self, exc: Exception) -> None:
        now = time.monotonic()
        if self._failing_since is None or now - self._failing_since > 10:
            log.error(
                "Redis unreachable (%s); deployment state is per worker until it is back", exc
            )
            self._failing_since = now

    def _up(self) -> None:
        if self._failing_since is not None:
            log.warning("Redis reachable again; deployment state is shared again")
            self._failing_since = None

    async def acquire(
        self, name: str, limits: Limits, slot: str, *, retry: bool, now: float | None = None
    ) -> Admission:
        now = time.time() if now is None else now
        try:
            self._client()
            admitted, refusal, retry_in = await self._acquire(
                keys=self._keys(name),
                args=[
                    now,
                    limits.max_concurrency,
                    limits.lease,
                    int(retry),
                    slot,
                    limits.retry_ratio,
                    limits.retry_floor,
                    BUDGET_BUCKET,
                    BUDGET_BUCKETS,
                    STATE_TTL,
                ],
            )
        except (RedisError, OSError) as exc:
            self._down(exc)
            return await self._fallback.acquire(name, limits, slot, retry=retry, now=now)
        self._up()
        if admitted:
            return Admission(True)
        return Admission(False, Refusal(refusal.decode()), float(retry_in))

    async def release(
        self, name: str, limits: Limits, slot: str, result: Result, *, now: float | None = None
    ) -> None:
        now = time.time() if now is None else now
        try:
            self._client()
            await self._release(
                keys=self._keys(name),
                args=[
                    now,
                    limits.max_concurrency,
                    slot,
                    result.value,
                    limits.threshold,
                    limits.cooldown,
                    limits.close_after,
                    STATE_TTL,
                ],
            )
        except (RedisError, OSError) as exc:
            self._down(exc)
            await self._fallback.release(name, limits, slot, result, now=now)

    async def renew(self, held: dict[str, tuple[Limits, list[str]]]) -> None:
        now = time.time()
        try:
            async with self._client().pipeline(transaction=False) as pipe:
                for name, (limits, slots) in held.items():
                    if slots:
                        slots_key = self._keys(name)[1]
                        pipe.zadd(slots_key, {s: now + limits.lease for s in slots}, xx=True)
                        pipe.expire(slots_key, math.ceil(limits.lease * 4))
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self._down(exc)
            await self._fallback.renew(held)

    async def snapshot(self, name: str, limits: Limits, *, now: float | None = None) -> Snapshot:
        now = time.time() if now is None else now
        state, slots, _ = self._keys(name)
        client = self._client()
        fields = await client.hmget(state, "mode", "limit", "failures", "open_until", "reason")
        in_flight = await client.zcount(slots, now, "+inf")
        mode, limit, failures, open_until, reason = (
            v.decode() if v is not None else None for v in fields
        )
        mode = mode or "closed"
        open_for = max(0.0, float(open_until or 0) - now) if mode == "open" else 0.0
        return Snapshot(
            mode,
            min(float(limit or limits.max_concurrency), limits.max_concurrency),
            in_flight,
            int(failures or 0),
            open_for,
            reason or "",
        )

    async def reset(self, name: str) -> None:
        await self._client().delete(*self._keys(name))
