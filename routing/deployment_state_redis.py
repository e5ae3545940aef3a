"""The deployment state in Redis, shared by every worker and host.

Each operation is one Lua script (atomic on the server, one round trip) implementing the
same rules as `LocalDeploymentState`; keys expire on their own. A grant made by any worker
is published on one channel; each worker listens with one connection and wakes its own
waiters (routing/grant_listener.py), so waiting requests do not poll Redis.

If Redis cannot be reached the worker falls back to its own in-process state for the
duration and says so loudly: routing keeps working (each worker then judges deployments on
what it sees itself) rather than failing every call.
"""

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis
from redis.exceptions import RedisError

from core.redis_client import redis_client
from routing.deployment_state import (
    BUDGET_BUCKET,
    BUDGET_BUCKETS,
    CUT,
    FLOOR,
    Admission,
    Departure,
    Limits,
    LocalDeploymentState,
    Refusal,
    Result,
    Snapshot,
)
from routing.grant_listener import grant_listener
from routing.slot_policy import ANYONE, DEFAULT_HOLD, Claim, queue_retry_after

log = logging.getLogger("sluice.state")

STATE_TTL = 86_400  # an idle deployment's state is forgotten after a day
WAITER_SILENCE = 5.0  # seconds without its worker's sweep after which a waiter is passed over

