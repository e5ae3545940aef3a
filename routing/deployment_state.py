"""What every worker must agree on about a deployment: its circuit breaker, its adaptive
concurrency limit, the requests in flight to it (leases) and its retry budget.

One interface, two backends: `LocalDeploymentState` keeps it in this process (the embedded
default, one worker); `routing.deployment_state_redis.RedisDeploymentState` keeps it in
Redis with atomic Lua scripts, shared by every worker and host. Both implement the same
rules, written out once here in `_Rules` for the local backend and mirrored in Lua; the
same test suite runs against both.

The rules (DESIGN.md, seeds 000/001/004):
- adaptive limit: starts at max concurrency; a capacity error (or upstream rate limit) cuts
  it to 70 % (rounded, by at least one, never below the floor, 1), at most once per round
  trip as TCP does: only a call sent after the last cut can cut again; the errors of calls
  that were already in flight belong to the same congestion. A limit's worth of successes
  raises it by 1, up to max concurrency.
- own concurrency is not a breaker signal: a capacity error while the limit is above its
  floor, or of a call sent before the last cut, is "congested" (`release` says so: the call
  queues again for a slot at the lower limit) and leaves the breaker alone.
- breaker: `threshold` consecutive failures (no success between) open it for `cooldown`
  seconds, counting server errors, timeouts and resets, and capacity errors only once the
  limit is at its floor (the deployment fails even at the concurrency of one script). Each
  call counts once per deployment (`repeat`: its retries there do not count again), so no
  single call opens it. Then it half-opens and lets 1 + (successes so far) probes in
  flight; `close_after` successes close it, one failure re-opens it. A misconfigured
  deployment (auth/config error) opens at once. A threshold of 0 switches it off.
- leases: a request holds a slot for `lease` seconds, renewed while it runs, so slots held
  by a worker that died come free on their own.
- retry budget: retries may be at most `ratio` times the first attempts over the last minute (plus
  a small floor so a quiet deployment can still retry at all).
- queue: a request that finds no slot may wait for one; who gets a slot that frees up is
  routing/slot_policy.py's rule (interactive first, a reserve kept from batch, members
  served fairly). A grant takes the slot on the waiter's behalf before it wakes.
"""

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from routing.slot_policy import (
    ANYONE,
    BATCH,
    DEFAULT_HOLD,
    INTERACTIVE,
    Claim,
    Waiter,
    batch_cap,
    queue_retry_after,
)

log = logging.getLogger("sluice.state")


class Result(StrEnum):
    SUCCESS = "success"
    CAPACITY = "capacity"  # at capacity or rate limited: cuts the limit, counts to the breaker
    FAILURE = "failure"  # server error, timeout, reset: counts to the breaker
    MISCONFIGURED = "misconfigured"  # auth/config: opens the breaker at once
    NEUTRAL = "neutral"  # the request's own fault (bad request, context length): no effect


class Refusal(StrEnum):
    BREAKER = "breaker"
    CONCURRENCY = "concurrency"
    BUDGET = "budget"


@dataclass(frozen=True)
class Limits:
    """A deployment's knobs, from its configuration."""

    max_concurrency: int
    threshold: int = 3
    cooldown: float = 300.0
    close_after: int = 3
    retry_ratio: float = 0.1
    retry_floor: int = 3
    lease: float = 30.0
    reserve: float = 0.2  # share of the slots batch may not take: kept for interactive


@dataclass(frozen=True)
class Admission:
    admitted: bool
    refusal: Refusal | None = None
    retry_in: float = 0.0  # for a breaker refusal: seconds until it half-opens
    queued: bool = False  # no slot yet: waiting in the deployment's queue
    position: int = 0  # requests of its class already waiting when it joined
    reason: str = ""  # for a breaker refusal: the result that opened it


@dataclass(frozen=True)
class Departure:
    """A waiter leaving the queue without a grant (timed out, or its client left)."""

    granted: bool  # a slot came just as it gave up: it holds it, and must use or release it
    retry_in: int = 0  # seconds until a slot would probably have come


@dataclass
class Snapshot:
    mode: str
    limit: float
    in_flight: int
    failures: int
    open_for: float  # seconds until half-open, 0 unless open
    reason: str
    batch_in_flight: int = 0
    waiting_interactive: int = 0
    waiting_batch: int = 0
    oldest_wait: float = 0.0  # seconds the longest-waiting request has waited


