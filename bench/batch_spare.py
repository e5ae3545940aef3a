"""A batch on spare capacity only, side by side with no batch, in one run.

    REDIS_URL=redis://127.0.0.1:6379/N .venv/bin/python bench/batch_spare.py \
        [--capacity 8] [--call-ms 100] [--load 0.5] [--reserve 0.2] [--lines 5000] \
        [--seconds 20] [--baseline main]

One deployment of `capacity` slots (a share `reserve` of them kept for interactive calls:
its `interactive_reserve`, 20 % by default) in front of a simulator model of the same
capacity, calls of `call-ms` ± 50 %. Interactive calls arrive (Poisson) at `load` (50 %)
of what the deployment serves. Three phases, each with the same arrivals:

  1. interactive alone, no batch;
  2. the same while a batch of `lines` lines runs (`manage.py run_batches`, one runner);
  3. with the batch still running, interactive arrivals for `seconds`/2 at `load`, then at
     twice that (the load doubles) for `seconds`/2; the same arrivals also run before the
     batch, as the baseline.

With `--baseline REF` the whole run is done twice, side by side: the gateway and the runner
from git ref REF (exported with git archive: "before"), then from this checkout ("after"),
each on its own simulator, database and Redis prefix.

Printed: interactive success (200) and p50/p99 queue wait (X-Sluice-Queue-Ms) with and
without the batch; the batch's throughput against the spare capacity it may use (the
deployment's slots minus the reserve minus interactive calls in flight, sampled every
20 ms from the shared state, divided by the measured call length); and, in phase 3, batch
calls in flight before and after the doubling and how long the runner took to back off
(from the doubling until batch in flight, averaged over 500 ms, first fell to the level it
then kept: the phase's late mean + 0.25). Also the batch calls cancelled at the upstream
while the batch ran (preempted: they gave their slot to an interactive call and ran again;
the work they had done is wasted; from the audit, the upstream time they used against all
the batch's) and the upstream's own "at capacity" answers (a slot handed on before the
upstream noticed the cancel shows there).

Needs REDIS_URL: the runner and the gateway are separate processes and only see each
other's calls in flight through the shared state.
"""

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, Stack, cpu_seconds, stack

CONFIG = """
[[upstreams]]
name = "sim"
base_url = "{simulator}/v1"
[[deployments]]
name = "primary"
upstream = "sim"
model = "m"
max_concurrency = {capacity}
interactive_reserve = {reserve}
breaker_threshold = 0
[[routes]]
name = "m"
chain = ["primary"]
timeout_seconds = 600
[[teams]]
slug = "bench"
[[applications]]
slug = "live"
team = "bench"
routes = ["m"]
[[applications]]
slug = "nightly"
team = "bench"
routes = ["m"]
default_priority = "batch"
[[members]]
email = "bench@example.com"
team = "bench"
"""


@dataclass
class Run:
    """One side's figures."""

    label: str
    alone: list["Call"] = field(default_factory=list)
    alone_samples: list = field(default_factory=list)
    beside: list["Call"] = field(default_factory=list)
    beside_samples: list = field(default_factory=list)
    surge_alone: list["Call"] = field(default_factory=list)
    surge: list["Call"] = field(default_factory=list)
    surge_samples: list = field(default_factory=list)
    batch_done: int = 0  # lines completed in phase 2
    window: float = 0.0  # phase 2's length
    lines_done: int = 0  # lines completed while the batch ran (phases 2 and 3)
    preempted: int = 0  # batch calls cancelled at the upstream meanwhile
    capacity_errors: int = 0  # the upstream's 503s meanwhile
    wasted_s: float = 0.0  # upstream time of preempted batch attempts (the audit)
    runner_cpu_s: float = 0.0  # the runner's CPU while the batch ran (phases 2 and 3)
    upstream_s: float = 0.0  # upstream time of every batch attempt


@dataclass
class Call:
    at: float
    ok: bool = False
    queue_ms: float = 0.0


def arrivals(rate: float, seconds: float, seed: int, start: float = 0.0) -> list[float]:
    rng, out, t = random.Random(seed), [], start
    while True:
        t += rng.expovariate(rate)
        if t >= start + seconds:
            return out
        out.append(t)


async def interactive(url: str, key: str, schedule: list[float]) -> list[Call]:
    body = {"model": "m", "messages": [{"role": "user", "content": "Now, please."}]}
    headers = {"Authorization": f"Bearer {key}"}

    async def one(session: aiohttp.ClientSession, at: float, start: float) -> Call:
        await asyncio.sleep(max(0.0, start + at - time.monotonic()))
        call = Call(at)
        try:
            async with session.post(url, json=body, headers=headers) as response:
                await response.read()
                call.ok = response.status == 200
                call.queue_ms = float(response.headers.get("X-Sluice-Queue-Ms", 0))
        except aiohttp.ClientError:
            pass
        return call

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.monotonic() + 0.1
        return await asyncio.gather(*(one(session, at, start) for at in schedule))


