"""Interactive latency while a batch runs, side by side with none, in one run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/batch_interactive.py [--rate 100] [--seconds 40] [--slice 4] \\
        [--latencies 0,100] [--lines 30000] [--baseline main] [--runner-args ARGS] \\
        [--gateway-nice N] [--own-upstream] [--runners 1]

For each upstream latency (ms): a simulator of that latency with room for all, one
deployment in front of it (room for all too: slots are not what is measured), a gateway
(one uvicorn worker) and `runners` runners (`manage.py run_batches`; one by default, each
pacing itself by the host's CPU on its own), on a throw-away database (a PostgreSQL
database of its own, as bench/batch_cost.py makes) and Redis prefix. A batch of
`lines` lines toward that deployment is started and its first lines answered; then
interactive calls arrive open-loop (Poisson, `rate` a second, bench/openloop.py; latency
counted from each call's scheduled time) for `seconds`, while the runners are stopped
(SIGSTOP) and let go on (SIGCONT) in turns every `slice` seconds, all at once. Each call
counts for the phase it was due in: without the batch (runners stopped) or with it.
Slices in turns, not one phase after the other, so both phases meet the same noise of a
shared machine. A runner let go on first finishes the calls it held while stopped and
starts as many at once (not seen in a runner never stopped): the p99 of the calls due
after each slice's first second is printed too.

Printed per latency: interactive p50 / p99 / max latency and calls not served in each
phase, the gateway worker's CPU per call, the batch's lines per second and the runner's
CPU while it ran. With `--baseline REF` the same is done first with the gateway and
runner of git ref REF ("before"), then with this checkout ("after"); `--runner-args` and
`--gateway-nice` apply to this checkout's side only (`--baseline HEAD --gateway-nice -10`:
the same code, its gateway at a higher CPU priority than the servers on the "after" side).
`--own-upstream`: the batch's lines go to a deployment on a simulator of their own, so that
the interactive calls do not queue behind them in the one process standing in for the
provider (a real provider's capacity is not one event loop): what is left is what the batch
costs the gateway's host. `--runners 0`: no batch and no runner, both phases alike, so the
ratios printed are what this machine's noise alone reads as a batch's cost.
"""

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import subprocess

from batch_cost import FINAL, Api, own_database, write_lines
from harness import ROOT, Stack, cpu_seconds, stack
from openloop import Load, fire, pct

CONFIG = """
[[upstreams]]
name = "sim"
base_url = "{simulator}/v1"
[[deployments]]
name = "d"
upstream = "sim"
model = "m"
max_concurrency = 4096
[[routes]]
name = "m"
chain = ["d"]
[[upstreams]]
name = "batchsim"
base_url = "{batch_simulator}/v1"
[[deployments]]
name = "db"
upstream = "batchsim"
model = "m"
max_concurrency = 4096
[[routes]]
name = "mb"
chain = ["db"]
[[teams]]
slug = "bench"
[[applications]]
slug = "live"
team = "bench"
routes = ["m"]
default_priority = "interactive"
[[applications]]
slug = "nightly"
team = "bench"
routes = ["m", "mb"]
default_priority = "batch"
[[members]]
email = "bench@example.com"
team = "bench"
"""


@dataclass
class Phase:
    latencies: list[float] = field(default_factory=list)  # ms, served calls
    settled: list[float] = field(default_factory=list)  # those due after a slice's first second
    failed: int = 0
    codes: Counter[str] = field(default_factory=Counter)  # of the calls not served
    gateway_cpu_s: float = 0.0
    runner_cpu_s: float = 0.0
    seconds: float = 0.0

    def pct(self, p: float) -> float:
        return pct(self.latencies, p)


@dataclass
class Point:
    """One side at one upstream latency."""

    label: str
    latency_ms: float
    alone: Phase = field(default_factory=Phase)  # the runner stopped
    beside: Phase = field(default_factory=Phase)  # the runner running its batch
    lines: int = 0  # batch lines answered during the calls
    outcomes: str = ""  # of the calls not served, from the audit: batch and interactive


def completed(api: Api, batch_id: str) -> int:
    counts = api.status(batch_id)["request_counts"]
    return counts["completed"] + counts["failed"]


