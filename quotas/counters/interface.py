"""The quota counters' interface: the checks a reservation makes and what it answers."""

from dataclasses import dataclass, field
from typing import Any, Protocol


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


@dataclass(frozen=True)
class LeaseLength:
    lease: float
    keep: float = 0.0  # seconds the store keeps the set of leases (default: twice a lease)


@dataclass
class Verdict:
    failed: int | None  # index of the first check that did not pass
    values: list[float] = field(default_factory=list)  # each counter, reservation included
    # Where the reservation waits until it is settled (a ledger lease for the worker to
    # renew while the call runs), when the backend keeps one: Redis, shared by workers.
    pending: tuple[str, LeaseLength] | None = field(default=None, compare=False)


class QuotaCounters(Protocol):
    async def reserve(
        self, checks: list[Check], slot: str, *, now: float | None = None
    ) -> Verdict: ...

    async def adjust(self, deltas: list[tuple[str, float]]) -> None: ...

    async def release(self, keys: list[str], slot: str) -> None: ...

    async def settle(
        self,
        deltas: list[tuple[str, float]],
        lease_keys: list[str],
        slot: str,
        *,
        reserved: list[float] | None = None,
    ) -> None: ...

    async def renew(self, held: dict[str, tuple[Any, list[str]]]) -> None: ...

    async def in_flight(self, keys: list[str]) -> list[int]:
        """Live leases of each concurrency counter (the console's "calls in flight")."""
        ...

    async def park(self, keys: list[str], slot: str, *, parked: bool) -> None:
        """Mark (or unmark) a lease as held by a call waiting in a deployment's queue."""

    async def take_back_ended(self) -> int:
        """At a worker's start: take back what workers of this host that have ended left
        reserved (they will never settle it). Answers how many reservations."""
        ...