class Sampler:
    """Samples the deployment's shared state every 20 ms: (t, in flight, batch in flight,
    spare slots for batch, effective limit)."""

    def __init__(self, redis_url: str, prefix: str, capacity: int, reserve: float) -> None:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        import logging

        logging.getLogger("httpx").setLevel(logging.WARNING)
        from routing.deployment_state import Limits
        from routing.deployment_state.redis import RedisDeploymentState
        from routing.deployment_state.slot_policy import batch_cap

        self.state = RedisDeploymentState(redis_url, prefix)
        self.limits = Limits(max_concurrency=capacity, reserve=reserve)
        self.reserve = reserve
        self.batch_cap = batch_cap
        self.samples: list[tuple[float, int, int, float]] = []

    async def run(self, stop: asyncio.Event) -> None:
        start = time.monotonic()
        while not stop.is_set():
            snap = await self.state.snapshot("primary", self.limits)
            interactive = snap.in_flight - snap.batch_in_flight
            spare = max(0, self.batch_cap(int(snap.limit), self.reserve) - interactive)
            spare = min(spare, int(snap.limit) - interactive)
            now = time.monotonic() - start
            self.samples.append((now, snap.in_flight, snap.batch_in_flight, spare, snap.limit))
            await asyncio.sleep(0.02)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def completed(gateway: str, key: str, batch_id: str) -> int:
    import httpx

    r = httpx.get(f"{gateway}/v1/batches/{batch_id}", headers={"Authorization": f"Bearer {key}"})
    return r.json()["request_counts"]["completed"]


async def measured(sampler: Sampler | None, work) -> tuple[list[Call], list]:
    stop = asyncio.Event()
    task = asyncio.create_task(sampler.run(stop)) if sampler else None
    calls = await work
    stop.set()
    if task:
        await task
    samples = sampler.samples[:] if sampler else []
    if sampler:
        sampler.samples.clear()
    return calls, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=8)
    parser.add_argument("--call-ms", type=float, default=100)
    parser.add_argument("--load", type=float, default=0.5, help="interactive share of capacity")
    parser.add_argument("--reserve", type=float, default=0.2, help="interactive_reserve")
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--baseline", help="git ref of a 'before' run (say main)")
    args = parser.parse_args()
    if not os.environ.get("REDIS_URL"):
        raise SystemExit("bench/batch_spare.py needs REDIS_URL (see its docstring)")
    capacity_rps = args.capacity / (args.call_ms / 1000)
    print(
        f"Batch on spare capacity: deployment of {args.capacity} slots ({args.reserve:.0%} kept "
        f"for interactive), calls of {args.call_ms:.0f} ms ± 50 % ({capacity_rps:.0f}/s at "
        f"most); interactive Poisson at {args.load * capacity_rps:.0f}/s ({args.load:.0%}) "
        f"for {args.seconds:.0f} s per phase; a batch of {args.lines} lines; state Redis"
    )
    runs = []
    if args.baseline:
        with stack() as s:
            runs.append(measure(args, s, f"before ({args.baseline})", s.checkout(args.baseline)))
    with stack() as s:
        runs.append(measure(args, s, "after" if args.baseline else "this checkout", ROOT))
    report(args, runs)


