"""What the simulator knows about one model: capacity, what is in flight, counters, faults."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from simulator.config import FAULT_KINDS


@dataclass(slots=True)
class ModelState:
    name: str
    capacity: int  # max requests in flight; 0 = always full
    in_flight: int = 0
    requests: int = 0  # every request naming this model, admitted or not
    served: int = 0  # answers sent to the end
    peak_in_flight: int = 0
    capacity_errors: int = 0  # 503s
    rate_limited: int = 0  # 429s
    cancelled: int = 0  # admitted, then the client went away before the answer was complete
    # Keyed by the last 12 chars of the Authorization header: enough to tell keys apart in
    # tests without ever holding (or logging) a whole secret.
    per_key_in_flight: dict[str, int] = field(default_factory=dict)
    per_key_peak: dict[str, int] = field(default_factory=dict)
    # Injected faults: kind -> probability (> 0), in FAULT_KINDS order. `fault_plan` is the same
    # as a tuple, and empty when there is none: the only thing the hot path looks at.
    faults: dict[str, float] = field(default_factory=dict)
    fault_plan: tuple[tuple[str, float], ...] = ()
    retry_after: float | None = None  # for the rate_limit fault; None: --retry-after, else 1
    injected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAULT_KINDS, 0))
    # The W3C `traceparent` headers of the last requests that sent one (a caller's tracing).
    traceparents: deque[str] = field(default_factory=lambda: deque(maxlen=32))

    def set_faults(self, faults: dict[str, float]) -> None:
        """Replace the fault table (kinds and probabilities must already be valid)."""
        self.faults = {k: float(faults[k]) for k in FAULT_KINDS if faults.get(k)}
        self.fault_plan = tuple(self.faults.items())

    def acquire(self, key: str) -> None:
        self.in_flight += 1
        if self.in_flight > self.peak_in_flight:
            self.peak_in_flight = self.in_flight
        n = self.per_key_in_flight.get(key, 0) + 1
        self.per_key_in_flight[key] = n
        if n > self.per_key_peak.get(key, 0):
            self.per_key_peak[key] = n

    def release(self, key: str) -> None:
        self.in_flight -= 1
        n = self.per_key_in_flight[key] - 1
        if n:
            self.per_key_in_flight[key] = n
        else:
            del self.per_key_in_flight[key]

    def reset(self) -> None:
        """Zero the counters; capacity and what is in flight now stay (peaks restart from it)."""
        self.requests = self.served = self.cancelled = 0
        self.capacity_errors = self.rate_limited = 0
        self.injected = dict.fromkeys(FAULT_KINDS, 0)
        self.traceparents.clear()
        self.peak_in_flight = self.in_flight
        self.per_key_peak = dict(self.per_key_in_flight)

    def stats(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "in_flight": self.in_flight,
            "requests": self.requests,
            "served": self.served,
            "cancelled": self.cancelled,
            "peak_in_flight": self.peak_in_flight,
            "capacity_errors": self.capacity_errors,
            "rate_limited": self.rate_limited,
            "in_flight_per_key": dict(self.per_key_in_flight),
            "peak_in_flight_per_key": dict(self.per_key_peak),
            "faults": dict(self.faults),
            "retry_after": self.retry_after,
            "injected": dict(self.injected),
            "traceparents": list(self.traceparents),
        }
