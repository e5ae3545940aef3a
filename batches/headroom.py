"""The idle CPU a runner leaves on its host, so that interactive calls never queue for it.

A runner's niceness gives the gateway's threads the CPU first, but not the servers both
share (Redis, PostgreSQL, a local upstream): with a batch running flat out they are busy
with its lines when an interactive call needs them, and a host near full CPU makes every
wait longer (bench/batch_interactive.py at zero upstream latency: interactive p99 0.94x the
one without the batch beside 200 lines a second, 2.07x beside 1,500). So a runner with a
headroom to keep looks at the host's CPU every `WINDOW` seconds (/proc/stat) and paces the
lines it starts: below the headroom it cuts its pace to `CUT` of what it was, above it
raises it by `GROWTH`, and once the pace is well above what its slots let it start, it drops
the pace altogether. It never goes below `FLOOR` lines a second: a batch on a busy host is
slow, never stuck. Where /proc/stat cannot be read it starts lines as the slots allow.
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

WINDOW = 0.2  # seconds between looks at the host's CPU
CUT = 0.7
GROWTH = 1.25
FLOOR = 20.0  # lines a second, at least
BURST = 0.05  # seconds of pace a runner may start at once


def host_cpu() -> tuple[int, int] | None:
    """The host's idle and total CPU time since boot (clock ticks, all CPUs), or None."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(ticks) < 5:
        return None
    return ticks[3] + ticks[4], sum(ticks[:8])  # idle and iowait; guests are in user already


@dataclass
class Headroom:
    keep: float  # the share of the host's CPU to leave idle; 0: start as the slots allow
    read: Callable[[], tuple[int, int] | None] = host_cpu
    clock: Callable[[], float] = time.monotonic
    pace: float | None = None  # lines a second; None: not paced
    idle: float | None = None  # the host's idle share in the last window
    _tokens: float = 0.0
    _filled: float = 0.0
    _window: float = -WINDOW  # when the window began
    _sample: tuple[int, int] | None = None
    _started: int = 0  # lines started in the window

    def ready(self) -> bool:
        """Whether a line may start now."""
        return self._allowed() >= 1

    def allows(self, lines: int) -> int:
        """How many of `lines` the pace lets start now (none taken yet)."""
        return int(min(self._allowed(), lines))

    def take(self, lines: int) -> int:
        """How many of `lines` start now: those the pace allows."""
        lines = self.allows(lines)
        self._started += lines
        if self.pace is not None:
            self._tokens -= lines
        return lines

    def _allowed(self) -> float:
        if not self.keep:
            return math.inf
        now = self.clock()
        if now - self._window >= WINDOW:
            self._look(now)
        if self.pace is None:
            return math.inf
        burst = max(2.0, self.pace * BURST)
        self._tokens = min(burst, self._tokens + (now - self._filled) * self.pace)
        self._filled = now
        return self._tokens

    def _look(self, now: float) -> None:
        sample = self.read()
        elapsed = now - self._window
        started = self._started / elapsed if elapsed > 0 else 0.0
        # A longer gap between looks (the runner stopped, or had no line to start) tells
        # nothing of what its pace costs the host: the pace stays as it was.
        last = self._sample
        if elapsed <= 3 * WINDOW and sample and last and sample[1] > last[1]:
            self.idle = (sample[0] - last[0]) / (sample[1] - last[1])
            if self.idle < self.keep:
                self.pace = max(FLOOR, CUT * (started if self.pace is None else self.pace))
            elif self.pace is not None:
                self.pace *= GROWTH
                if self.pace > 2 * started + FLOOR:  # the slots, not the pace, hold it back
                    self.pace = None
        self._sample = sample
        self._window = now
        self._started = 0
