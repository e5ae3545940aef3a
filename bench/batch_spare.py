"""A batch on spare capacity only, side by side with no batch, in one run.

    REDIS_URL=redis://127.0.0.1:6379/N .venv/bin/python bench/batch_spare.py \
        [--capacity 8] [--call-ms 100] [--lines 5000] [--seconds 20]

One deployment of `capacity` slots (20 % kept for interactive calls, Sluice's default) in
front of a simulator model of the same capacity, calls of `call-ms` ± 50 %. Interactive
calls arrive (Poisson) at 50 % of what the deployment serves. Three phases, each with the
same arrivals:

  1. interactive alone, no batch;
  2. the same while a batch of `lines` lines runs (`manage.py run_batches`, one runner);
  3. with the batch still running, interactive arrivals for `seconds`/2 at 50 %, then at
     100 % (the load doubles) for `seconds`/2; the same arrivals also run before the batch,
     as the baseline.

Printed: interactive success (200) and p50/p99 queue wait (X-Sluice-Queue-Ms) with and
without the batch; the batch's throughput against the spare capacity it may use (the
deployment's slots minus the reserve minus interactive calls in flight, sampled every
20 ms from the shared state, divided by the measured call length); and, in phase 3, batch
calls in flight before and after the doubling and how long the runner took to back off
(from the doubling until batch in flight, averaged over 100 ms, first fell to the level it
then kept: the phase's late mean + 0.5).

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
from dataclasses import dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, stack

CONFIG = """
[[upstreams]]
name = "sim"
base_url = "{simulator}/v1"
[[deployments]]
name = "primary"
upstream = "sim"
model = "m"
max_concurrency = {capacity}
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
RESERVE = 0.2


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

    def __init__(self, redis_url: str, prefix: str, capacity: int) -> None:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        import logging

        logging.getLogger("httpx").setLevel(logging.WARNING)
        from routing.deployment_state import Limits
        from routing.deployment_state.redis import RedisDeploymentState
        from routing.slot_policy import batch_cap

        self.state = RedisDeploymentState(redis_url, prefix)
        self.limits = Limits(max_concurrency=capacity, reserve=RESERVE)
        self.batch_cap = batch_cap
        self.samples: list[tuple[float, int, int, float]] = []

    async def run(self, stop: asyncio.Event) -> None:
        start = time.monotonic()
        while not stop.is_set():
            snap = await self.state.snapshot("primary", self.limits)
            interactive = snap.in_flight - snap.batch_in_flight
            spare = max(0, self.batch_cap(int(snap.limit), RESERVE) - interactive)
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
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:
        raise SystemExit("bench/batch_spare.py needs REDIS_URL (see its docstring)")
    capacity_rps = args.capacity / (args.call_ms / 1000)
    rate = 0.5 * capacity_rps

    with stack() as s:
        simulator = s.simulator(
            "--model", f"m:{args.capacity}", "--latency-ms", str(args.call_ms),
            "--latency-spread", "0.5", "--seed", str(args.seed),
        )  # fmt: skip
        live_key = s.configure(
            CONFIG.format(simulator=simulator, capacity=args.capacity),
            member="bench@example.com",
            application="live",
        )
        batch_key = s.issue_key("bench@example.com", "nightly")
        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        env = {"SLUICE_REDIS_PREFIX": prefix, "SLUICE_BATCH_FILES_DIR": str(s.tmp / "files")}
        s.env |= env
        gateway, _ = s.gateway(env=env)
        url = f"{gateway}/v1/chat/completions"
        sampler = Sampler(redis_url, prefix, args.capacity)
        print(
            f"Batch on spare capacity: deployment of {args.capacity} slots ({RESERVE:.0%} kept "
            f"for interactive), calls of {args.call_ms:.0f} ms ± 50 % ({capacity_rps:.0f}/s at "
            f"most); interactive Poisson at {rate:.0f}/s (50 %) for {args.seconds:.0f} s per "
            f"phase; a batch of {args.lines} lines; state Redis"
        )

        schedule = arrivals(rate, args.seconds, args.seed)
        half = args.seconds / 2
        doubled = sorted(
            arrivals(rate, half, args.seed + 1)
            + arrivals(2 * rate, half, args.seed + 2, start=half)
        )
        asyncio.run(interactive(url, live_key, arrivals(rate, 2, args.seed - 1)))  # warm up
        alone, alone_samples = asyncio.run(measured(sampler, interactive(url, live_key, schedule)))
        surge_alone, _ = asyncio.run(measured(sampler, interactive(url, live_key, doubled)))

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
        source = client.files.create(file=("batch.jsonl", lines.encode()), purpose="batch")
        batch = client.batches.create(
            input_file_id=source.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        runner = subprocess.Popen(
            [sys.executable, "manage.py", "run_batches"], cwd=ROOT, env=s.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            while completed(gateway, batch_key, batch.id) < 20:
                time.sleep(0.2)
            before = completed(gateway, batch_key, batch.id)
            started = time.monotonic()
            beside, beside_samples = asyncio.run(
                measured(sampler, interactive(url, live_key, schedule))
            )
            window = time.monotonic() - started
            batch_done = completed(gateway, batch_key, batch.id) - before

            surge, surge_samples = asyncio.run(
                measured(sampler, interactive(url, live_key, doubled))
            )
        finally:
            client.batches.cancel(batch.id)
            runner.terminate()
            runner.wait(timeout=30)

        report(args, alone, alone_samples, beside, beside_samples, batch_done, window)
        report_surge(surge, surge_samples, surge_alone, half)


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def report(args, alone, alone_samples, beside, beside_samples, batch_done, window) -> None:
    def success(calls: list[Call]) -> str:
        return f"{sum(c.ok for c in calls) / len(calls):.2%}"

    def wait(p: float) -> Callable[[list[Call]], str]:
        return lambda calls: f"{pct([c.queue_ms for c in calls], p):.0f}"

    print(f"\n  {'':32}{'no batch':>14}{'batch running':>16}")
    rows = [
        ("interactive calls", lambda c: str(len(c))),
        ("interactive success", success),
        ("interactive queue wait p50 (ms)", wait(50)),
        ("interactive queue wait p99 (ms)", wait(99)),
    ]
    for label, fn in rows:
        print(f"  {label:32}{fn(alone):>14}{fn(beside):>16}")
    for label, column in (
        ("mean calls in flight", 1),
        ("mean batch calls in flight", 2),
        ("mean effective limit", 4),
    ):
        a, b = mean([x[column] for x in alone_samples]), mean([x[column] for x in beside_samples])
        print(f"  {label:32}{a:>14.2f}{b:>16.2f}")

    # The simulator's mean call length: Sluice's own time per call is left out, so the
    # spare capacity is if anything overstated.
    call_s = args.call_ms / 1000
    spare_slots = mean([x[3] for x in beside_samples])
    spare_rps, batch_rps = spare_slots / call_s, batch_done / window
    print(f"\nBatch while interactive runs at 50 % ({window:.1f} s):")
    print(f"  spare slots for batch (mean)      {spare_slots:8.2f}")
    print(f"  spare capacity                    {spare_rps:8.1f} calls/s")
    print(f"  batch throughput                  {batch_rps:8.1f} lines/s")
    print(f"  batch / spare                     {batch_rps / spare_rps:8.0%}")


def report_surge(surge: list[Call], samples: list, alone: list[Call], half: float) -> None:
    before = [x[2] for x in samples if x[0] < half]
    after = [x for x in samples if x[0] >= half]
    level = mean([x[2] for x in after if x[0] >= half * 1.5])
    back_off = float("nan")
    for i, sample in enumerate(after):
        if mean([x[2] for x in after[i : i + 25]]) <= level + 0.25:  # 500 ms
            back_off = sample[0] - half
            break
    print(f"\nInteractive load doubles (50 % -> 100 %) at {half:.0f} s:")
    print(f"  batch calls in flight before      {mean(before):8.2f}")
    print(f"  batch calls in flight after       {level:8.2f}  (mean of the last {half / 2:.0f} s)")
    print(
        f"  time to back off                  {back_off * 1000:8.0f} ms  (500 ms mean within +0.25)"
    )
    print(f"  after the doubling              {'no batch':>10}{'batch running':>16}")
    late, late_alone = [c for c in surge if c.at >= half], [c for c in alone if c.at >= half]
    ok = [f"{sum(c.ok for c in calls) / len(calls):.2%}" for calls in (late_alone, late)]
    p99 = [f"{pct([c.queue_ms for c in calls], 99):.0f}" for calls in (late_alone, late)]
    print(f"  interactive success             {ok[0]:>10}{ok[1]:>16}")
    print(f"  interactive p99 queue wait (ms) {p99[0]:>10}{p99[1]:>16}")
    print("  batch calls in flight, 250 ms bins from 1 s before the doubling:")
    bins = []
    for k in range(-4, 12):
        start = half + k * 0.25
        inside = [x[2] for x in samples if start <= x[0] < start + 0.25]
        bins.append(f"{mean(inside):.1f}")
    print("   ", " ".join(bins))


if __name__ == "__main__":
    main()