# KEYS: state, slots, budget, held, batch slots, interactive queue, batch queue, waiters,
# members waiting (interactive), members waiting (batch), service counters, waiters last
# heard of (each worker's sweep vouches for its own every second: a dead worker's waiters
# fall silent and are passed over).
# ARGV[1..6]: now, key base (for each member's own queue), grant channel, max concurrency,
# lease, reserve; then each script's own.
_PRELUDE = """
local now, base, channel = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local maxc, lease, reserve = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local K_STATE, K_SLOTS, K_BUDGET, K_HELD, K_BATCH = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local K_QUEUE = {interactive = KEYS[6], batch = KEYS[7]}
local K_WAITER = KEYS[8]
local K_MEMBERS = {interactive = KEYS[9], batch = KEYS[10]}
local K_SERVICE, K_HEARD = KEYS[11], KEYS[12]
local BUDGET_WIDTH, BUDGET_BUCKETS = %(width)s, %(buckets)s
local SILENCE = %(silence)s

local function split(text)
  local out = {}
  for part in string.gmatch(text, '([^|]*)|?') do out[#out + 1] = part end
  return out
end

local function member_queue(class, member) return base .. ':wq:' .. class .. ':' .. member end

local function service_of(member) return tonumber(redis.call('HGET', K_SERVICE, member) or '0') end

local function state()
  local st = redis.call('HMGET', K_STATE, 'mode', 'open_until', 'half_successes', 'limit')
  return st[1] or 'closed', tonumber(st[2] or '0'), tonumber(st[3] or '0'),
         math.min(tonumber(st[4] or maxc), maxc)
end

local function allowed_slots()
  local mode, open_until, half, limit = state()
  if mode == 'open' then return 0 end
  local allowed = math.floor(limit)
  if mode == 'half_open' then allowed = math.min(allowed, 1 + half) end
  return allowed
end

local function batch_cap(allowed)
  if allowed <= 0 then return 0 end
  local kept = math.max(0, math.min(allowed - 1, math.ceil(allowed * reserve - 1e-9)))
  return allowed - kept
end

local function count_attempt(retry)
  local bucket = math.floor(now / BUDGET_WIDTH)
  redis.call('HINCRBY', K_BUDGET, (retry and 'r:' or 'f:') .. bucket, 1)
  local stale = {}
  for b = bucket - 2 * BUDGET_BUCKETS, bucket - BUDGET_BUCKETS do
    stale[#stale + 1] = 'f:' .. b
    stale[#stale + 1] = 'r:' .. b
  end
  redis.call('HDEL', K_BUDGET, unpack(stale))
  redis.call('EXPIRE', K_BUDGET, math.ceil(BUDGET_WIDTH * BUDGET_BUCKETS * 2))
end

local function purge_expired_slots()
  local expired = redis.call('ZRANGEBYSCORE', K_SLOTS, '-inf', now)
  for i = 1, #expired do
    redis.call('ZREM', K_SLOTS, expired[i])
    redis.call('ZREM', K_BATCH, expired[i])
    redis.call('HDEL', K_HELD, expired[i])
  end
end

-- waiter info: class|member|until|estimate|retry
local function remove_waiter(slot)
  local info = redis.call('HGET', K_WAITER, slot)
  if not info then return nil end
  local w = split(info)
  local class, member = w[1], w[2]
  redis.call('HDEL', K_WAITER, slot)
  redis.call('ZREM', K_HEARD, slot)
  redis.call('ZREM', K_QUEUE[class], slot)
  redis.call('ZREM', member_queue(class, member), slot)
  if redis.call('HINCRBY', K_MEMBERS[class], member, -1) <= 0 then
    redis.call('HDEL', K_MEMBERS[class], member)
  end
  return w
end

local function waiting_member(member)
  return redis.call('HEXISTS', K_MEMBERS.interactive, member) == 1
      or redis.call('HEXISTS', K_MEMBERS.batch, member) == 1
end

local function join(slot, class, member, until_, estimate, retry)
  if not waiting_member(member) then
    local level = nil
    for _, c in ipairs({'interactive', 'batch'}) do
      for _, m in ipairs(redis.call('HKEYS', K_MEMBERS[c])) do
        local s = service_of(m)
        if level == nil or s < level then level = s end
      end
    end
    if level == nil then level = tonumber(redis.call('HGET', K_STATE, 'last_served') or '0') end
    if service_of(member) < level then redis.call('HSET', K_SERVICE, member, level) end
  end
  redis.call('HSET', K_WAITER, slot,
             table.concat({class, member, until_, estimate, retry and '1' or '0'}, '|'))
  redis.call('ZADD', K_QUEUE[class], now, slot)
  redis.call('ZADD', K_HEARD, now, slot)
  redis.call('ZADD', member_queue(class, member), now, slot)
  redis.call('EXPIRE', member_queue(class, member), %(ttl)s)
  redis.call('HINCRBY', K_MEMBERS[class], member, 1)
end

-- The member's oldest live waiter in a class (dropping the ones whose time ran out, and
-- those of a worker gone silent).
local function oldest_of(class, member)
  local q = member_queue(class, member)
  while true do
    local first = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
    if #first == 0 then return nil end
    local info = redis.call('HGET', K_WAITER, first[1])
    local heard = tonumber(redis.call('ZSCORE', K_HEARD, first[1]) or '0')
    if info and tonumber(split(info)[3]) >= now and heard >= now - SILENCE then
      return first[1], tonumber(first[2])
    end
    if info then remove_waiter(first[1]) else redis.call('ZREM', q, first[1]) end
  end
end

local function fairest(class)
  local best, best_service, best_since = nil, nil, nil
  for _, member in ipairs(redis.call('HKEYS', K_MEMBERS[class])) do
    local slot, since = oldest_of(class, member)
    if slot then
      local s = service_of(member)
      if best == nil or s < best_service or (s == best_service and since < best_since) then
        best, best_service, best_since = slot, s, since
      end
    end
  end
  return best
end

local function grant(slot)
  local w = remove_waiter(slot)
  local class, member, estimate = w[1], w[2], tonumber(w[4])
  redis.call('ZADD', K_SLOTS, now + lease, slot)
  if class == 'batch' then redis.call('ZADD', K_BATCH, now + lease, slot) end
  redis.call('HSET', K_HELD, slot, table.concat({class, member, estimate, now}, '|'))
  local served = service_of(member)
  redis.call('HSET', K_STATE, 'last_served', served)
  redis.call('HSET', K_SERVICE, member, served + estimate)
  count_attempt(w[5] == '1')
end

-- Grant free slots while an eligible request waits; publish who got one (but `quiet`).
local function dispatch(quiet)
  local mode, open_until = state()
  if mode == 'open' then
    if now < open_until then return {} end
    redis.call('HSET', K_STATE, 'mode', 'half_open', 'half_successes', 0)
  end
  purge_expired_slots()
  local allowed = allowed_slots()
  local granted, woken = {}, {}
  while redis.call('ZCARD', K_SLOTS) < allowed do
    local slot = nil
    if redis.call('HLEN', K_MEMBERS.interactive) > 0 then slot = fairest('interactive') end
    if not slot and redis.call('HLEN', K_MEMBERS.batch) > 0
       and redis.call('ZCARD', K_BATCH) < batch_cap(allowed) then
      slot = fairest('batch')
    end
    if not slot then break end
    grant(slot)
    granted[#granted + 1] = slot
    if slot ~= quiet then woken[#woken + 1] = slot end
  end
  if #woken > 0 then redis.call('PUBLISH', channel, table.concat(woken, ' ')) end
  return granted
end

local function keep(ttl)
  for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], ttl) end
end
"""