def measure(args: argparse.Namespace, s: Stack, label: str, source: Path) -> Run:
    """The three phases with the gateway and the runner from `source`."""
    redis_url = os.environ["REDIS_URL"]
    capacity_rps = args.capacity / (args.call_ms / 1000)
    rate = args.load * capacity_rps
    run = Run(label)
    simulator = s.simulator(
        "--model", f"m:{args.capacity}", "--latency-ms", str(args.call_ms),
        "--latency-spread", "0.5", "--seed", str(args.seed),
    )  # fmt: skip
    live_key = s.configure(
        CONFIG.format(simulator=simulator, capacity=args.capacity, reserve=args.reserve),
        member="bench@example.com",
        application="live",
    )
    batch_key = s.issue_key("bench@example.com", "nightly")
    if source != ROOT:  # the baseline's own migrations too: it may have tables this lacks
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"],
            cwd=source, env=s.env, check=True, capture_output=True,
        )  # fmt: skip
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    env = {
        "SLUICE_REDIS_PREFIX": prefix,
        "SLUICE_BATCH_FILES_DIR": str(s.tmp / "files"),
        "SLUICE_BATCH_CPU_HEADROOM": "0",  # the slots, not the host's CPU, are measured here
    }
    s.env |= env
    gateway, _ = s.gateway(env=env, source=source)
    url = f"{gateway}/v1/chat/completions"
    sampler = Sampler(redis_url, prefix, args.capacity, args.reserve)

    schedule = arrivals(rate, args.seconds, args.seed)
    half = args.seconds / 2
    doubled = sorted(
        arrivals(rate, half, args.seed + 1) + arrivals(2 * rate, half, args.seed + 2, start=half)
    )
    asyncio.run(interactive(url, live_key, arrivals(rate, 2, args.seed - 1)))  # warm up
    run.alone, run.alone_samples = asyncio.run(
        measured(sampler, interactive(url, live_key, schedule))
    )
    run.surge_alone, _ = asyncio.run(measured(sampler, interactive(url, live_key, doubled)))

    # The batch: upload, create, and a runner beside the gateway.
    lines = "".join(
        json.dumps(
            {
                "custom_id": f"line-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": [{"role": "user", "content": f"{i}"}]},
            }
        )
        + "\n"
        for i in range(args.lines)
    )
    from openai import OpenAI

    client = OpenAI(base_url=f"{gateway}/v1", api_key=batch_key)
    source_file = client.files.create(file=("batch.jsonl", lines.encode()), purpose="batch")
    batch = client.batches.create(
        input_file_id=source_file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    runner = subprocess.Popen(
        [sys.executable, "manage.py", "run_batches"], cwd=source, env=s.env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        while completed(gateway, batch_key, batch.id) < 20:
            time.sleep(0.2)
        before = completed(gateway, batch_key, batch.id)
        upstream = upstream_stats(simulator)
        cpu = cpu_seconds([runner.pid])
        started = time.monotonic()
        run.beside, run.beside_samples = asyncio.run(
            measured(sampler, interactive(url, live_key, schedule))
        )
        run.window = time.monotonic() - started
        run.batch_done = completed(gateway, batch_key, batch.id) - before

        run.surge, run.surge_samples = asyncio.run(
            measured(sampler, interactive(url, live_key, doubled))
        )
        run.lines_done = completed(gateway, batch_key, batch.id) - before
        run.runner_cpu_s = cpu_seconds([runner.pid]) - cpu
        after = upstream_stats(simulator)
        run.preempted = after["cancelled"] - upstream["cancelled"]
        run.capacity_errors = after["capacity_errors"] - upstream["capacity_errors"]
    finally:
        client.batches.cancel(batch.id)
        runner.terminate()
        runner.wait(timeout=30)
    run.wasted_s, run.upstream_s = batch_upstream_seconds(s, batch.id)
    return run


WASTE_QUERY = """
from django.db.models import Sum
from routing.models import Attempt
sent = Attempt.objects.filter(call__batch_id="{batch_id}", skipped="")
total = sent.aggregate(s=Sum("duration_ms"))["s"] or 0
wasted = sent.filter(error_class="preempted").aggregate(s=Sum("duration_ms"))["s"] or 0
print(wasted / 1000, total / 1000)
"""


def batch_upstream_seconds(s: Stack, batch_id: str) -> tuple[float, float]:
    """From the audit: seconds of upstream time the batch's preempted attempts used, and
    all its attempts (the runner flushes its audit rows as it stops)."""
    out = s.manage("shell", "-c", WASTE_QUERY.format(batch_id=batch_id))
    wasted, total = out.split()[-2:]
    return float(wasted), float(total)


def upstream_stats(simulator: str) -> dict[str, int]:
    import httpx

    return httpx.get(f"{simulator}/stats").json()["models"]["m"]


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def report(args: argparse.Namespace, runs: list[Run]) -> None:
    half = args.seconds / 2
    width = 16

    def head(*columns: str) -> None:
        print(f"  {'':34}" + "".join(f"{c:>{width}}" for c in columns))

    def row(label: str, values: list[str]) -> None:
        print(f"  {label:34}" + "".join(f"{v:>{width}}" for v in values))

    def success(calls: list[Call]) -> str:
        return f"{sum(c.ok for c in calls) / len(calls):.2%}" if calls else "-"

    def wait(p: float) -> Callable[[list[Call]], str]:
        return lambda calls: f"{pct([c.queue_ms for c in calls], p):.0f}"

    print()
    if len(runs) > 1:
        head(*[r.label[: width - 1] for r in runs for _ in (0, 1)])
    head(*["no batch", "batch running"] * len(runs))
    for label, fn in (
        ("interactive calls", lambda c: str(len(c))),
        ("interactive success", success),
        ("interactive queue wait p50 (ms)", wait(50)),
        ("interactive queue wait p99 (ms)", wait(99)),
    ):
        row(label, [fn(calls) for r in runs for calls in (r.alone, r.beside)])
    for label, column in (
        ("mean calls in flight", 1),
        ("mean batch calls in flight", 2),
        ("mean effective limit", 4),
    ):
        values = [mean([x[column] for x in samples]) for r in runs
                  for samples in (r.alone_samples, r.beside_samples)]  # fmt: skip
        row(label, [f"{v:.2f}" for v in values])

    # The simulator's mean call length: Sluice's own time per call is left out, so the
    # spare capacity is if anything overstated.
    call_s = args.call_ms / 1000
    print(f"\nBatch while interactive runs at {args.load:.0%}:")
    head(*[r.label[: width - 1] for r in runs])
    spare = [mean([x[3] for x in r.beside_samples]) for r in runs]
    rps = [r.batch_done / r.window for r in runs]
    row("phase length (s)", [f"{r.window:.1f}" for r in runs])
    row("spare slots for batch (mean)", [f"{v:.2f}" for v in spare])
    row("spare capacity (calls/s)", [f"{v / call_s:.1f}" for v in spare])
    row("batch throughput (lines/s)", [f"{v:.1f}" for v in rps])
    row("batch / spare", [f"{b / (v / call_s):.0%}" for b, v in zip(rps, spare, strict=True)])
    print("  while the batch ran (phases 2 and 3):")
    row("  lines completed", [str(r.lines_done) for r in runs])
    row("  batch calls preempted", [str(r.preempted) for r in runs])
    row(
        "  preempted / batch calls sent",
        [f"{r.preempted / max(1, r.preempted + r.lines_done):.1%}" for r in runs],
    )
    row("  upstream 'at capacity' 503s", [str(r.capacity_errors) for r in runs])
    row(
        "  runner CPU per 1,000 lines (s)",
        [f"{r.runner_cpu_s / max(1, r.lines_done) * 1000:.1f}" for r in runs],
    )
    print("  over the whole batch run (the audit):")
    row("  batch upstream time (s)", [f"{r.upstream_s:.1f}" for r in runs])
    row("  of it preempted, wasted (s)", [f"{r.wasted_s:.1f}" for r in runs])
    row("  wasted share", [f"{r.wasted_s / max(r.upstream_s, 1e-9):.1%}" for r in runs])

    print(f"\nInteractive load doubles ({args.load:.0%} -> {2 * args.load:.0%}) at {half:.0f} s:")
    head(*[r.label[: width - 1] for r in runs])
    backs = [surge_figures(r, half) for r in runs]
    row("batch calls in flight before", [f"{b[0]:.2f}" for b in backs])
    row(f"batch calls in flight after ({half / 2:.0f} s)", [f"{b[1]:.2f}" for b in backs])
    row("time to back off (ms)", [f"{b[2] * 1000:.0f}" for b in backs])
    print("  after the doubling:")
    if len(runs) > 1:
        head(*[r.label[: width - 1] for r in runs for _ in (0, 1)])
    head(*["no batch", "batch running"] * len(runs))
    late = [[c for c in calls if c.at >= half] for r in runs for calls in (r.surge_alone, r.surge)]
    row("  interactive success", [success(calls) for calls in late])
    row("  interactive p99 queue wait (ms)", [wait(99)(calls) for calls in late])
    print("  batch calls in flight, 250 ms bins from 1 s before the doubling:")
    for r in runs:
        bins = []
        for k in range(-4, 12):
            start = half + k * 0.25
            inside = [x[2] for x in r.surge_samples if start <= x[0] < start + 0.25]
            bins.append(f"{mean(inside):.1f}")
        print(f"    {r.label[:20]:20}", " ".join(bins))


def surge_figures(run: Run, half: float) -> tuple[float, float, float]:
    """Batch in flight before and after the doubling, and the time it took to back off
    (until batch in flight, averaged over 500 ms, first came within 0.25 of the late mean)."""
    samples = run.surge_samples
    before = mean([x[2] for x in samples if x[0] < half])
    after = [x for x in samples if x[0] >= half]
    level = mean([x[2] for x in after if x[0] >= half * 1.5])
    back_off = float("nan")
    for i, sample in enumerate(after):
        if mean([x[2] for x in after[i : i + 25]]) <= level + 0.25:  # 500 ms
            back_off = sample[0] - half
            break
    return before, level, back_off


if __name__ == "__main__":
    main()