FLOOR = 1.0  # the adaptive limit never goes below this
CUT = 0.7  # a capacity error's multiplicative cut
BUDGET_BUCKET = 10.0  # seconds
BUDGET_BUCKETS = 6  # one minute


class DeploymentState(Protocol):
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
        """A slot now, or (with `wait_until`) a place in the queue until then."""

    async def wait(self, name: str, slot: str, within: float) -> bool:
        """Whether a queued request was granted its slot within `within` seconds."""

    async def leave(
        self, name: str, limits: Limits, slot: str, *, now: float | None = None
    ) -> Departure: ...

    async def sweep(
        self, name: str, limits: Limits, slots: Sequence[str] = (), *, now: float | None = None
    ) -> list[str]: ...

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
        """Free the slot; `service` is the call's weighted tokens, for fair sharing;
        `repeat`: this call already reached the deployment (its failure counted then).
        True when a capacity error was put down to Sluice's own concurrency (congested):
        the limit took it, the breaker did not, and the call may queue again."""

    async def renew(self, held: dict[str, tuple[Limits, list[str]]]) -> None: ...

    async def snapshot(
        self, name: str, limits: Limits, *, now: float | None = None
    ) -> Snapshot: ...

    async def reset(self, name: str) -> None: ...


@dataclass(frozen=True)
class _Held:
    priority: str
    member: str
    estimate: float
    since: float


@dataclass
class _Deployment:
    mode: str = "closed"
    failures: int = 0
    open_until: float = 0.0
    half_successes: int = 0
    limit: float | None = None
    cut_at: float = 0.0  # when the limit was last cut
    streak: int = 0
    reason: str = ""
    slots: dict[str, float] = field(default_factory=dict)  # slot -> lease expiry
    budget: dict[int, list[int]] = field(default_factory=dict)  # bucket -> [firsts, retries]
    held: dict[str, _Held] = field(default_factory=dict)  # slot -> who holds it
    waiting: dict[str, Waiter] = field(default_factory=dict)  # slot -> waiter
    # priority -> member -> that member's waiters, oldest first
    queues: dict[str, dict[str, dict[str, Waiter]]] = field(
        default_factory=lambda: {INTERACTIVE: {}, BATCH: {}}
    )
    service: dict[str, float] = field(default_factory=dict)  # member -> virtual counter
    last_served: float = 0.0  # the counter of the member granted last
    hold: float = DEFAULT_HOLD  # seconds a call holds a slot (moving average)


