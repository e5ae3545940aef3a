"""The worker's full garbage collections, on a clock instead of Python's own schedule.

CPython collects the youngest objects often and cheaply, and the whole heap whenever the
objects that survived into the oldest generation grew by a quarter. A full collection
visits every object the worker holds and serves nothing meanwhile: 20-30 ms at 64 calls in
flight, about a second with 10,000 open streams (some 140 objects each), and while streams
keep opening the quarter is reached every few seconds. The request path leaves no cycles
behind (tests/routing/test_proxy_handler_garbage.py), so those collections find next to
nothing: the young ones are kept, and the full one runs every `every` seconds instead.
What it took and found is exported on `/metrics`, so a worker that does leave cycles shows.

The young generation is collected once 10,000 more objects live than at its last
collection, not Python's 700. The count is of objects made less objects freed, and a call's
objects are freed as it ends: with Python's 700, the 64 calls in flight crossed it every
eighth call or so, and each collection scanned objects about to be freed anyway (6-9 % of a
worker's CPU at its ceiling, 20-35 µs a call). Objects that live on (open streams, caches
filling) still cross it and are collected as before, in pauses of a few milliseconds.
The middle generation's pauses are held near `MIDDLE_PAUSE`: it is collected after every
tenth young collection (Python's schedule) while they are short, after fewer when they grow.
What it holds is what survived since its last collection, scanned once either way before it
moves to the oldest, so fewer between makes each pause shorter for about the same work in
all: with 10,000 streams opening, one after every tenth took 25-105 ms (growing with the
heap) every two seconds, one after every second 10-20 ms every half second. Not always
the second: with 64 short calls in flight its pauses are short, and collected that often it
would find the same calls still in flight and scan them again and again.
"""

import asyncio
import gc
import time
from dataclasses import dataclass

# gc.set_threshold takes a C int: the oldest generation's count never reaches it.
_NEVER = 2**31 - 1
_YOUNG = 10_000
_python_thresholds = gc.get_threshold()
MIDDLE_PAUSE = 0.010  # seconds


class _MiddlePacer:
    """Lowers the middle generation's threshold (young collections between two of its
    own) while its pauses run longer than `MIDDLE_PAUSE`, raises it back to Python's while
    they run under a quarter of that."""

    def __init__(self) -> None:
        self.started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 1:
            return
        if phase == "start":
            self.started = time.perf_counter()
            return
        took = time.perf_counter() - self.started
        young, middle, old = gc.get_threshold()
        if took > MIDDLE_PAUSE and middle > 1:
            gc.set_threshold(young, max(1, middle // 2), old)
        elif took < MIDDLE_PAUSE / 4 and middle < _python_thresholds[1]:
            gc.set_threshold(young, middle + 1, old)


_pacer = _MiddlePacer()


@dataclass
class FullCollections:
    """This worker's full collections since it started."""

    count: int = 0
    seconds: float = 0.0  # all of them
    longest: float = 0.0
    found: int = 0  # unreachable objects collected


full_collections = FullCollections()


def settle_collector(full_every: float) -> None:
    """Freeze what is loaded so far (it lives as long as the process: never scanned
    again); with `full_every` > 0, leave the full collections to `collect_on_a_clock`
    and collect the young generation less often, the middle one paced by its pauses."""
    gc.collect()
    gc.freeze()
    if full_every > 0:
        gc.set_threshold(_YOUNG, _python_thresholds[1], _NEVER)
        if _pacer not in gc.callbacks:
            gc.callbacks.append(_pacer)


def hand_back() -> None:
    """Python's own schedule again (a worker's lifespan ended; tests run several)."""
    if _pacer in gc.callbacks:
        gc.callbacks.remove(_pacer)
    gc.set_threshold(*_python_thresholds)


def take_over(full_every: float) -> "asyncio.Task[None] | None":
    """What a worker or a batch runner does as it starts: `settle_collector`, and with
    `full_every` > 0 the clock's task, which it cancels as it stops (then `hand_back`)."""
    settle_collector(full_every)
    return asyncio.create_task(collect_on_a_clock(full_every)) if full_every > 0 else None


async def collect_on_a_clock(every: float) -> None:
    """Runs for the worker's life (started by the ASGI lifespan)."""
    while True:
        await asyncio.sleep(every)
        collect_all()


def collect_all() -> int:
    started = time.perf_counter()
    found = gc.collect()
    took = time.perf_counter() - started
    full_collections.count += 1
    full_collections.seconds += took
    full_collections.longest = max(full_collections.longest, took)
    full_collections.found += found
    return found
