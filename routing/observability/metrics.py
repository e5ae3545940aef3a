"""Prometheus metrics for `GET /metrics` (answered in config/asgi.py before Django).

Counters and histograms are counted where every call ends anyway, in the audit writer's
`record` (a few dictionary additions, no I/O on the request path). Without Redis that
dictionary is the store (one worker). With Redis each worker adds its counts to one shared
hash every second (one pipelined round trip, off the request path), so every worker answers
a scrape with the same cluster-wide totals; gauges (effective limit, in flight, waiting,
breaker) are read at scrape time from the shared deployment state. So: scrape one instance
(or the load-balanced address), don't sum instances. Chosen over prometheus-client's
multiprocess mode, which needs a directory shared by one server's workers and cleared
between runs, counts per host only, and can't give the Redis-held gauges anyway.
"""

import asyncio
import hmac
import json
import logging
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from core.gc_schedule import full_collections
from routing.observability.loop_lag import lag, worker_label

log = logging.getLogger("sluice.metrics")

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
QUEUE_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)

# name -> (kind, help, label names)
COUNTERS = {
    "sluice_calls": ("calls that reached Sluice", ("route", "deployment", "outcome", "priority")),
    "sluice_upstream_attempts": (
        "attempts sent upstream, by error class (none: answered)",
        ("deployment", "error_class"),
    ),
    "sluice_tokens": (
        "tokens, in (prompt) and out (completion)",
        ("route", "deployment", "direction"),
    ),
    "sluice_cost_usd": ("cost in USD at the deployments' prices", ("route", "deployment")),
}
HISTOGRAMS = {
    "sluice_call_latency_seconds": ("call latency, by priority class", LATENCY_BUCKETS),
    "sluice_queue_wait_seconds": ("time queued for a slot, by priority class", QUEUE_BUCKETS),
}

# Per histogram: its bucket labels ("0.05", ..., "+Inf") and the keys its series are kept
# under (buckets are counted one each, not cumulatively, and added up when exposed).
_BOUND_LABELS = {n: [*(repr(b) for b in h[1]), "+Inf"] for n, h in HISTOGRAMS.items()}
_BUCKET_KEYS = {n: f"{n}:bucket" for n in HISTOGRAMS}
_SUM_KEYS = {n: f"{n}:sum" for n in HISTOGRAMS}


class Counts:
    """Series -> value; a series is (metric, label values). A histogram is kept as a count
    per bucket and its sum."""

    def __init__(self) -> None:
        self.values: defaultdict[tuple[str, tuple[str, ...]], float] = defaultdict(float)

    def add(self, metric: str, labels: tuple[str, ...], amount: float = 1.0) -> None:
        self.values[(metric, labels)] += amount

    def observe(self, metric: str, priority: str, seconds: float) -> None:
        """One count in the bucket that holds `seconds` (the exposition adds them up), and
        the sum: two dictionary additions."""
        bounds = HISTOGRAMS[metric][1]
        index = bisect_left(bounds, seconds)
        label = _BOUND_LABELS[metric][index]
        self.values[(_BUCKET_KEYS[metric], (priority, label))] += 1
        self.values[(_SUM_KEYS[metric], (priority,))] += seconds

    def drain(self) -> dict[tuple[str, tuple[str, ...]], float]:
        taken, self.values = self.values, defaultdict(float)
        return dict(taken)


_local = Counts()


def metrics_record(call: Any) -> None:
    """Count one finished call (a routing.observability.audit.CallLog). Cheap: dictionary
    additions."""
    route, served, priority = call.route, call.served_deployment, call.priority
    _local.add("sluice_calls", (route, served, call.outcome, priority or "none"))
    for attempt in call.attempts:
        if not attempt.skipped:
            _local.add("sluice_upstream_attempts", (attempt.deployment, attempt.ended_by or "none"))
    if call.tokens_in:
        _local.add("sluice_tokens", (route, served, "in"), call.tokens_in)
    if call.tokens_out:
        _local.add("sluice_tokens", (route, served, "out"), call.tokens_out)
    if call.cost:
        _local.add("sluice_cost_usd", (route, served), float(call.cost))
    klass = priority or "none"
    _local.observe("sluice_call_latency_seconds", klass, call.latency_ms / 1000)
    if call.queue_ms is not None:
        _local.observe("sluice_queue_wait_seconds", klass, call.queue_ms / 1000)


# --- Redis: one shared hash --------------------------------------------------------------


def _hash_key() -> str:
    return f"{settings.SLUICE_REDIS_PREFIX}:metrics"


def _field(series: tuple[str, tuple[str, ...]]) -> str:
    return json.dumps([series[0], list(series[1])], separators=(",", ":"))


async def push_to_redis() -> None:
    """Add this worker's counts since the last push to the shared hash."""
    from core.redis_client import redis_client

    taken = _local.drain()
    if not taken:
        return
    try:
        pipe = redis_client(settings.REDIS_URL).pipeline(transaction=False)
        for series, value in taken.items():
            pipe.hincrbyfloat(_hash_key(), _field(series), value)
        await pipe.execute()
    except Exception:
        # Put them back: counted at the next push.
        for series, value in taken.items():
            _local.values[series] += value
        raise


async def metrics_push_loop(every: float = 1.0) -> None:
    while True:
        await asyncio.sleep(every)
        try:
            await push_to_redis()
        except Exception as exc:
            log.error("metrics push to Redis failed (kept, retried): %s", exc)