def interactive(
    gateway: str, key: str, load: Load, gateway_pids: list[int], runners: list[int], slice_s: float
) -> Point:
    """The calls of `load`; the `runners` are stopped (SIGSTOP) and let go on (SIGCONT) in
    turns every `slice_s` seconds, stopped first: each call counts for the phase it was due
    in. Returns both phases (`label` and `latency_ms` left for the caller)."""
    point = Point("", 0.0)
    phases = (point.alone, point.beside)
    last = [cpu_seconds(gateway_pids), cpu_seconds(runners), 0]

    def turn(k: int) -> None:
        gateway_cpu = cpu_seconds(gateway_pids)
        runner_cpu = cpu_seconds(runners)
        ended = phases[last[2] % 2]
        ended.gateway_cpu_s += gateway_cpu - last[0]
        ended.runner_cpu_s += runner_cpu - last[1]
        last[:] = [gateway_cpu, runner_cpu, k]
        for runner in runners if k >= 0 else ():
            os.kill(runner, signal.SIGSTOP if k % 2 == 0 else signal.SIGCONT)

    slices = int(load.seconds / slice_s + 0.5)
    events = [(k * slice_s, lambda k=k: turn(k)) for k in range(slices)]
    results = asyncio.run(
        fire(f"{gateway}/v1/chat/completions", {"m": key}, load.arrivals, model="m", events=events)
    )
    turn(-1)
    for runner in runners:
        os.kill(runner, signal.SIGCONT)
    for r in results:
        phase = phases[int(r.arrival.at // slice_s) % 2]
        if r.served:
            phase.latencies.append(r.latency * 1000)
            if r.arrival.at % slice_s >= 1.0:
                phase.settled.append(r.latency * 1000)
        else:
            phase.failed += 1
            phase.codes[f"{r.status} {r.code}".strip()] += 1
    for phase in phases:
        phase.seconds = load.seconds / 2
    return point


OUTCOMES = """
from django.db.models import Count, Q
from routing.models import CallRecord
rows = (
    CallRecord.objects.exclude(outcome__in=["success", "client_cancelled", "preempted"])
    .values("outcome").annotate(batch=Count("request_id", filter=~Q(batch_id="")),
                                live=Count("request_id", filter=Q(batch_id="")))
)
from routing.models import Attempt
errors = (
    Attempt.objects.filter(call__batch_id__gt="").exclude(error_class="")
    .values("error_class").annotate(n=Count("call_id"))
)
failed = " ".join(f"{r['outcome']}:{r['batch']}b/{r['live']}i" for r in rows) or "none"
tried = " ".join(f"{e['error_class']}:{e['n']}" for e in errors) or "none"
print(failed, "; batch attempts failed:", tried)
"""


def outcomes(s: Stack) -> str:
    """The calls the audit says were not served, by outcome: batch (b) and interactive (i)."""
    return s.manage("shell", "-c", OUTCOMES).strip().splitlines()[-1]


def big_batch(s: Stack, api: Api, args: argparse.Namespace) -> str:
    """A batch of `args.lines` lines, started and its first lines answered."""
    big = s.tmp / "big.jsonl"
    write_lines(big, args.lines, 200, "big", "mb" if args.own_upstream else "m")
    batch_id = api.create(api.upload(big))
    api.wait(batch_id, {"in_progress"} | FINAL, 120)
    deadline = time.monotonic() + 60
    while completed(api, batch_id) < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    return batch_id


def measure(args: argparse.Namespace, label: str, source: Path, latency: float) -> Point:
    with stack() as s, own_database(s):
        options = ("--model", "m:100000", "--output-tokens", "16", "--latency-ms", str(latency))
        simulator = s.simulator(*options)
        batch_simulator = s.simulator(*options) if args.own_upstream else simulator
        config = CONFIG.format(simulator=simulator, batch_simulator=batch_simulator)
        live = s.configure(config, member="bench@example.com", application="live")
        nightly = s.issue_key("bench@example.com", "nightly")
        if source != ROOT:  # the baseline's own migrations too
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "-v0"],
                cwd=source, env=s.env, check=True, capture_output=True,
            )  # fmt: skip
        env = {
            "SLUICE_BATCH_FILES_DIR": str(s.tmp / "files"),
            "SLUICE_REDIS_PREFIX": f"bench-{uuid.uuid4().hex[:8]}",
        }
        s.env |= env
        nice = (
            ("nice", "-n", str(args.gateway_nice)) if source == ROOT and args.gateway_nice else ()
        )
        gateway, pids = s.gateway(env=env, source=source, wrapper=nice)
        more = args.runner_args.split() if source == ROOT else []
        runners = [
            subprocess.Popen(
                [sys.executable, "manage.py", "run_batches", *more],
                cwd=source, env=s.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,  # as a service manager starts it
            )
            for _ in range(args.runners)
        ]  # fmt: skip
        runner_pids = [r.pid for r in runners]
        api = Api(gateway, nightly)
        try:
            if runners:  # the runner's first lines, as the gateway's first calls below
                warm = s.tmp / "warm.jsonl"
                write_lines(warm, 20, 200, "warm")
                api.wait(api.create(api.upload(warm)), FINAL, 60)
            interactive(gateway, live, Load(args.rate, 2, {"m": 1}, 1.0, seed=7), pids, [], 2)

            batch_id = big_batch(s, api, args) if runners else ""
            load = Load(args.rate, args.seconds, {"m": 1}, 1.0, seed=1)
            done = completed(api, batch_id) if batch_id else 0
            point = interactive(gateway, live, load, pids, runner_pids, args.slice)
            point.label, point.latency_ms = label, latency
            if batch_id:
                point.lines = completed(api, batch_id) - done
                if api.status(batch_id)["status"] != "in_progress":
                    print(
                        f"  note: {label}, {latency:.0f} ms: the batch ended before the calls did"
                    )
                api.cancel(batch_id)
                api.wait(batch_id, FINAL, 300)
            point.outcomes = outcomes(s)
        finally:
            for runner in runners:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(runner.pid, signal.SIGCONT)
                runner.terminate()
            for runner in runners:
                runner.wait(timeout=30)
    return point