class LocalDeploymentState:
    """In-process backend. Plain Python under the event loop: each method runs without an
    await inside, so it is atomic with respect to other requests of this worker."""

    def __init__(self) -> None:
        self._deployments: dict[str, _Deployment] = {}
        self._grants: dict[str, asyncio.Future[None]] = {}  # queued slot -> woken when granted

    def _get(self, name: str, limits: Limits) -> _Deployment:
        d = self._deployments.get(name)
        if d is None:
            d = self._deployments[name] = _Deployment()
        if d.limit is None or d.limit > limits.max_concurrency:
            d.limit = float(limits.max_concurrency)
        return d

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
        d = self._get(name, limits)
        if d.mode == "open":
            if now < d.open_until:
                return Admission(False, Refusal.BREAKER, d.open_until - now, reason=d.reason)
            d.mode, d.half_successes = "half_open", 0
        if retry and not self._budget_allows_retry(d, limits, now):
            return Admission(False, Refusal.BUDGET)
        position = self._waiting_count(d, claim.priority)
        until = wait_until or now
        self._join(d, Waiter(slot, claim.priority, claim.member, now, until, claim.estimate, retry))
        self._dispatch(d, limits, now)
        if slot in d.slots:
            return Admission(True)
        if wait_until is not None and wait_until > now:
            self._grants[slot] = asyncio.get_running_loop().create_future()
            return Admission(False, Refusal.CONCURRENCY, queued=True, position=position)
        self._remove(d, slot)
        if d.mode == "half_open":
            return Admission(False, Refusal.BREAKER, reason=d.reason)
        return Admission(False, Refusal.CONCURRENCY)

    async def wait(self, name: str, slot: str, within: float) -> bool:
        return await granted_within(self._grants.get(slot), within)

    async def leave(
        self, name: str, limits: Limits, slot: str, *, now: float | None = None
    ) -> Departure:
        now = time.time() if now is None else now
        self._grants.pop(slot, None)
        d = self._get(name, limits)
        waiter = self._remove(d, slot)
        if waiter is None and slot in d.slots:
            return Departure(granted=True)
        ahead = self._waiting_count(d, waiter.priority if waiter else BATCH)
        return Departure(False, queue_retry_after(ahead, self._allowed(d), d.hold))

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
        d = self._get(name, limits)
        d.slots.pop(slot, None)
        held = d.held.pop(slot, None)
        if held is not None:
            if result is Result.SUCCESS:  # how long an answer takes, for Retry-After
                d.hold = 0.8 * d.hold + 0.2 * max(0.0, now - held.since)
            if service is not None:
                d.service[held.member] = d.service.get(held.member, 0.0) + service - held.estimate
        congested = False
        if result is Result.SUCCESS:
            d.failures = 0
            if d.mode == "half_open":
                d.half_successes += 1
                if d.half_successes >= limits.close_after:
                    d.mode, d.reason = "closed", ""
            d.streak += 1
            if d.streak >= math.floor(d.limit or 1):
                d.limit = min(float(limits.max_concurrency), (d.limit or 1) + 1)
                d.streak = 0
        elif result is not Result.NEUTRAL:
            counts = not repeat
            if result is Result.CAPACITY and d.mode == "closed":
                since = held.since if held is not None else now
                limit = d.limit or FLOOR
                if since < d.cut_at:
                    congested = True  # sent before the last cut: that cut answered it
                elif limit > FLOOR:
                    d.limit, d.cut_at, d.streak = _cut(limit), now, 0
                    congested = True
                counts = counts and not congested
            if counts:
                d.failures += 1
            if limits.threshold and (
                result is Result.MISCONFIGURED
                or d.mode == "half_open"  # a probe failed
                or (counts and d.failures >= limits.threshold)
            ):
                d.mode, d.open_until = "open", now + limits.cooldown
                d.failures = d.half_successes = 0
                d.reason = result.value
        self._dispatch(d, limits, now)
        return congested

    async def renew(self, held: dict[str, tuple[Limits, list[str]]]) -> None:
        now = time.time()
        for name, (limits, slots) in held.items():
            d = self._get(name, limits)
            for slot in slots:
                if slot in d.slots:
                    d.slots[slot] = now + limits.lease

    async def sweep(
        self, name: str, limits: Limits, slots: Sequence[str] = (), *, now: float | None = None
    ) -> list[str]:
        """Hand out slots whose leases ran out (a worker died holding them); which of
        `slots` are granted."""
        d = self._get(name, limits)
        self._dispatch(d, limits, time.time() if now is None else now)
        return [s for s in slots if s in d.slots]

    async def snapshot(self, name: str, limits: Limits, *, now: float | None = None) -> Snapshot:
        now = time.time() if now is None else now
        d = self._get(name, limits)
        live = [s for s, exp in d.slots.items() if exp > now]
        open_for = max(0.0, d.open_until - now) if d.mode == "open" else 0.0
        waiting = [w for w in d.waiting.values() if w.until > now]
        return Snapshot(
            d.mode,
            d.limit or 0,
            len(live),
            d.failures,
            open_for,
            d.reason,
            batch_in_flight=sum(1 for s in live if self._is_batch(d, s)),
            waiting_interactive=sum(1 for w in waiting if w.priority == INTERACTIVE),
            waiting_batch=sum(1 for w in waiting if w.priority == BATCH),
            oldest_wait=max((now - w.since for w in waiting), default=0.0),
        )

    async def reset(self, name: str) -> None:
        self._deployments.pop(name, None)

    # --- the queue ---------------------------------------------------------------------

    @staticmethod
    def _allowed(d: _Deployment) -> int:
        if d.mode == "open":
            return 0
        allowed = math.floor(d.limit or 1)
        return min(allowed, 1 + d.half_successes) if d.mode == "half_open" else allowed

    @staticmethod
    def _is_batch(d: _Deployment, slot: str) -> bool:
        held = d.held.get(slot)
        return held is not None and held.priority == BATCH

    @staticmethod
    def _waiting_count(d: _Deployment, priority: str) -> int:
        return sum(len(q) for q in d.queues[priority].values())

    @staticmethod
    def _join(d: _Deployment, waiter: Waiter) -> None:
        """Queue a waiter; a member who was not waiting starts level with those who are."""
        member = waiter.member
        if all(member not in q for q in d.queues.values()):
            counters = [d.service.get(m, 0.0) for q in d.queues.values() for m in q]
            level = min(counters) if counters else d.last_served
            d.service[member] = max(d.service.get(member, 0.0), level)
        d.waiting[waiter.slot] = waiter
        d.queues[waiter.priority].setdefault(member, {})[waiter.slot] = waiter

    @staticmethod
    def _remove(d: _Deployment, slot: str) -> Waiter | None:
        waiter = d.waiting.pop(slot, None)
        if waiter is not None:
            members = d.queues[waiter.priority]
            del members[waiter.member][slot]
            if not members[waiter.member]:
                del members[waiter.member]
        return waiter

    def _dispatch(self, d: _Deployment, limits: Limits, now: float) -> None:
        """Grant free slots to waiters, in slot_policy's order, while any is eligible."""
        if d.mode == "open" and now >= d.open_until:
            d.mode, d.half_successes = "half_open", 0
        allowed = self._allowed(d)
        if len(d.slots) >= allowed:
            # Expired leases only matter when the deployment looks full.
            for slot in [s for s, exp in d.slots.items() if exp <= now]:
                del d.slots[slot]
                d.held.pop(slot, None)
        while len(d.slots) < allowed:
            waiter = self._next(d, limits, allowed, now)
            if waiter is None:
                break
            self._remove(d, waiter.slot)
            d.slots[waiter.slot] = now + limits.lease
            d.held[waiter.slot] = _Held(waiter.priority, waiter.member, waiter.estimate, now)
            d.last_served = d.service.get(waiter.member, 0.0)
            d.service[waiter.member] = d.last_served + waiter.estimate
            self._count_attempt(d, now, retry=waiter.retry)
            granted = self._grants.pop(waiter.slot, None)
            if granted is not None and not granted.done():
                granted.set_result(None)

    def _next(self, d: _Deployment, limits: Limits, allowed: int, now: float) -> Waiter | None:
        for priority in (INTERACTIVE, BATCH):
            members = d.queues[priority]
            if not members:
                continue
            if priority == BATCH:
                batch = sum(1 for s in d.slots if self._is_batch(d, s))
                if batch >= batch_cap(allowed, limits.reserve):
                    return None
            heads = []
            for queue in list(members.values()):
                head = next(iter(queue.values()))
                while head.until < now:  # gave up waiting without leaving (a dead worker)
                    self._remove(d, head.slot)
                    if not queue:
                        break
                    head = next(iter(queue.values()))
                else:
                    heads.append(head)
            if heads:
                return min(heads, key=lambda w: (d.service.get(w.member, 0.0), w.since))
        return None

    @staticmethod
    def _budget_allows_retry(d: _Deployment, limits: Limits, now: float) -> bool:
        recent = [c for b, c in d.budget.items() if b > int(now // BUDGET_BUCKET) - BUDGET_BUCKETS]
        firsts, retries = sum(c[0] for c in recent), sum(c[1] for c in recent)
        return retries < max(limits.retry_floor, limits.retry_ratio * firsts)

    @staticmethod
    def _count_attempt(d: _Deployment, now: float, *, retry: bool) -> None:
        bucket = int(now // BUDGET_BUCKET)
        counts = d.budget.get(bucket)
        if counts is None:
            d.budget = {b: c for b, c in d.budget.items() if b > bucket - BUDGET_BUCKETS}
            counts = d.budget[bucket] = [0, 0]
        counts[1 if retry else 0] += 1


def _cut(limit: float) -> float:
    """The limit after a capacity error: 70 %, rounded, by at least one, never below 1."""
    return max(FLOOR, min(limit - 1, math.floor(limit * CUT + 0.5)))


async def granted_within(granted: asyncio.Future[None] | None, within: float) -> bool:
    """Whether a waiter's grant came within `within` seconds (the future stays usable)."""
    if granted is None:
        return False
    try:
        await asyncio.wait_for(asyncio.shield(granted), within)
    except TimeoutError:
        return False
    return True


def state_from_settings() -> DeploymentState:
    from django.conf import settings

    if settings.REDIS_URL:
        from routing.deployment_state_redis import RedisDeploymentState

        return RedisDeploymentState(settings.REDIS_URL, settings.SLUICE_REDIS_PREFIX)
    return LocalDeploymentState()


_state: Any = None


def deployment_state() -> DeploymentState:
    """The process's backend, chosen by REDIS_URL."""
    global _state
    if _state is None:
        _state = state_from_settings()
    return _state
