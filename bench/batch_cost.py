"""What the batch runner costs per line, and how long a big upload takes, in one run.

    .venv/bin/python bench/batch_cost.py [--lines 2000] [--paced-lines 500]
                                         [--upload-lines 50000] [--line-bytes 4000]
                                         [--baseline main] [--repeat N] [--py-spy FILE]

Starts two simulators, a gateway under uvicorn and one runner (`manage.py run_batches`) on
a throw-away database (SQLite; with a postgres:// DATABASE_URL, a database of its own made
on that server and dropped after, so a runner of someone else's on the same server never
takes its batches; with REDIS_URL, a Redis prefix of its own), then:

  - idle: the runner's CPU per second with no batch to run (its ticks, its caches);
  - zero latency: a batch of `lines` chat lines toward a zero-latency deployment with
    room for all, from its creation until it is completed: the runner process's CPU
    seconds (utime + stime) per line, and lines per second (wall). The runner calls the
    upstream itself (the live request path, in its own process), so its CPU includes what
    a live call costs the gateway. Also the CPU per line of this host's PostgreSQL and Redis
    servers meanwhile (their writes and scripts: CPU the batch takes from the gateway's
    host when they run beside it);
  - paced: the same with `paced-lines` lines toward a deployment of `paced-slots` slots
    (20 % kept for interactive calls) whose calls take `paced-ms`: the runner is woken by
    every line that ends and finds the deployment full most of the time, so this is what
    its pacing costs per line. After each batch, what a client's poll of it costs, and a
    list of batches: median wall time of 50 reads, and the servers' CPU a read;
  - upload: a file of `upload-lines` lines padded to about `line-bytes` bytes each
    (50,000 x 4,000 is about 200 MB, the upload limit): the seconds to upload it
    (POST /v1/files: counted and stored), to create the batch, and until the runner has
    validated it and queued its lines (`in_progress`); the batch is then cancelled.

With `--baseline REF` the same is done first with the gateway and runner of git ref REF
(exported with git archive: "before"), then with this checkout ("after"), each on its own
database, and printed side by side; `--repeat N` runs both sides N times, in turns (on a
shared machine, compare medians).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import CLOCK_TICKS, ROOT, Stack, cpu_seconds, servers_cpu_seconds, stack

CONFIG = """
[[upstreams]]
name = "sim"
base_url = "{simulator}/v1"
[[upstreams]]
name = "slow"
base_url = "{slow}/v1"
[[deployments]]
name = "zero"
upstream = "sim"
model = "m"
max_concurrency = 100000
[[deployments]]
name = "paced"
upstream = "slow"
model = "m"
max_concurrency = {slots}
[[routes]]
name = "m"
chain = ["zero"]
[[routes]]
name = "p"
chain = ["paced"]
[[teams]]
slug = "bench"
[[applications]]
slug = "nightly"
team = "bench"
routes = ["m", "p"]
default_priority = "batch"
[[members]]
email = "bench@example.com"
team = "bench"
"""
FINAL = {"completed", "failed", "expired", "cancelled"}
IDLE_SECONDS = 5


@dataclass
class Ran:
    """One batch run to its end."""

    status: str = ""
    lines: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0  # the runner's
    loop_cpu_s: float = 0.0  # of which its main thread's (the event loop)
    servers_cpu_s: float = 0.0  # this host's PostgreSQL and Redis servers' meanwhile
    reads: dict[str, tuple[float, float]] = field(default_factory=dict)  # ms: wall, servers


@dataclass
class Side:
    label: str
    idle_cpu_s: float = 0.0  # the runner's CPU per second with no batch to run
    zero: Ran = field(default_factory=Ran)
    paced: Ran = field(default_factory=Ran)
    upload_mb: float = 0.0
    upload_lines: int = 0
    stored_s: float = 0.0
    created_s: float = 0.0
    queued_s: float = 0.0
    validate_cpu_s: float = 0.0


def thread_cpu_seconds(pid: int) -> float:
    """The CPU seconds of a process's main thread (the runner's event loop; its database
    work runs on other threads)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def write_lines(path: Path, n: int, line_bytes: int, prefix: str, model: str = "m") -> int:
    """A JSONL file of n chat lines, each padded to about line_bytes; its size."""
    with path.open("w") as f:
        for i in range(n):
            line = {
                "custom_id": f"{prefix}-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": model, "messages": [{"role": "user", "content": ""}]},
            }
            text = json.dumps(line)
            pad = max(0, line_bytes - len(text) - 1)
            line["body"]["messages"][0]["content"] = f"line {i} " + "x" * max(0, pad - 8)
            f.write(json.dumps(line) + "\n")
    return path.stat().st_size


