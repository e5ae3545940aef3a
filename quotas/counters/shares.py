"""A worker's share of each limit while Redis is away, and what it owes Redis after.

Redis counts every worker's calls on one counter. While it cannot be reached, each worker
counts on its own (the open policy); judged against the whole limit, N workers would admit
N times what was left. Instead each worker takes its share of what was left the last time
Redis answered it: (limit - the counter then) / the workers that reserved in Redis in the
last minute (core.fleet); a concurrency limit is split the same way, at least one call
a worker. What a worker counted on its own is added to Redis's counters once it answers
again (`Owed`), so the window or month goes on from what was really used.
"""

import math
from dataclasses import dataclass, field, replace

from quotas.counters.interface import Check

OWED_AT_MOST = 10_000  # deferred settlements kept while Redis is away; older ones dropped


def worker_share(check: Check, seen: float | None, workers: int) -> Check:
    """`check` as this worker judges it on its own: its share of what was left (`seen`:
    the counter at Redis's last answer here, None if it never answered for this key)."""
    workers = max(1, workers)
    if check.lease:
        return replace(check, limit=max(1.0, math.floor(check.limit / workers)))
    base = max(check.seed, check.seed if seen is None else seen)
    left = max(0.0, check.limit - base)
    return replace(check, limit=base + left / workers, seed=base)


@dataclass
class Owed:
    """What this worker counted on its own while Redis was away, to add to Redis after:
    amounts on counters (local reservations and settlements), and the settlements of
    reservations Redis holds in its ledger (replayed as they were, so the ledger entry is
    settled rather than swept)."""

    amounts: dict[str, float] = field(default_factory=dict)
    settles: list[tuple[list[tuple[str, float]], str, list[float]]] = field(default_factory=list)

    def add(self, deltas: list[tuple[str, float]]) -> None:
        for key, delta in deltas:
            self.amounts[key] = self.amounts.get(key, 0.0) + delta

    def add_settle(self, deltas: list[tuple[str, float]], slot: str, reserved: list[float]) -> None:
        self.settles.append((deltas, slot, reserved))
        del self.settles[:-OWED_AT_MOST]

    def __bool__(self) -> bool:
        return bool(self.amounts or self.settles)