# ARGV[7..]: retry, slot, retry ratio, retry floor, priority, member, estimate, wait until
_ACQUIRE = """
local retry, slot = ARGV[7] == '1', ARGV[8]
local ratio, floor_ = tonumber(ARGV[9]), tonumber(ARGV[10])
local class, member, estimate = ARGV[11], ARGV[12], tonumber(ARGV[13])
local wait_until = tonumber(ARGV[14])
local mode, open_until = state()
if mode == 'open' and now < open_until then
  return {0, 'breaker', tostring(open_until - now), redis.call('HGET', K_STATE, 'reason') or ''}
end
if retry then
  local bucket = math.floor(now / BUDGET_WIDTH)
  local fields = {}
  for b = bucket - BUDGET_BUCKETS + 1, bucket do
    fields[#fields + 1] = 'f:' .. b
    fields[#fields + 1] = 'r:' .. b
  end
  local counts = redis.call('HMGET', K_BUDGET, unpack(fields))
  local firsts, retries = 0, 0
  for i = 1, #counts, 2 do
    firsts = firsts + tonumber(counts[i] or '0')
    retries = retries + tonumber(counts[i + 1] or '0')
  end
  if retries >= math.max(floor_, ratio * firsts) then return {0, 'budget', '0'} end
end
local position = redis.call('ZCARD', K_QUEUE[class])
-- As sent: a number turned back into text keeps 14 digits, and could fall before `now`.
join(slot, class, member, wait_until > now and ARGV[14] or ARGV[1], estimate, retry)
dispatch(slot)
keep(%(ttl)s)
if redis.call('ZSCORE', K_SLOTS, slot) then return {1, '', '0'} end
if wait_until > now then return {0, 'queued', tostring(position)} end
remove_waiter(slot)
mode = state()
if mode == 'half_open' then
  return {0, 'breaker', '0', redis.call('HGET', K_STATE, 'reason') or ''}
end
return {0, 'concurrency', '0'}
"""

# ARGV[7..]: slot, result, threshold, cooldown, close after, service ('' when unknown),
# repeat ('1': the call reached this deployment before). Returns 1, or 2 when congested.
_RELEASE = """
local slot, result = ARGV[7], ARGV[8]
local threshold, cooldown, close_after = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local service, repeat_ = tonumber(ARGV[12]), ARGV[13] == '1'
redis.call('ZREM', K_SLOTS, slot)
redis.call('ZREM', K_BATCH, slot)
local held = redis.call('HGET', K_HELD, slot)
local since = now
if held then
  redis.call('HDEL', K_HELD, slot)
  local h = split(held)
  since = tonumber(h[4])
  if result == 'success' then
    local hold = tonumber(redis.call('HGET', K_STATE, 'hold') or '%(hold)s')
    redis.call('HSET', K_STATE, 'hold', 0.8 * hold + 0.2 * math.max(0, now - since))
  end
  if service then redis.call('HINCRBYFLOAT', K_SERVICE, h[2], service - tonumber(h[3])) end
end
local congested = false
if result ~= 'neutral' then
  local st = redis.call('HMGET', K_STATE, 'mode', 'failures', 'half_successes', 'limit',
                        'streak', 'reason', 'open_until', 'cut_at')
  local mode, reason = st[1] or 'closed', st[6] or ''
  local failures, half = tonumber(st[2] or '0'), tonumber(st[3] or '0')
  local limit = math.min(tonumber(st[4] or maxc), maxc)
  local streak, open_until = tonumber(st[5] or '0'), tonumber(st[7] or '0')
  local cut_at = tonumber(st[8] or '0')
  if result == 'success' then
    failures = 0
    if mode == 'half_open' then
      half = half + 1
      if half >= close_after then mode, reason = 'closed', '' end
    end
    streak = streak + 1
    if streak >= math.floor(limit) then limit, streak = math.min(maxc, limit + 1), 0 end
  else
    local counts = not repeat_
    if result == 'capacity' and mode == 'closed' then
      if since < cut_at then
        congested = true
      elseif limit > %(floor)s then
        limit = math.max(%(floor)s, math.min(limit - 1, math.floor(limit * %(cut)s + 0.5)))
        cut_at, streak = now, 0
        congested = true
      end
      if congested then counts = false end
    end
    if counts then failures = failures + 1 end
    if threshold > 0 and (result == 'misconfigured' or mode == 'half_open'
                          or (counts and failures >= threshold)) then
      mode, open_until, failures, half, reason = 'open', now + cooldown, 0, 0, result
    end
  end
  redis.call('HSET', K_STATE, 'mode', mode, 'failures', failures, 'half_successes', half,
             'limit', limit, 'streak', streak, 'reason', reason, 'open_until', open_until,
             'cut_at', cut_at)
end
dispatch(nil)
keep(%(ttl)s)
return congested and 2 or 1
"""