def report(args: argparse.Namespace, points: list[Point]) -> None:
    width = 15
    for latency in args.latencies:
        at = [p for p in points if p.latency_ms == latency]
        print()
        calls = f"interactive {args.rate:.0f}/s for {args.seconds:.0f} s"
        turns = (
            f"{args.runners} runner(s) stopped and going in turns"
            if args.runners
            else "no batch: both phases alike (noise)"
        )
        print(f"  upstream {latency:.0f} ms, {calls}, {turns}")
        print(f"  {'':44}" + "".join(f"{p.label[: width - 1]:>{width}}" for p in at))

        def row(title: str, values: list[str]) -> None:
            print(f"  {title:44}" + "".join(f"{v:>{width}}" for v in values))

        for name, of in (
            ("without the batch (runner stopped)", lambda p: p.alone),
            ("with the batch running", lambda p: p.beside),
        ):
            phases = [of(p) for p in at]
            row(name, ["" for _ in at])
            row("  p50 / p99 (ms)", [f"{x.pct(50):.1f} / {x.pct(99):.1f}" for x in phases])
            row(
                "  max (ms); not served",
                [f"{max(x.latencies, default=0):.0f}; {x.failed}" for x in phases],
            )
            row(
                "  not served, most common",
                [" ".join(f"{c}x{n}" for c, n in x.codes.most_common(1)) for x in phases],
            )
            row(
                "  gateway CPU per call (ms)",
                [f"{x.gateway_cpu_s * 1000 / max(1, len(x.latencies)):.2f}" for x in phases],
            )
        row(
            "p99 with / without",
            [f"{p.beside.pct(99) / max(1e-9, p.alone.pct(99)):.2f}x" for p in at],
        )
        row(
            "  after each slice's first second",
            [f"{pct(p.beside.settled, 99) / max(1e-9, pct(p.alone.settled, 99)):.2f}x" for p in at],
        )
        row(
            "p50 with / without",
            [f"{p.beside.pct(50) / max(1e-9, p.alone.pct(50)):.2f}x" for p in at],
        )
        row("batch while running: lines/s", [f"{p.lines / p.beside.seconds:.0f}" for p in at])
        row(
            "  runners' CPU (cores)",
            [f"{p.beside.runner_cpu_s / p.beside.seconds:.2f}" for p in at],
        )
        for p in at:
            print(f"  {p.label}: calls not served (audit; b batch, i interactive): {p.outcomes}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=100, help="interactive calls a second")
    parser.add_argument("--seconds", type=float, default=40, help="of calls, both phases")
    parser.add_argument("--latencies", default="0,100", help="upstream latencies (ms)")
    parser.add_argument("--lines", type=int, default=30_000, help="lines of the batch")
    parser.add_argument(
        "--slice", type=float, default=4, help="seconds the runner is stopped, then running"
    )
    parser.add_argument(
        "--runner-args", default="", help="more options for this checkout's runner ('--nice 0')"
    )
    parser.add_argument(
        "--gateway-nice",
        type=int,
        default=0,
        help="this checkout's gateway at this CPU priority (-10: above the servers; root)",
    )
    parser.add_argument(
        "--own-upstream",
        action="store_true",
        help="the batch's lines to a simulator of their own (route mb), not the one the "
        "interactive calls use",
    )
    parser.add_argument(
        "--runners",
        type=int,
        default=1,
        help="runners on this host, sharing the batch (0: no batch, both phases alike: "
        "what the ratios read from noise alone)",
    )
    parser.add_argument("--baseline", help="git ref of a 'before' run (say main)")
    args = parser.parse_args()
    args.latencies = [float(x) for x in args.latencies.split(",")]
    database = os.environ.get("DATABASE_URL", "sqlite").split(":")[0]
    redis = "Redis" if os.environ.get("REDIS_URL") else "in-process"
    print(f"Interactive latency beside a batch: database {database}, state {redis}, "
          f"{os.cpu_count()} cores")  # fmt: skip
    points = []
    with stack() as s:  # holds the baseline's files
        base = s.checkout(args.baseline) if args.baseline else None
        for latency in args.latencies:
            if base is not None:
                points.append(measure(args, f"before ({args.baseline})", base, latency))
            label = "after" if base is not None else "this checkout"
            points.append(measure(args, label, ROOT, latency))
    report(args, points)


if __name__ == "__main__":
    main()