async def _counts() -> dict[tuple[str, tuple[str, ...]], float]:
    if not settings.REDIS_URL:
        return dict(_local.values)
    from core.redis_client import redis_client

    raw = await redis_client(settings.REDIS_URL).hgetall(_hash_key())
    counts: dict[tuple[str, tuple[str, ...]], float] = {}
    for field, value in raw.items():
        name, labels = json.loads(field)
        counts[(name, tuple(labels))] = float(value)
    # This worker's counts not pushed yet (up to a second's worth).
    for series, value in _local.values.items():
        counts[series] = counts.get(series, 0.0) + value
    return counts


# --- Families --------------------------------------------------------------------------------


def _families(counts: dict[tuple[str, tuple[str, ...]], float]) -> list[Any]:
    families: list[Any] = []
    for name, (help_text, labels) in COUNTERS.items():
        family = CounterMetricFamily(name, help_text, labels=list(labels))
        for (metric, values), value in sorted(counts.items()):
            if metric == name:
                family.add_metric(list(values), value)
        families.append(family)
    for name, (help_text, _) in HISTOGRAMS.items():
        family = HistogramMetricFamily(name, help_text, labels=["priority"])
        classes = sorted({v[0] for (m, v) in counts if m == _BUCKET_KEYS[name]})
        for klass in classes:
            buckets, running = [], 0.0
            for label in _BOUND_LABELS[name]:
                running += counts.get((_BUCKET_KEYS[name], (klass, label)), 0.0)
                buckets.append((label, running))
            family.add_metric(
                [klass], buckets=buckets, sum_value=counts.get((_SUM_KEYS[name], (klass,)), 0.0)
            )
        families.append(family)
    return families


_BREAKER_STATES = ("closed", "half_open", "open")


async def _deployment_families() -> list[Any]:
    from routing.catalog.specs import catalog
    from routing.deployment_state import deployment_state

    specs = {d.name: d for route in (await catalog.routes()).values() for d in route.chain}
    state = deployment_state()
    effective = GaugeMetricFamily(
        "sluice_deployment_effective_limit",
        "adaptive concurrency limit now",
        labels=["deployment"],
    )
    configured = GaugeMetricFamily(
        "sluice_deployment_configured_limit", "configured max concurrency", labels=["deployment"]
    )
    in_flight = GaugeMetricFamily(
        "sluice_deployment_in_flight",
        "calls in flight, by priority",
        labels=["deployment", "priority"],
    )
    waiting = GaugeMetricFamily(
        "sluice_deployment_waiting",
        "calls waiting for a slot, by priority",
        labels=["deployment", "priority"],
    )
    breaker = GaugeMetricFamily(
        "sluice_deployment_breaker_state",
        "1 for the breaker's current state (closed, half_open, open)",
        labels=["deployment", "state"],
    )
    for name in sorted(specs):
        snap = await state.snapshot(name, specs[name].limits)
        effective.add_metric([name], snap.limit)
        configured.add_metric([name], specs[name].max_concurrency)
        in_flight.add_metric([name, "interactive"], snap.in_flight - snap.batch_in_flight)
        in_flight.add_metric([name, "batch"], snap.batch_in_flight)
        waiting.add_metric([name, "interactive"], snap.waiting_interactive)
        waiting.add_metric([name, "batch"], snap.waiting_batch)
        mode = snap.mode.replace("-", "_")
        for s in _BREAKER_STATES:
            breaker.add_metric([name, s], 1.0 if mode == s else 0.0)
    return [effective, configured, in_flight, waiting, breaker]


def _loop_families() -> list[Any]:
    """This worker's event-loop lag (routing/observability/loop_lag.py): per worker, not
    summed across the fleet, since each worker has a loop of its own."""
    worker = worker_label()
    lags = HistogramMetricFamily(
        "sluice_event_loop_lag_seconds",
        "how long a ready callback waited for this worker's event loop",
        labels=["worker"],
    )
    lags.add_metric([worker], buckets=lag.cumulative(), sum_value=lag.total)
    largest = GaugeMetricFamily(
        "sluice_event_loop_lag_max_seconds",
        "the longest wait for this worker's event loop since it started",
        labels=["worker"],
    )
    largest.add_metric([worker], lag.largest)
    pause = GaugeMetricFamily(
        "sluice_gc_full_pause_max_seconds",
        "the longest full garbage collection of this worker since it started (the event "
        "loop waits it out)",
        labels=["worker"],
    )
    pause.add_metric([worker], full_collections.longest)
    found = CounterMetricFamily(
        "sluice_gc_full_collected_objects",
        "unreachable objects this worker's full garbage collections found (cycles left "
        "behind: near zero on the request path)",
        labels=["worker"],
    )
    found.add_metric([worker], full_collections.found)
    return [lags, largest, pause, found]


class _Fixed:
    def __init__(self, families: Iterable[Any]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Any]:
        return self._families


async def metrics_text() -> bytes:
    """The exposition text of every Sluice metric."""
    families = _families(await _counts()) + _loop_families()
    try:
        families += await _deployment_families()
    except Exception as exc:  # the counters still answer when the state or database can't
        log.error("deployment gauges unavailable: %s", exc)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return generate_latest(registry)


# --- Access ------------------------------------------------------------------------------------

_LOOPBACK = {"127.0.0.1", "::1"}


def metrics_allowed(scope: dict[str, Any]) -> int:
    """200 when this request may read /metrics: the bearer token when one is set, else only
    a loopback client. 401 (bad or missing token) or 403 (not loopback) otherwise."""
    token = settings.SLUICE_METRICS_TOKEN
    if token:
        sent = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                sent = value
        expected = f"Bearer {token}".encode()
        return 200 if hmac.compare_digest(sent, expected) else 401
    client = scope.get("client") or ("", 0)
    return 200 if client[0] in _LOOPBACK else 403
