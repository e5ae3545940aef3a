"""What every worker must agree on about a deployment: its circuit breaker, its adaptive
concurrency limit, the requests in flight to it (leases) and its retry budget.

One interface, two backends: `LocalDeploymentState` keeps it in this process (the embedded
default, one worker); `routing.deployment_state_redis.RedisDeploymentState` keeps it in
Redis with atomic Lua scripts, shared by every worker and host. Both implement the same
rules, written out once here in `_Rules` for the local backend and mirrored in Lua; the
same test suite runs against both.

The rules (DESIGN.md, seeds 000/001/004):
- breaker: `threshold` consecutive capacity/rate-limit/server errors open it for
  `cooldown` seconds; then it half-opens and lets 1 + (successes so far) probes in flight;
  `close_after` successes close it, one failure re-opens it. A misconfigured deployment
  (auth/config error) opens at once. A threshold of 0 switches the breaker off.
- adaptive limit: starts at max concurrency; a capacity error cuts it to 70 % (never below 1);
  a limit's worth of successes raises it by 1, up to max concurrency.
- leases: a request holds a slot for `lease` seconds, renewed while it runs, so slots held
  by a worker that died come free on their own.
- retry budget: retries may be at most `ratio` times the first attempts over the last minute (plus
  a small floor so a quiet deployment can still retry at all).
"""

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

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


@dataclass(frozen=True)
class Admission:
    admitted: bool
    refusal: Refusal | None = None
    retry_in: float = 0.0  # for a breaker refusal: seconds until it half-opens


@dataclass
class Snapshot:
    mode: str
    limit: float
    in_flight: int
    failures: int
    open_for: float  # seconds until half-open, 0 unless open
    reason: str


BUDGET_BUCKET = 10.0  # seconds
BUDGET_BUCKETS = 6  # one minute


class DeploymentState(Protocol):
    async def acquire(
        self, name: str, limits: Limits, slot: str, *, retry: bool, now: float | None = None
    ) -> Admission: ...

    async def release(
        self, name: str, limits: Limits, slot: str, result: Result, *, now: float | None = None
    ) -> None: ...

    async def renew(self, held: dict[str, tuple[Limits, list[str]]]) -> None: ...

    async def snapshot(
        self, name: str, limits: Limits, *, now: float | None = None
    ) -> Snapshot: ...

    async def reset(self, name: str) -> None: ...


@dataclass
class _Deployment:
    mode: str = "closed"
    failures: int = 0
    open_until: float = 0.0
    half_successes: int = 0
    limit: float | None = None
    streak: int = 0
    reason: str = ""
    slots: dict[str, float] = field(default_factory=dict)  # slot -> lease expiry
    budget: dict[int, list[int]] = field(default_factory=dict)  # bucket -> [firsts, retries]


class LocalDeploymentState:
    """In-process backend. Plain Python under the event loop: each method runs without an
    await inside, so it is atomic with respect to other requests of this worker."""

    def __init__(self) -> None:
        self._deployments: dict[str, _Deployment] = {}

    def _get(self, name: str, limits: Limits) -> _Deployment:
        d = self._deployments.get(name)
        if d is None:
            d = self._deployments[name] = _Deployment()
        if d.limit is None or d.limit > limits.max_concurrency:
            d.limit = float(limits.max_concurrency)
        return d

    async def acquire(
        self, name: str, limits: Limits, slot: str, *, retry: bool, now: float | None = None
    ) -> Admission:
        now = time.time() if now is None else now
        d = self._get(name, limits)
        if d.mode == "open":
            if now < d.open_until:
                return Admission(False, Refusal.BREAKER, d.open_until - now)
            d.mode, d.half_successes = "half_open", 0
        allowed = math.floor(d.limit or 1)
        if d.mode == "half_open":
            allowed = min(allowed, 1 + d.half_successes)
        if len(d.slots) >= allowed:
            # Expired leases only matter when the deployment looks full.
            d.slots = {s: exp for s, exp in d.slots.items() if exp > now}
            if len(d.slots) >= allowed:
                refusal = Refusal.BREAKER if d.mode == "half_open" else Refusal.CONCURRENCY
                return Admission(False, refusal)
        bucket = int(now // BUDGET_BUCKET)
        counts = d.budget.get(bucket)
        if counts is None:
            d.budget = {b: c for b, c in d.budget.items() if b > bucket - BUDGET_BUCKETS}
            counts = d.budget[bucket] = [0, 0]
        if retry:
            firsts = sum(c[0] for c in d.budget.values())
            retries = sum(c[1] for c in d.budget.values())
            if retries >= max(limits.retry_floor, limits.retry_ratio * firsts):
                return Admission(False, Refusal.BUDGET)
            counts[1] += 1
        else:
            counts[0] += 1
        d.slots[slot] = now + limits.lease
        return Admission(True)

    async def release(
        self, name: str, limits: Limits, slot: str, result: Result, *, now: float | None = None
    ) -> None:
        now = time.time() if now is None else now
        d = self._get(name, limits)
        d.slots.pop(slot, None)
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
            if result is Result.CAPACITY:
                d.limit = max(1.0, math.floor((d.limit or 1) * 0.7))
                d.streak = 0
            d.failures += 1
            if limits.threshold and (
                result is Result.MISCONFIGURED
                or d.mode == "half_open"
                or d.failures >= limits.threshold
            ):
                d.mode, d.open_until = "open", now + limits.cooldown
                d.failures = d.half_successes = 0
                d.reason = result.value

    async def renew(self, held: dict[str, tuple[Limits, list[str]]]) -> None:
        now = time.time()
        for name, (limits, slots) in held.items():
            d = self._get(name, limits)
            for slot in slots:
                if slot in d.slots:
                    d.slots[slot] = now + limits.lease

    async def snapshot(self, name: str, limits: Limits, *, now: float | None = None) -> Snapshot:
        now = time.time() if now is None else now
        d = self._get(name, limits)
        live = sum(1 for exp in d.slots.values() if exp > now)
        open_for = max(0.0, d.open_until - now) if d.mode == "open" else 0.0
        return Snapshot(d.mode, d.limit or 0, live, d.failures, open_for, d.reason)

    async def reset(self, name: str) -> None:
        self._deployments.pop(name, None)


class Leased(Protocol):
    lease: float


class Renewer(Protocol):
    async def renew(self, held: dict[str, tuple[Any, list[str]]]) -> None: ...


class LeaseKeeper:
    """Renews the leases this worker holds (deployment slots, quota concurrency), so a long
    call keeps its slot and a dead worker's slots expire. One task per worker and kind,
    every lease/3 seconds."""

    def __init__(self, state: Renewer) -> None:
        self.state = state
        self._held: dict[str, tuple[Leased, set[str]]] = {}
        self._task: asyncio.Task[None] | None = None

    def hold(self, name: str, limits: Leased, slot: str) -> None:
        self._held.setdefault(name, (limits, set()))[1].add(slot)
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run(), name="sluice-lease-keeper")

    def drop(self, name: str, slot: str) -> None:
        entry = self._held.get(name)
        if entry is not None:
            entry[1].discard(slot)
            if not entry[1]:
                del self._held[name]

    async def _run(self) -> None:
        while self._held:
            shortest = min(limits.lease for limits, _ in self._held.values())
            await asyncio.sleep(shortest / 3)
            held = {n: (limits, list(slots)) for n, (limits, slots) in self._held.items()}
            try:
                await self.state.renew(held)
            except Exception:
                log.exception("lease renewal failed; retrying next round")


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
