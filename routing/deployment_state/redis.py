"""The deployment state in Redis, shared by every worker and host.

Each operation is one Lua script (atomic on the server, one round trip) implementing the
same rules as `LocalDeploymentState`; keys expire on their own. A grant made by any worker
is published on one channel, and a batch slot asked back for an interactive call on
another; each worker listens with one connection and wakes its own waiters and holders
(grant_listener.py), so neither polls Redis.

If Redis cannot be reached the worker falls back to its own in-process state for the
duration and says so loudly: routing keeps working (each worker then judges deployments on
what it sees itself) rather than failing every call.
"""

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as redis
from redis.exceptions import RedisError

from core.fleet import LIVE_WITHIN, worker_name
from core.lua import Scripts, lua_source
from core.redis_client import redis_client
from core.redis_down import RedisDownPolicy
from routing.deployment_state.grant_listener import grant_listener
from routing.deployment_state.interface import (
    Admission,
    Departure,
    Limits,
    Refusal,
    Result,
    Snapshot,
)
from routing.deployment_state.local import LocalDeploymentState
from routing.deployment_state.rules import LUA_CONSTANTS, WAITER_SILENCE
from routing.deployment_state.slot_policy import ANYONE, Claim, queue_retry_after

log = logging.getLogger("sluice.state")

__all__ = ["WAITER_SILENCE", "RedisDeploymentState"]

# Each operation is one script: the shared prelude (keys, the queue, the dispatch) and its
# own part.
SCRIPTS = Scripts(
    {
        name: lua_source(Path(__file__).parent, ("prelude", name), LUA_CONSTANTS)
        for name in ("acquire", "release", "leave", "sweep", "snapshot")
    }
)

MOVE_CHECK_SECONDS = 1.0  # how often a waiter checks that its queue is still the live one


@dataclass
class _Waiting:
    """A call queued here: enough to queue it again elsewhere."""

    name: str
    limits: Limits
    claim: Claim
    retry: bool
    until: float  # wall clock: queued until then
    deadline: float | None  # wall clock: the call's answer is due by then
    local: bool  # in the in-process fallback (Redis was down when it queued or since)
    lost: bool = False  # Redis no longer knows it (restarted without its data)
    refused: bool = False  # queued again, and refused (breaker, budget): stop waiting