# ARGV[7]: slot
_LEAVE = """
local slot = ARGV[7]
local w = remove_waiter(slot)
if not w and redis.call('ZSCORE', K_SLOTS, slot) then return {1, 0, 0, '0'} end
local class = w and w[1] or 'batch'
local hold = redis.call('HGET', K_STATE, 'hold') or '%(hold)s'
return {0, redis.call('ZCARD', K_QUEUE[class]), allowed_slots(), hold}
"""

# ARGV[7..]: the slots this worker is waiting for. Vouches for them, hands out slots whose
# leases ran out, and answers which of those slots are granted (a lost message costs a
# waiter one sweep).
_SWEEP = """
for i = 7, #ARGV do redis.call('ZADD', K_HEARD, 'XX', now, ARGV[i]) end
dispatch(nil)
local granted, lost = {}, {}
for i = 7, #ARGV do
  if redis.call('ZSCORE', K_SLOTS, ARGV[i]) then granted[#granted + 1] = ARGV[i]
  elseif redis.call('HEXISTS', K_WAITER, ARGV[i]) == 0 then lost[#lost + 1] = ARGV[i] end
end
return {granted, lost}
"""

_SNAPSHOT = """
local st = redis.call('HMGET', K_STATE, 'mode', 'limit', 'failures', 'open_until', 'reason')
local oldest = nil
for _, class in ipairs({'interactive', 'batch'}) do
  local first = redis.call('ZRANGE', K_QUEUE[class], 0, 0, 'WITHSCORES')
  if #first > 0 and (oldest == nil or tonumber(first[2]) < oldest) then
    oldest = tonumber(first[2])
  end
end
return {st[1] or 'closed', st[2] or tostring(maxc), st[3] or '0', st[4] or '0', st[5] or '',
        redis.call('ZCOUNT', K_SLOTS, now, '+inf'), redis.call('ZCOUNT', K_BATCH, now, '+inf'),
        redis.call('ZCARD', K_QUEUE.interactive), redis.call('ZCARD', K_QUEUE.batch),
        tostring(oldest and now - oldest or 0)}
"""


def _script(body: str) -> str:
    values = {
        "width": BUDGET_BUCKET,
        "buckets": BUDGET_BUCKETS,
        "ttl": STATE_TTL,
        "hold": DEFAULT_HOLD,
        "silence": WAITER_SILENCE,
        "floor": FLOOR,
        "cut": CUT,
    }
    return (_PRELUDE + body) % values


_SCRIPTS = {
    name: _script(body)
    for name, body in (
        ("acquire", _ACQUIRE),
        ("release", _RELEASE),
        ("leave", _LEAVE),
        ("sweep", _SWEEP),
        ("snapshot", _SNAPSHOT),
    )
}


MOVE_CHECK_SECONDS = 1.0  # how often a waiter checks that its queue is still the live one


@dataclass
class _Waiting:
    """A call queued here: enough to queue it again elsewhere."""

    name: str
    limits: Limits
    claim: Claim
    retry: bool
    until: float  # wall clock: queued until then
    local: bool  # in the in-process fallback (Redis was down when it queued or since)
    lost: bool = False  # Redis no longer knows it (restarted without its data)
    refused: bool = False  # queued again, and refused (breaker, budget): stop waiting


