"""The deployment state's interface: what a backend is asked, and what it answers."""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from routing.deployment_state.slot_policy import ANYONE, Claim


class Result(StrEnum):
    SUCCESS = "success"
    CAPACITY = "capacity"  # at capacity or rate limited: cuts the limit, counts to the breaker
    FAILURE = "failure"  # server error, timeout, reset: counts to the breaker
    MISCONFIGURED = "misconfigured"  # auth/config: opens the breaker at once
    NEUTRAL = "neutral"  # the request's own fault (bad request, context length): no effect
    # Cut by the call's own deadline: a failure only if it had long enough to call it a hang
    # (rules.cut_was_a_hang), else neutral: the deadline, not the deployment, was short.
    DEADLINE = "deadline"


class Refusal(StrEnum):
    BREAKER = "breaker"
    CONCURRENCY = "concurrency"
    BUDGET = "budget"
    # The call's deadline leaves less than the deployment's recent latency: now, or once
    # the queue ahead of it has drained (it would be cut mid-call, the provider's work lost).
    DEADLINE = "deadline"


@dataclass(frozen=True)
class Limits:
    """A deployment's knobs, from its configuration."""

    max_concurrency: int
    threshold: int = 3
    cooldown: float = 300.0
    close_after: int = 3
    retry_ratio: float = 0.1
    retry_floor: int = 3
    # Seconds a slot is held without its worker renewing it (every third of it): a worker
    # that dies frees its slots within this long.
    lease: float = 6.0
    reserve: float = 0.2  # share of the slots batch may not take: kept for interactive


@dataclass(frozen=True)
class Admission:
    admitted: bool
    refusal: Refusal | None = None
    retry_in: float = 0.0  # breaker: seconds until it half-opens; deadline: the queue's wait
    queued: bool = False  # no slot yet: waiting in the deployment's queue
    position: int = 0  # requests of its class already waiting when it joined
    until: float = 0.0  # queued: epoch seconds the queue keeps it (no grant after that)
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


class DeploymentState(Protocol):
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
        """A slot now, or (with `wait_until`) a place in the queue until then; with a
        `deadline` (epoch seconds the answer is due by), only while what is left of it
        covers the deployment's recent latency (Refusal.DEADLINE otherwise)."""

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
        took: float | None = None,
        now: float | None = None,
    ) -> bool:
        """Free the slot; `service` is the call's weighted tokens, for fair sharing;
        `repeat`: this call already reached the deployment (its failure counted then);
        `took`: seconds to the answer's head (a success: the latency estimate learns it)
        or until the call's deadline cut it (Result.DEADLINE: was it a hang?).
        True when a capacity error was put down to Sluice's own concurrency (congested):
        the limit took it, the breaker did not, and the call may queue again."""

    async def renew(self, held: dict[str, tuple[Limits, list[str]]]) -> None: ...

    async def watch_preemption(self, name: str, slot: str) -> asyncio.Future[None]:
        """Before a preemptible claim asks for `slot`: a future resolved when the slot, once
        held, is asked back for a waiting interactive call (slot_policy rule 5). The holder
        then cancels its upstream request and releases the slot. Forget it afterwards."""

    def forget_preemption(self, slot: str) -> None: ...

    async def snapshot(
        self, name: str, limits: Limits, *, now: float | None = None
    ) -> Snapshot: ...

    async def reset(self, name: str) -> None: ...


async def granted_within(granted: asyncio.Future[None] | None, within: float) -> bool:
    """Whether a waiter's grant came within `within` seconds (the future stays usable)."""
    if granted is None:
        return False
    try:
        # asyncio.timeout, not wait_for, which on Python 3.11 drops the caller's
        # cancellation (a client that left) when it arrives with the grant.
        async with asyncio.timeout(within):
            await asyncio.shield(granted)
    except TimeoutError:
        return False
    return True