class RedisDeploymentState:
    def __init__(self, url: str, prefix: str = "sluice") -> None:
        self.url = url
        self.prefix = prefix
        self.channel = f"{prefix}:grants"
        # While Redis is away each worker takes its share of a deployment's limit: the
        # workers that renewed slots in Redis in the last minute (counted at each renewal).
        self.workers_key = f"{prefix}:dep-workers"
        self.worker = worker_name()
        self._workers = 1
        self._fallback = LocalDeploymentState(workers=lambda: self._workers)
        # Open: while Redis is away, this worker judges deployments on what it sees itself.
        self.policy = RedisDownPolicy(log, open_means="deployment state is per worker")
        # Waiters survive Redis going and coming back: each is queued where grants come
        # from now (Redis, or this worker's fallback), moved when that changes.
        self._queued: dict[str, _Waiting] = {}
        self._local_slots: set[str] = set()  # granted by the fallback: released there
        # Slots Redis granted to this worker, not yet released: when waiters move to the
        # fallback, it counts them as taken (the streams holding them are still running).
        self._held_here: dict[str, set[str]] = {}
        self._key_lists: dict[str, list[str]] = {}  # each deployment's, made once

    def _base(self, name: str) -> str:
        # The hash tag keeps a deployment's keys on one Redis Cluster slot.
        return f"{self.prefix}:dep:{{{name}}}"

    def _keys(self, name: str) -> list[str]:
        keys = self._key_lists.get(name)
        if keys is None:
            keys = self._key_lists[name] = self._make_keys(name)
        return keys

    def _make_keys(self, name: str) -> list[str]:
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
            "preemptible",
            "preempting",
            "demand",
        )
        return [f"{base}:{part}" for part in parts]

    def _client(self) -> redis.Redis:
        return redis_client(self.url)

    async def _run(self, script: str, name: str, limits: Limits, now: float, *args: Any) -> Any:
        try:
            result = await SCRIPTS.run(
                self.url,
                script,
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
            self.policy.failed(exc)
            raise
        self.policy.recovered()
        return result

    async def acquire_slot(
        self,
        name: str,
        limits: Limits,
        slot: str,
        *,
        retry: bool,
        claim: Claim = ANYONE,
        wait_until: float | None = None,
        deadline: float | None = None,
        now: float | None = None,
    ) -> Admission:
        now = time.time() if now is None else now
        args: tuple[float | str, ...] = (int(retry), slot, limits.retry_ratio, limits.retry_floor)
        args += (claim.priority, claim.member, claim.estimate, wait_until or 0)
        args += (int(claim.preemptible), deadline or 0)
        waiting = _Waiting(name, limits, claim, retry, wait_until or 0.0, deadline, local=False)
        try:
            if wait_until is not None:
                # Listen before joining: a grant published in between is not missed.
                await grant_listener(self).expect(name, limits, slot)
            admitted, refusal, detail, *why = await self._run("acquire", name, limits, now, *args)
        except (RedisError, OSError):
            grant_listener(self).forget(slot)
            self._fallback.occupy(name, limits, sorted(self._held_here.get(name, ())))
            admission = await self._fallback.acquire_slot(
                name,
                limits,
                slot,
                retry=retry,
                claim=claim,
                wait_until=wait_until,
                deadline=deadline,
                now=now,
            )
            if admission.admitted:
                self._local_slots.add(slot)
            elif admission.queued:
                waiting.local = True
                self._queued[slot] = waiting
            return admission
        if admitted:
            grant_listener(self).forget(slot)
            self._held(name, slot)
            return Admission(True)
        reason = refusal.decode()
        if reason == "queued":
            self._queued[slot] = waiting
            until = float(why[0]) if why else waiting.until
            return Admission(
                False, Refusal.CONCURRENCY, queued=True, position=int(detail), until=until
            )
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
                else:
                    self._held(name, slot)
                return True
        return False

    def _fallback_holds(self, name: str, limits: Limits, slot: str) -> bool:
        return slot in self._fallback._get(name, limits).slots

    def _held(self, name: str, slot: str) -> None:
        self._held_here.setdefault(name, set()).add(slot)

    async def _move(self, slot: str, waiting: _Waiting) -> bool:
        """Queue the waiter again where grants come from now; whether it got a slot."""
        name, limits = waiting.name, waiting.limits
        if not waiting.local and (self.policy.down or waiting.lost):
            grant_listener(self).forget(slot)
            if waiting.lost and not self.policy.down:
                log.warning("Redis lost queued call %s; queueing it again", slot)
                return await self._requeue(slot, waiting)
            self._fallback.occupy(name, limits, sorted(self._held_here.get(name, ())))
            admission = await self._fallback.acquire_slot(
                name,
                limits,
                slot,
                retry=waiting.retry,
                claim=waiting.claim,
                wait_until=waiting.until,
                deadline=waiting.deadline,
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
        admission = await self.acquire_slot(
            waiting.name,
            waiting.limits,
            slot,
            retry=waiting.retry,
            claim=waiting.claim,
            wait_until=waiting.until,
            deadline=waiting.deadline,
        )
        if not (admission.admitted or admission.queued):
            waiting.refused = True
            self._queued[slot] = waiting
        return admission.admitted

    async def _reachable(self) -> bool:
        """Whether Redis answers again (checked by a waiter queued in the fallback)."""
        if not self.policy.down:
            return True
        try:
            async with asyncio.timeout(MOVE_CHECK_SECONDS):
                await self._client().ping()
        except (RedisError, OSError, TimeoutError):
            return False
        self.policy.recovered()
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
            self._held(name, slot)
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
        took: float | None = None,
        now: float | None = None,
    ) -> bool:
        now = time.time() if now is None else now
        if slot in self._local_slots:  # granted while Redis was away: freed where it was
            self._local_slots.discard(slot)
            return await self._fallback.release(
                name, limits, slot, result, service=service, repeat=repeat, took=took, now=now
            )
        self._held_here.get(name, set()).discard(slot)
        args: tuple[float | str, ...] = (
            slot,
            result.value,
            limits.threshold,
            limits.cooldown,
            limits.close_after,
        )
        args += ("" if service is None else service, int(repeat), "" if took is None else took)
        try:
            answer = await self._run("release", name, limits, now, *args)
        except (RedisError, OSError):
            return await self._fallback.release(
                name, limits, slot, result, service=service, repeat=repeat, took=took, now=now
            )
        self._fallback.vacate(name, limits, slot)
        return int(answer) == 2

    async def sweep(
        self, name: str, limits: Limits, slots: Sequence[str] = (), *, now: float | None = None
    ) -> list[str]:
        """Hand out slots whose leases ran out; which of `slots` are granted."""
        now = time.time() if now is None else now
        try:
            granted, lost = await self._run("sweep", name, limits, now, *slots)
        except (RedisError, OSError):  # the waiters move to the fallback as they wake
            return await self._fallback.sweep(name, limits, slots, now=now)
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
                pipe.zadd(self.workers_key, {self.worker: now})
                pipe.zremrangebyscore(self.workers_key, "-inf", f"({now - LIVE_WITHIN}")
                pipe.expire(self.workers_key, math.ceil(LIVE_WITHIN * 2))
                pipe.zcard(self.workers_key)
                self._workers = int((await pipe.execute())[-1])
        except (RedisError, OSError) as exc:
            self.policy.failed(exc)
            if not self._local_slots:
                await self._fallback.renew(held)

    async def watch_preemption(self, name: str, slot: str) -> asyncio.Future[None]:
        """Heard on the listener's connection; the same future also answers for a slot
        granted by the in-process fallback while Redis is away."""
        asked = await grant_listener(self).expect_preemption(slot)
        return self._fallback.track_preemption(slot, asked)

    def forget_preemption(self, slot: str) -> None:
        self._fallback.forget_preemption(slot)
        with contextlib.suppress(RuntimeError):  # no running loop: nothing registered
            grant_listener(self).forget_preemption(slot)

    async def snapshot(self, name: str, limits: Limits, *, now: float | None = None) -> Snapshot:
        now = time.time() if now is None else now
        try:
            row = await self._run("snapshot", name, limits, now)
        except (RedisError, OSError):  # what this worker sees while Redis is away
            return await self._fallback.snapshot(name, limits, now=now)
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
        await self._fallback.reset(name)
        try:
            await self._client().delete(*self._keys(name))
        except (RedisError, OSError) as exc:
            self.policy.failed(exc)