class RedisDeploymentState:
    def __init__(self, url: str, prefix: str = "sluice") -> None:
        self.url = url
        self.prefix = prefix
        self.channel = f"{prefix}:grants"
        self._scripts: dict[int, dict[str, Any]] = {}  # per client (and so per loop)
        self._fallback = LocalDeploymentState()
        self._failing_since: float | None = None
        # Waiters survive Redis going and coming back: each is queued where grants come
        # from now (Redis, or this worker's fallback), moved when that changes.
        self._queued: dict[str, _Waiting] = {}
        self._local_slots: set[str] = set()  # granted by the fallback: released there

    def _base(self, name: str) -> str:
        # The hash tag keeps a deployment's keys on one Redis Cluster slot.
        return f"{self.prefix}:dep:{{{name}}}"

    def _keys(self, name: str) -> list[str]:
        base = self._base(name)
        parts = (
            "state",
            "slots",
            "budget",
            "held",
            "batch",
            "queue:interactive",
            "queue:batch",
            "waiters",
            "members:interactive",
            "members:batch",
            "service",
            "heard",
        )
        return [f"{base}:{part}" for part in parts]

    def _client(self) -> redis.Redis:
        client = redis_client(self.url)
        if id(client) not in self._scripts:
            self._scripts[id(client)] = {
                name: client.register_script(source) for name, source in _SCRIPTS.items()
            }
        return client

    async def _run(self, script: str, name: str, limits: Limits, now: float, *args: Any) -> Any:
        client = self._client()
        try:
            result = await self._scripts[id(client)][script](
                keys=self._keys(name),
                args=[
                    now,
                    self._base(name),
                    self.channel,
                    limits.max_concurrency,
                    limits.lease,
                    limits.reserve,
                    *args,
                ],
            )
        except (RedisError, OSError) as exc:
            self._down(exc)
            raise
        self._up()
        return result

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
        self,
        name: str,
        limits: Limits,
        slot: str,
        *,
        retry: bool,
        claim: Claim = ANYONE,
        wait_until: float | None = None,
        now: float | None = None,
    ) -> Admission:
        now = time.time() if now is None else now
        args = (int(retry), slot, limits.retry_ratio, limits.retry_floor)
        args += (claim.priority, claim.member, claim.estimate, wait_until or 0)
        waiting = _Waiting(name, limits, claim, retry, wait_until or 0.0, local=False)
        try:
            if wait_until is not None:
                # Listen before joining: a grant published in between is not missed.
                await grant_listener(self).expect(name, limits, slot)
            admitted, refusal, detail, *why = await self._run("acquire", name, limits, now, *args)
        except (RedisError, OSError):
            grant_listener(self).forget(slot)
            admission = await self._fallback.acquire(
                name, limits, slot, retry=retry, claim=claim, wait_until=wait_until, now=now
            )
            if admission.admitted:
                self._local_slots.add(slot)
            elif admission.queued:
                waiting.local = True
                self._queued[slot] = waiting
            return admission
        if admitted:
            grant_listener(self).forget(slot)
            return Admission(True)
        reason = refusal.decode()
        if reason == "queued":
            self._queued[slot] = waiting
            return Admission(False, Refusal.CONCURRENCY, queued=True, position=int(detail))
        grant_listener(self).forget(slot)
        why_open = why[0].decode() if why else ""
        return Admission(False, Refusal(reason), float(detail), reason=why_open)

    async def wait(self, name: str, slot: str, within: float) -> bool:
        """Waits where the grant can come from, and moves with it: to this worker's own
        state when Redis goes away (the calls in flight there are released into it), back
        to Redis when it returns, and into Redis's queue again when Redis lost it."""
        end = time.monotonic() + within
        while (left := end - time.monotonic()) > 0:
            waiting = self._queued.get(slot)
            if waiting is None or waiting.refused:
                return False
            step = min(left, MOVE_CHECK_SECONDS)
            if waiting.local:
                granted = self._fallback_holds(name, waiting.limits, slot) or (
                    await self._fallback.wait(name, slot, step)
                )
            else:
                granted = await grant_listener(self).wait(slot, step)
            if granted or await self._move(slot, waiting):
                self._queued.pop(slot, None)
                if self._fallback_holds(name, waiting.limits, slot):
                    self._local_slots.add(slot)
                return True
        return False

    def _fallback_holds(self, name: str, limits: Limits, slot: str) -> bool:
        return slot in self._fallback._get(name, limits).slots

    async def _move(self, slot: str, waiting: _Waiting) -> bool:
        """Queue the waiter again where grants come from now; whether it got a slot."""
        name, limits = waiting.name, waiting.limits
        if not waiting.local and (self._failing_since is not None or waiting.lost):
            grant_listener(self).forget(slot)
            if waiting.lost and self._failing_since is None:
                log.warning("Redis lost queued call %s; queueing it again", slot)
                return await self._requeue(slot, waiting)
            admission = await self._fallback.acquire(
                name,
                limits,
                slot,
                retry=waiting.retry,
                claim=waiting.claim,
                wait_until=waiting.until,
            )
            waiting.local = True
            waiting.refused = not (admission.admitted or admission.queued)
            return admission.admitted
        if waiting.local and await self._reachable():
            departure = await self._fallback.leave(name, limits, slot)
            if departure.granted:
                return True
            return await self._requeue(slot, waiting)
        return False

    async def _requeue(self, slot: str, waiting: _Waiting) -> bool:
        self._queued.pop(slot, None)
        admission = await self.acquire(
            waiting.name,
            waiting.limits,
            slot,
            retry=waiting.retry,
            claim=waiting.claim,
            wait_until=waiting.until,
        )
        if not (admission.admitted or admission.queued):
            waiting.refused = True
            self._queued[slot] = waiting
        return admission.admitted

    async def _reachable(self) -> bool:
        """Whether Redis answers again (checked by a waiter queued in the fallback)."""
        if self._failing_since is None:
            return True
        try:
            async with asyncio.timeout(MOVE_CHECK_SECONDS):
                await self._client().ping()
        except (RedisError, OSError, TimeoutError):
            return False
        self._up()
        return True

    async def leave(
        self, name: str, limits: Limits, slot: str, *, now: float | None = None
    ) -> Departure:
        now = time.time() if now is None else now
        grant_listener(self).forget(slot)
        waiting = self._queued.pop(slot, None)
        if waiting is not None and waiting.local:
            return self._local_departure(slot, await self._fallback.leave(name, limits, slot))
        try:
            granted, ahead, allowed, hold = await self._run("leave", name, limits, now, slot)
        except (RedisError, OSError):
            return self._local_departure(
                slot, await self._fallback.leave(name, limits, slot, now=now)
            )
        if granted:
            return Departure(granted=True)
        return Departure(False, queue_retry_after(int(ahead), int(allowed), float(hold)))

    def _local_departure(self, slot: str, departure: Departure) -> Departure:
        if departure.granted:
            self._local_slots.add(slot)
        return departure

    async def release(
        self,
        name: str,
        limits: Limits,
        slot: str,
        result: Result,
        *,
        service: float | None = None,
        repeat: bool = False,
        now: float | None = None,
    ) -> bool:
        now = time.time() if now is None else now
        if slot in self._local_slots:  # granted while Redis was away: freed where it was
            self._local_slots.discard(slot)
            return await self._fallback.release(
                name, limits, slot, result, service=service, repeat=repeat, now=now
            )
        args = (slot, result.value, limits.threshold, limits.cooldown, limits.close_after)
        args += ("" if service is None else service, int(repeat))
        try:
            answer = await self._run("release", name, limits, now, *args)
        except (RedisError, OSError):
            return await self._fallback.release(
                name, limits, slot, result, service=service, repeat=repeat, now=now
            )
        return int(answer) == 2

    async def sweep(
        self, name: str, limits: Limits, slots: Sequence[str] = (), *, now: float | None = None
    ) -> list[str]:
        """Hand out slots whose leases ran out; which of `slots` are granted."""
        now = time.time() if now is None else now
        granted, lost = await self._run("sweep", name, limits, now, *slots)
        for slot in lost:  # its wait loop queues it again
            waiting = self._queued.get(slot.decode())
            if waiting is not None and not waiting.local:
                waiting.lost = True
        return [s.decode() for s in granted]

    async def renew(self, held: dict[str, tuple[Limits, list[str]]]) -> None:
        now = time.time()
        if self._local_slots:
            await self._fallback.renew(held)
        try:
            async with self._client().pipeline(transaction=False) as pipe:
                for name, (limits, slots) in held.items():
                    if slots:
                        keys = self._keys(name)
                        leases = {s: now + limits.lease for s in slots}
                        for key in (keys[1], keys[4]):  # all slots, batch slots
                            pipe.zadd(key, leases, xx=True)
                            pipe.expire(key, math.ceil(limits.lease * 4))
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self._down(exc)
            if not self._local_slots:
                await self._fallback.renew(held)

    async def snapshot(self, name: str, limits: Limits, *, now: float | None = None) -> Snapshot:
        now = time.time() if now is None else now
        row = await self._run("snapshot", name, limits, now)
        mode, limit, failures, open_until, reason = (v.decode() for v in row[:5])
        in_flight, batch, waiting_i, waiting_b = (int(v) for v in row[5:9])
        return Snapshot(
            mode,
            min(float(limit), limits.max_concurrency),
            in_flight,
            int(failures),
            max(0.0, float(open_until) - now) if mode == "open" else 0.0,
            reason,
            batch_in_flight=batch,
            waiting_interactive=waiting_i,
            waiting_batch=waiting_b,
            oldest_wait=float(row[9]),
        )

    async def reset(self, name: str) -> None:
        await self._client().delete(*self._keys(name))