class Api:
    def __init__(self, gateway: str, key: str) -> None:
        self.client = httpx.Client(
            base_url=f"{gateway}/v1", headers={"Authorization": f"Bearer {key}"}, timeout=600
        )

    def upload(self, path: Path) -> str:
        with path.open("rb") as f:
            files = {"file": (path.name, f)}
            r = self.client.post("/files", files=files, data={"purpose": "batch"})
        r.raise_for_status()
        return r.json()["id"]

    def create(self, file_id: str) -> str:
        body = {
            "input_file_id": file_id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        }
        r = self.client.post("/batches", json=body)
        r.raise_for_status()
        return r.json()["id"]

    def status(self, batch_id: str) -> dict:
        return self.client.get(f"/batches/{batch_id}").json()

    def wait(self, batch_id: str, statuses: set[str], timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            batch = self.status(batch_id)
            if batch["status"] in statuses:
                return batch
            time.sleep(0.05)
        raise SystemExit(f"batch {batch_id} not {statuses} after {timeout:.0f} s")

    def cancel(self, batch_id: str) -> None:
        self.client.post(f"/batches/{batch_id}/cancel")


@contextmanager
def own_database(s: Stack) -> Iterator[None]:
    """On PostgreSQL, point the stack at a new database of its own (dropped after)."""
    url = s.env["DATABASE_URL"]
    if not url.startswith(("postgres://", "postgresql://")):
        yield
        return
    server, _ = url.rsplit("/", 1)
    name = f"bench_batch_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    s.env["DATABASE_URL"] = f"{server}/{name}"
    try:
        yield
    finally:
        s.close()  # nothing may hold a connection to it
        s.procs.clear()
        with psycopg.connect(f"{server}/postgres", autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def measure(args: argparse.Namespace, s: Stack, label: str, source: Path) -> Side:
    with own_database(s):
        return _measure(args, s, label, source)


def _measure(args: argparse.Namespace, s: Stack, label: str, source: Path) -> Side:
    side = Side(label)
    simulator = s.simulator("--model", "m:100000", "--output-tokens", "16")
    slow = s.simulator(
        "--model", f"m:{args.paced_slots}", "--output-tokens", "16",
        "--latency-ms", str(args.paced_ms),
    )  # fmt: skip
    config = CONFIG.format(simulator=simulator, slow=slow, slots=args.paced_slots)
    key = s.configure(config, member="bench@example.com", application="nightly")
    if source != ROOT:  # the baseline's own migrations too
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"],
            cwd=source, env=s.env, check=True, capture_output=True,
        )  # fmt: skip
    env = {
        "SLUICE_BATCH_FILES_DIR": str(s.tmp / "files"),
        "SLUICE_REDIS_PREFIX": f"bench-{uuid.uuid4().hex[:8]}",
        "SLUICE_BATCH_CPU_HEADROOM": "0",  # the runner's cost, unpaced (the bench is the host)
    }
    s.env |= env
    gateway, _ = s.gateway(env=env, source=source)
    api = Api(gateway, key)
    profile = ["-m", "cProfile", "-o", args.profile] if args.profile and source == ROOT else []
    runner = subprocess.Popen(
        [sys.executable, *profile, "manage.py", "run_batches",
         "--max-in-flight", str(args.in_flight)],
        cwd=source, env=s.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Warm up: imports, connections, caches.
        warm = s.tmp / "warm.jsonl"
        write_lines(warm, 20, 200, "warm")
        api.wait(api.create(api.upload(warm)), FINAL, 60)
        time.sleep(1)
        cpu = cpu_seconds([runner.pid])
        time.sleep(IDLE_SECONDS)
        side.idle_cpu_s = (cpu_seconds([runner.pid]) - cpu) / IDLE_SECONDS

        for ran, lines, model in (
            (side.zero, args.lines, "m"),
            (side.paced, args.paced_lines, "p"),
        ):
            if lines:
                spy = args.py_spy if model == "p" and source == ROOT else None
                run_batch(s, api, runner, ran, lines, model, args.timeout, spy)

        if args.upload_lines:
            big = s.tmp / "big.jsonl"
            size = write_lines(big, args.upload_lines, args.line_bytes, "big")
            side.upload_mb, side.upload_lines = size / 1e6, args.upload_lines
            started = time.monotonic()
            file_id = api.upload(big)
            side.stored_s = time.monotonic() - started
            cpu = cpu_seconds([runner.pid])
            batch_id = api.create(file_id)
            side.created_s = time.monotonic() - started
            queued = api.wait(batch_id, {"in_progress"} | FINAL, args.timeout)
            side.queued_s = time.monotonic() - started
            side.validate_cpu_s = cpu_seconds([runner.pid]) - cpu
            if queued["status"] != "in_progress":
                print(f"  note: {label}: the big batch is {queued['status']}: {queued['errors']}")
            api.cancel(batch_id)
            api.wait(batch_id, FINAL, args.timeout)
            big.unlink()
    finally:
        runner.terminate()
        runner.wait(timeout=30)
    return side


def run_batch(
    s: Stack,
    api: Api,
    runner: subprocess.Popen,
    ran: Ran,
    lines: int,
    model: str,
    timeout: float,
    spy: str | None = None,
) -> None:
    path = s.tmp / f"run-{model}.jsonl"
    write_lines(path, lines, 200, f"run-{model}", model)
    file_id = api.upload(path)
    sampler = None
    if spy:  # py-spy's collapsed stacks of the runner while this batch runs
        sampler = subprocess.Popen(
            [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(runner.pid),
             "--format", "raw", "--output", spy, "--rate", "250", "--nonblocking", "--gil"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1)
    cpu, started = cpu_seconds([runner.pid]), time.monotonic()
    loop_cpu, servers_cpu = thread_cpu_seconds(runner.pid), servers_cpu_seconds()
    done = api.wait(api.create(file_id), FINAL, timeout)
    ran.seconds = time.monotonic() - started
    ran.cpu_s = cpu_seconds([runner.pid]) - cpu
    ran.loop_cpu_s = thread_cpu_seconds(runner.pid) - loop_cpu
    ran.servers_cpu_s = servers_cpu_seconds() - servers_cpu
    if sampler is not None:
        sampler.send_signal(signal.SIGINT)
        sampler.wait(timeout=30)
    ran.lines, ran.status = done["request_counts"]["completed"], done["status"]
    for name, path in (("status", f"/batches/{done['id']}"), ("list", "/batches?limit=20")):
        ran.reads[name] = time_reads(api, path)


READS = 50


def time_reads(api: Api, path: str) -> tuple[float, float]:
    """A read of the finished batch (or the list of batches) as a client polls it: median
    wall ms, and ms of this host's database and Redis servers' CPU a read."""
    walls, servers = [], servers_cpu_seconds()
    for _ in range(READS):
        started = time.perf_counter()
        api.client.get(path).raise_for_status()
        walls.append(time.perf_counter() - started)
    walls.sort()
    return walls[READS // 2] * 1000, (servers_cpu_seconds() - servers) * 1000 / READS


def report(args: argparse.Namespace, sides: list[Side]) -> None:
    width = 16
    print()
    print(f"  {'':40}" + "".join(f"{x.label[: width - 1]:>{width}}" for x in sides))

    def row(label: str, values: list[str]) -> None:
        print(f"  {label:40}" + "".join(f"{v:>{width}}" for v in values))

    runs = (
        (f"zero latency: batch of {args.lines} lines", args.lines, lambda x: x.zero),
        (
            f"paced: {args.paced_lines} lines, {args.paced_slots} slots, {args.paced_ms:.0f} ms",
            args.paced_lines,
            lambda x: x.paced,
        ),
    )
    row("idle runner: CPU ms per second", [f"{x.idle_cpu_s * 1000:.1f}" for x in sides])
    for title, lines, of in runs:
        if not lines:
            continue
        ran = [of(x) for x in sides]
        row(title, [r.status for r in ran])
        row("  lines completed", [str(r.lines) for r in ran])
        row("  wall time (s)", [f"{r.seconds:.1f}" for r in ran])
        row("  lines/s", [f"{r.lines / r.seconds:.0f}" for r in ran])
        row("  runner CPU (s)", [f"{r.cpu_s:.2f}" for r in ran])
        row("  runner CPU per line (ms)", [f"{r.cpu_s * 1000 / max(1, r.lines):.2f}" for r in ran])
        row(
            "    of which on the event loop (ms)",
            [f"{r.loop_cpu_s * 1000 / max(1, r.lines):.2f}" for r in ran],
        )
        row(
            "  database + Redis CPU per line (ms)",
            [f"{r.servers_cpu_s * 1000 / max(1, r.lines):.2f}" for r in ran],
        )
        for name, what in (("status", "GET the batch"), ("list", "GET 20 batches")):
            row(
                f"  {what} after: ms; servers' CPU ms",
                [f"{r.reads[name][0]:.1f}; {r.reads[name][1]:.2f}" for r in ran],
            )
    if args.upload_lines:
        big = f"upload: {sides[0].upload_lines} lines, {sides[0].upload_mb:.0f} MB"
        row(big, ["" for _ in sides])
        row("  stored: POST /v1/files (s)", [f"{x.stored_s:.1f}" for x in sides])
        row("  + batch created (s)", [f"{x.created_s:.1f}" for x in sides])
        row("  + validated and queued (s)", [f"{x.queued_s:.1f}" for x in sides])
        row("  runner CPU validating (s)", [f"{x.validate_cpu_s:.1f}" for x in sides])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=2000, help="lines of the runner's batch")
    parser.add_argument("--upload-lines", type=int, default=50_000, help="0: no upload")
    parser.add_argument("--line-bytes", type=int, default=4000, help="size of an upload line")
    parser.add_argument("--in-flight", type=int, default=64, help="the runner's --max-in-flight")
    parser.add_argument("--paced-lines", type=int, default=500, help="0: no paced run")
    parser.add_argument("--paced-slots", type=int, default=8, help="the paced deployment's slots")
    parser.add_argument("--paced-ms", type=float, default=100, help="a paced call's latency")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--profile", help="write cProfile stats of this checkout's runner here")
    parser.add_argument(
        "--py-spy",
        help="write py-spy's collapsed stacks (--gil: the thread running Python) of this "
        "checkout's runner during the paced batch here",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each side, in turns")
    parser.add_argument("--baseline", help="git ref of a 'before' run (say main)")
    args = parser.parse_args()
    database = os.environ.get("DATABASE_URL", "sqlite").split(":")[0]
    redis = "Redis" if os.environ.get("REDIS_URL") else "in-process"
    print(
        f"Batch runner cost: one runner (--max-in-flight "
        f"{args.in_flight}), database {database}, state {redis}, {os.cpu_count()} cores"
    )
    sides = []
    for run in range(1, args.repeat + 1):  # before and after in turns: the same noise
        nth = f" {run}" if args.repeat > 1 else ""
        if args.baseline:
            with stack() as s:
                label = f"before{nth}" if nth else f"before ({args.baseline})"
                sides.append(measure(args, s, label, s.checkout(args.baseline)))
        with stack() as s:
            sides.append(measure(args, s, "after" + nth if args.baseline else "this" + nth, ROOT))
    report(args, sides)


if __name__ == "__main__":
    main()
