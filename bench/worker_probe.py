"""Look inside a gateway worker under load: its event-loop lag (from `/metrics`) and where
its CPU goes (a py-spy sampling profile, attributed to the stage of the call each sample
was in). Used by bench/overhead.py."""

import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import httpx

LAG_BUCKET = re.compile(r'^sluice_event_loop_lag_seconds_bucket\{le="([^"]+)",worker="\d+"\} (\S+)')


def loop_lag_buckets(gateway: str) -> dict[float, float]:
    """Cumulative counts per upper bound of the worker that answered the scrape."""
    text = httpx.get(f"{gateway}/metrics", timeout=5).text
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        match = LAG_BUCKET.match(line)
        if match:
            buckets[float(match[1])] = float(match[2])
    return buckets


def lag_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Milliseconds: the q-quantile of the lags observed between two scrapes, interpolated
    within its bucket (as Prometheus' histogram_quantile)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if not total:
        return float("nan")
    rank, low, below = q * total, 0.0, 0.0
    for bound, running in zip(bounds, counts, strict=True):
        if running >= rank:
            if bound == float("inf"):
                return low * 1000
            inside = running - below
            return (low + (bound - low) * (rank - below) / inside if inside else bound) * 1000
        low, below = bound, running
    return low * 1000


def waited_for_cpu(pids: list[int]) -> tuple[float, int]:
    """Seconds the processes' main threads (the workers' event loops) were ready to run but
    waited for a CPU, and how many times they were given one (/proc/PID/schedstat): a
    loop's lag that no step of the gateway's caused, the host's other processes running."""
    waited = turns = 0
    for pid in pids:
        _, wait_ns, slices = map(int, Path(f"/proc/{pid}/schedstat").read_text().split())
        waited, turns = waited + wait_ns, turns + slices
    return waited / 1e9, turns


# A sample is in the audit stage when any frame is the audit writer's (its encoding and
# database writes included); otherwise in the stage of its innermost frame that names one.
# Samples in none (the event loop's own turns, thread switches) are "event loop".
AUDIT = ("audit and metrics", re.compile(r"routing/observability/"))
STAGES = [
    # The lean client (answers read whole) and aiohttp (streams).
    ("upstream client", re.compile(r"routing/request_path/upstream(_http)?\.py|aiohttp/")),
    ("auth (key lookup)", re.compile(r"accounts/")),
    ("limits and quotas", re.compile(r"quotas/")),
    ("deployment state (slots)", re.compile(r"routing/deployment_state/")),
    ("parse and encode", re.compile(r"request_path/(payloads|protocols|translation)|json/")),
    ("relay to the client", re.compile(r"request_path/(relay|stream_tap)|django/http/")),
    ("chain walk and answer", re.compile(r"routing/request_path/|routing/catalog/")),
    ("HTTP server (uvicorn, ASGI)", re.compile(r"uvicorn/|config/|django/core/handlers")),
]


def stage_of(frames: list[str]) -> str:
    if any(AUDIT[1].search(f) for f in frames):
        return AUDIT[0]
    for frame in reversed(frames):
        for stage, pattern in STAGES:
            if pattern.search(frame):
                return stage
    return "event loop"


def cpu_breakdown(pid: int, seconds: float, rate: int = 200) -> Counter[str] | None:
    """Samples per stage of `pid`'s threads while they were running (py-spy's default: idle
    waits are not sampled); None when py-spy is not installed or may not attach."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return None
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        done = subprocess.run(
            [spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate",
             str(rate), "--format", "raw", "--threads", "--nonblocking", "-o", out.name],
            capture_output=True,
        )  # fmt: skip
        if done.returncode != 0:
            return None
        stages: Counter[str] = Counter()
        for line in Path(out.name).read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            stages[stage_of(frames[1:])] += int(count)
        return stages
