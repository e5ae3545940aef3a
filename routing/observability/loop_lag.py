"""How long a ready callback waits for this worker's event loop.

Every call in flight on a worker shares one event loop: a synchronous step anywhere (a
file write, a slow encode, a thread hop that waits for the GIL) delays all of them. The
probe asks to be woken every `INTERVAL` seconds and measures how late it wakes: how long a
callback that became ready then waited for the loop (uvloop's timers count in milliseconds,
so up to about a millisecond of a figure is the timer's rounding).
The figures are this worker's own (a worker's loop is not shared), exported on `/metrics`
as `sluice_event_loop_lag_seconds` with the worker's pid as a label.
"""

import asyncio
import os
import time
from bisect import bisect_left

INTERVAL = 0.02
BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip


class LoopLag:
    """Counts per bucket (not cumulative), their sum and the largest lag seen."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0
        self.largest = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds
        self.largest = max(self.largest, seconds)

    def cumulative(self) -> list[tuple[str, float]]:
        """(upper bound, count at or below it) pairs, as a Prometheus histogram has them."""
        buckets, running = [], 0
        for bound, count in zip([*map(repr, BUCKETS), "+Inf"], self.counts, strict=True):
            running += count
            buckets.append((bound, float(running)))
        return buckets


lag = LoopLag()


async def loop_lag_probe(interval: float = INTERVAL) -> None:
    """Runs for the worker's life (started by the ASGI lifespan)."""
    while True:
        due = time.perf_counter() + interval
        await asyncio.sleep(interval)
        lag.observe(max(0.0, time.perf_counter() - due))


def worker_label() -> str:
    return str(os.getpid())
