"""Many open streams on one worker: N streamed chat completions held open at once, each
trickling a chunk every 0.5-1 s, direct to the simulator and through one gateway worker, per N.

    .venv/bin/python bench/streams.py [--streams 1000,5000,10000] [--seconds 30]
                                      [--open-rate R] [--chunk-ms 750] [--clients 1]
                                      [--baseline REF] [--py-spy PREFIX]
                                      [--upstream-http 1|2|1,2]

The streams open at `--open-rate` a second, by default N / `--seconds` (the turnover of N open
streams of that length: 10,000 streams of 30 s start 333 a second), and each asks the
simulator for as many tokens (`max_tokens`) as keep it going until `--seconds` after the last
one opened, so all N are open together for that long. The same schedule runs direct to the
simulator, then through a fresh, warmed-up gateway (uvicorn, one worker, SQLite, the
production options of docs/operations.md plus `--backlog 8192`). Per N it prints:
  - time to first byte (from the client's connect to the first byte of the answer) p50 and
    p99, direct, through Sluice and the difference;
  - the gaps between chunks, p50 and p99, direct and through (what Sluice adds to each);
  - streams failed (refused or timed-out connects, statuses other than 200, streams cut
    before [DONE], streams not done 30 s after they should have), per side;
  - the gateway's resident memory before and at the peak (and per 1,000 streams), its peak
    of open file descriptors, and its CPU: per stream, per chunk relayed (everything
    included), and in cores over the run;
  - the worker's event-loop lag (p50, p99, wakes later than 50 ms) and, from the audit trail
    (SQLite), the gateway's own first byte: from reading the request to the upstream's first
    chunk, and the part of it before the upstream is called;
  - the machine's load average: on a shared machine the figures mean little when it is
    above the cores.
The client is raw asyncio protocols on uvloop in `--clients` processes; the bench raises its
own limit of open files (inherited by the simulator and the gateway) to the hard limit.
`--upstream-http 2` calls the simulator through an upstream set to `http2` (a worker then
holds a descriptor a stream rather than two), `1,2` both ways in turn; either serves the
simulator by granian (HTTP/1.1 and HTTP/2 on one port; the direct side calls it over
HTTP/1.1), where `1` alone serves it by uvicorn.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from array import array
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import httpx
from harness import CLOCK_TICKS, ROOT, Stack, cpu_seconds, process_tree, stack
from worker_probe import lag_quantile, loop_lag_buckets

# The simulator's gap between chunks is drawn within a third either side of --chunk-ms (750:
# a chunk every 0.5-1 s).
SPREAD = 1 / 3
BACKLOG = "8192"  # the kernel caps it at net.core.somaxconn

# No cap on the deployment's slots; a connect timeout and no breaker that a loaded shared
# machine cannot trip (a simulator slow to accept would open the breaker for every later
# stream, measuring the breaker rather than the streams).
CONFIG = """
[[upstreams]]
name = "sim"
base_url = "http://127.0.0.1:{port}/v1"
connect_timeout = 30
read_timeout = 60
[[upstreams]]
name = "sim-h2"
base_url = "http://127.0.0.1:{port}/v1"
http2 = true
connect_timeout = 30
read_timeout = 60
[[deployments]]
name = "trickle"
upstream = "sim"
model = "m"
max_concurrency = 100000
breaker_threshold = 0
[[deployments]]
name = "trickle-h2"
upstream = "sim-h2"
model = "m"
max_concurrency = 100000
breaker_threshold = 0
[[routes]]
name = "trickle"
chain = ["trickle"]
[[routes]]
name = "trickle-h2"
chain = ["trickle-h2"]
[[teams]]
slug = "bench"
[[applications]]
slug = "bench"
team = "bench"
routes = ["trickle", "trickle-h2"]
[[members]]
email = "bench@example.com"
team = "bench"
"""


# -- the client (runs in each client process) -------------------------------------------------


@dataclass
class Side:
    """What one side's streams measured (merged over the client processes)."""

    ttfb: array = field(default_factory=lambda: array("d"))  # seconds
    gaps: array = field(default_factory=lambda: array("d"))  # seconds
    failed: Counter = field(default_factory=Counter)
    done: int = 0
    audited_ttfb: array = field(default_factory=lambda: array("d"))  # seconds, the gateway's
    audited_before: array = field(default_factory=lambda: array("d"))  # to the first attempt

    def merge(self, other: Side) -> None:
        self.ttfb.extend(other.ttfb)
        self.gaps.extend(other.gaps)
        self.failed.update(other.failed)
        self.done += other.done


class _Stream(asyncio.Protocol):
    """One streamed call on its own connection: when its bytes arrive, and how it ends."""

    def __init__(self, request: bytes, side: Side, ended: asyncio.Future) -> None:
        self.request, self.side, self.ended = request, side, ended
        self.started = time.monotonic()
        self.transport: asyncio.Transport | None = None
        self.first = 0.0
        self.last = 0.0  # the last arrival that carried an event
        self.status = b""
        self.tail = b""
        self.done = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        if not self.first:
            self.first = now
            self.status = data[9:12]
            self.side.ttfb.append(now - self.started)
            if self.status != b"200":
                self._end(f"status {self.status.decode(errors='replace')}")
                return
        if b"data:" in data:
            if self.last:
                self.side.gaps.append(now - self.last)
            self.last = now
        self.tail = (self.tail + data)[-64:]
        if b"[DONE]" in self.tail:
            self.done = True
        if self.done and self.tail.endswith(b"0\r\n\r\n"):  # the chunked body's end
            self._end(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end("cut before [DONE]")

    def _end(self, failure: str | None) -> None:
        if self.ended.done():
            return
        if failure is None:
            self.side.done += 1
        else:
            self.side.failed[failure] += 1
        self.ended.set_result(None)
        if self.transport is not None:
            self.transport.close()


def _request(port: int, key: str | None, model: str, tokens: int) -> bytes:
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Tell me a long story, slowly."}],
            "stream": True,
            "max_tokens": tokens,
        }
    ).encode()
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _run(
    port: int,
    key: str | None,
    model: str,
    opens: list[float],
    end: float,
    deadline: float,
    gap_ms: float,
) -> Side:
    loop = asyncio.get_running_loop()
    side = Side()
    ended: list[asyncio.Future] = []
    streams: list[_Stream] = []

    async def one(at: float) -> None:
        tokens = max(1, round((end - at) * 1000 / gap_ms))
        future = loop.create_future()
        ended.append(future)
        stream = _Stream(_request(port, key, model, tokens), side, future)
        streams.append(stream)
        try:
            await loop.create_connection(lambda: stream, "127.0.0.1", port)
        except OSError as exc:
            if not future.done():
                side.failed[f"connect: {exc.strerror or type(exc).__name__}"] += 1
                future.set_result(None)

    connecting = []
    for at in opens:
        delay = at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        connecting.append(loop.create_task(one(at)))
    await asyncio.gather(*connecting)
    _, pending = await asyncio.wait(ended, timeout=max(0.1, deadline - time.monotonic()))
    for stream in streams:
        if not stream.ended.done():
            stream.side.failed["not done in time"] += 1
            stream.ended.set_result(None)
            if stream.transport is not None:
                stream.transport.close()
    del pending
    return side


def _client(
    port: int,
    key: str | None,
    model: str,
    opens: list[float],
    end: float,
    deadline: float,
    gap_ms: float,
) -> tuple[Side, float]:
    import uvloop

    _raise_open_files()
    used = resource.getrusage(resource.RUSAGE_SELF)
    side = uvloop.run(_run(port, key, model, opens, end, deadline, gap_ms))
    after = resource.getrusage(resource.RUSAGE_SELF)
    return side, after.ru_utime - used.ru_utime + after.ru_stime - used.ru_stime


# -- the run ----------------------------------------------------------------------------------


def _raise_open_files() -> int:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


@dataclass
class Watch:
    """The gateway's memory and descriptors, sampled while a side runs."""

    pids: list[int]
    rss_mib: float = 0.0
    fds: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        while not self.stop.wait(0.5):
            self.rss_mib = max(self.rss_mib, rss_mib(self.pids))
            self.fds = max(self.fds, open_fds(self.pids))


def user_system_seconds(pids: list[int]) -> tuple[float, float]:
    user = system = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        user, system = user + int(fields[11]), system + int(fields[12])
    return user / CLOCK_TICKS, system / CLOCK_TICKS


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def open_fds(pids: list[int]) -> int:
    return sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in pids)


def open_rate(n: int, args: argparse.Namespace) -> float:
    return args.open_rate or n / args.seconds


def run_side(
    pool: ProcessPoolExecutor,
    clients: int,
    port: int,
    key: str | None,
    model: str,
    n: int,
    args: argparse.Namespace,
    watch: Watch | None = None,
) -> tuple[Side, float]:
    """N streams on the schedule, split over the client processes; what they measured and
    the clients' CPU seconds."""
    start = time.monotonic() + 2.0  # the client processes are up by then
    rate = open_rate(n, args)
    opens = [start + i / rate for i in range(n)]
    end = opens[-1] + args.seconds  # every stream keeps going until then
    deadline = end + 30
    futures = [
        pool.submit(_client, port, key, model, opens[k::clients], end, deadline, args.chunk_ms)
        for k in range(clients)
    ]
    sampler = None
    if watch is not None:
        sampler = threading.Thread(target=watch.sample, daemon=True)
        sampler.start()
    side, client_cpu = Side(), 0.0
    for future in futures:
        part, cpu = future.result()
        side.merge(part)
        client_cpu += cpu
    if watch is not None and sampler is not None:
        watch.stop.set()
        sampler.join()
    return side, client_cpu


def profile(prefix: str, n: int, pid: int) -> subprocess.Popen:
    py_spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [str(py_spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "50",
         "--output", f"{prefix}-{n}.txt", "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def warm_up(url: str, key: str, route: str) -> None:
    """A few short calls first: the key, route and limits are cached as in a gateway that has
    been up a while (a cold worker's first calls read them from the database)."""
    body = {"model": route, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for _ in range(20):
            client.post("/v1/chat/completions", json=body | {"max_tokens": 1}).raise_for_status()
            with client.stream(
                "POST", "/v1/chat/completions", json=body | {"stream": True, "max_tokens": 1}
            ) as response:
                response.raise_for_status()
                response.read()


def pct(values: array, p: float) -> float:
    """The p-th percentile in milliseconds (nan when there is nothing)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] * 1000


def failures(side: Side) -> str:
    total = sum(side.failed.values())
    if not total:
        return "0"
    return f"{total} (" + ", ".join(f"{why}: {k}" for why, k in side.failed.most_common()) + ")"


def report(n: int, direct: Side, runs: list[tuple[str, Side, dict[str, float]]], args) -> None:
    """One block per N: the direct side, then each gateway run (a baseline's first)."""
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\n{n:,} streams (load average {load} at the end): opened at "
        f"{open_rate(n, args):.0f}/s over {n / open_rate(n, args):.1f} s, "
        f"all open together for {args.seconds:g} s, a chunk every "
        f"{args.chunk_ms * (1 - SPREAD) / 1000:g}-{args.chunk_ms * (1 + SPREAD) / 1000:g} s"
    )
    names = "".join(f"{name:>12}{'added':>9}" for name, _, _ in runs)
    print(f"  {'':20}{'direct':>9}{names}")
    for label, pick, p in (
        ("TTFB p50 ms", "ttfb", 50),
        ("TTFB p99 ms", "ttfb", 99),
        ("chunk gap p50 ms", "gaps", 50),
        ("chunk gap p99 ms", "gaps", 99),
    ):
        d = pct(getattr(direct, pick), p)
        row = "".join(
            f"{v:12.1f}{v - d:+9.1f}" for v in (pct(getattr(via, pick), p) for _, via, _ in runs)
        )
        print(f"  {label:20}{d:9.1f}{row}")
    print(
        f"  {'streams done':20}{direct.done:9}"
        + "".join(f"{via.done:12}{'':9}" for _, via, _ in runs)
    )
    print(f"  streams failed: direct {failures(direct)}")
    for name, via, gateway in runs:
        grown = gateway["rss_peak"] - gateway["rss_idle"]
        chunks = max(1, len(via.gaps) + via.done)  # a stream's first event has no gap before it
        print(
            f"  {name}: failed {failures(via)}; RSS {gateway['rss_idle']:.0f} MiB idle, "
            f"{gateway['rss_peak']:.0f} MiB peak (+{grown:.0f} MiB, {grown / n * 1000:.1f} MiB "
            f"per 1,000 streams); peak open fds {gateway['fds']:.0f}"
        )
        print(
            f"  {'':{len(name)}}  CPU {gateway['cpu']:.1f} s ({gateway['cpu'] / n * 1000:.2f} ms "
            f"per stream, {gateway['cpu'] / chunks * 1e6:.0f} µs per chunk relayed, all "
            f"included; {gateway['cpu'] / gateway['wall']:.2f} cores over {gateway['wall']:.0f} "
            f"s; {gateway['system'] / max(gateway['cpu'], 1e-9):.0%} of it in the kernel); "
            f"simulator CPU {gateway['sim']:.1f} s, client {gateway['client']:.1f} s"
        )
        print(
            f"  {'':{len(name)}}  event-loop lag p50 {gateway['lag_p50']:.2f} ms, p99 "
            f"{gateway['lag_p99']:.2f} ms, {gateway['lag_over_50ms']:.0f} wakes later than 50 ms;"
            f" the gateway's own first byte (audit trail: request read to the upstream's first "
            f"chunk) p50 {pct(via.audited_ttfb, 50):.1f} ms, p99 {pct(via.audited_ttfb, 99):.1f}"
            f" ms, of which before the upstream is called p50 {pct(via.audited_before, 50):.1f} "
            f"ms, p99 {pct(via.audited_before, 99):.1f} ms"
        )


def through(
    s: Stack,
    source: Path,
    pool: ProcessPoolExecutor,
    key: str,
    sim_pids: list[int],
    n: int,
    args: argparse.Namespace,
    spy_name: str | None,
    route: str,
) -> tuple[Side, dict[str, float]]:
    """N streams through a fresh, warmed-up gateway of `source` on `route`; what they
    measured and what the gateway spent."""
    url, pids = s.gateway(source=source, extra=("--backlog", BACKLOG))
    port = int(url.rsplit(":", 1)[1])
    warm_up(url, key, route)
    watch = Watch(pids)
    idle = rss_mib(pids)
    spy = profile(spy_name, n, pids[0]) if spy_name else None
    cpu0, sim0, wall0 = cpu_seconds(pids), cpu_seconds(sim_pids), time.monotonic()
    system0 = user_system_seconds(pids)[1]
    lag0, since = loop_lag_buckets(url), datetime.now(UTC)
    via, client = run_side(pool, args.clients, port, key, route, n, args, watch)
    lag1 = loop_lag_buckets(url)
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it recorded and exits
        spy.wait(timeout=60)
    gateway = {
        "rss_idle": idle,
        "rss_peak": watch.rss_mib,
        "fds": watch.fds,
        "cpu": cpu_seconds(pids) - cpu0,
        "system": user_system_seconds(pids)[1] - system0,
        "wall": time.monotonic() - wall0,
        "sim": cpu_seconds(sim_pids) - sim0,
        "client": client,
        "lag_p50": lag_quantile(lag0, lag1, 0.5),
        "lag_p99": lag_quantile(lag0, lag1, 0.99),
        "lag_over_50ms": (lag1[math.inf] - lag0[math.inf]) - (lag1[0.05] - lag0[0.05]),
    }
    s.stop_last()  # the audit trail is written out as the worker drains
    via.audited_ttfb, via.audited_before = audited_ttfbs(s, since)
    return via, gateway


def audited_ttfbs(s: Stack, since: datetime) -> tuple[array, array]:
    """For each call started since then, as the audit trail has them (seconds): from its
    start in the gateway (the request read) to the upstream's first chunk, and to its first
    attempt's start (auth, limits, admission). What the gateway's own path adds before the
    first byte, without the accept queue and the loop's wait before the request is read (the
    client's TTFB includes both)."""
    url = s.env["DATABASE_URL"]
    if not url.startswith("sqlite:///"):
        return array("d"), array("d")
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        rows = db.execute(
            "SELECT c.ttfb_ms, (julianday(a.started_at) - julianday(c.created_at)) * 86400000"
            " FROM routing_callrecord c JOIN routing_attempt a ON a.call_id = c.request_id"
            " WHERE c.ttfb_ms IS NOT NULL AND c.created_at >= ? AND a.number = 1",
            (since.strftime("%Y-%m-%d %H:%M:%S.%f"),),
        ).fetchall()
    return array("d", (t / 1000 for t, _ in rows)), array("d", (b / 1000 for _, b in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", default="1000,5000,10000", help="N, comma-separated")
    parser.add_argument("--seconds", type=float, default=30, help="all N open together")
    parser.add_argument(
        "--open-rate",
        type=float,
        help="streams opened a second (default N / --seconds: the turnover of N open streams "
        "of that length)",
    )
    parser.add_argument("--clients", type=int, default=1, help="client processes")
    parser.add_argument(
        "--chunk-ms",
        type=float,
        default=750,
        help="mean gap between chunks, drawn within a third either side (default 750: a chunk "
        "every 0.5-1 s)",
    )
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="also through a gateway of this git ref (say main), before this checkout's",
    )
    parser.add_argument(
        "--upstream-http",
        default="1",
        choices=["1", "2", "1,2"],
        help="the gateway calls the simulator over HTTP/1.1, HTTP/2 or both in turn (2: the "
        "simulator on granian)",
    )
    parser.add_argument(
        "--py-spy",
        metavar="PREFIX",
        help="record the gateway with py-spy during each run into PREFIX-N.txt (collapsed "
        "stacks; needs py-spy from the dev extras)",
    )
    args = parser.parse_args()
    counts = [int(x) for x in args.streams.split(",") if x.strip()]
    if (
        not counts
        or min(counts) < 1
        or (args.open_rate or 1) <= 0
        or args.clients < 1
        or args.chunk_ms <= 0
    ):
        parser.error("--streams takes positive counts; --open-rate, --clients, --chunk-ms > 0")
    protocols = [
        (f"h{v}", "trickle-h2" if v == "2" else "trickle") for v in args.upstream_http.split(",")
    ]
    granian = "2" in args.upstream_http  # serves HTTP/2 beside HTTP/1.1
    hard = _raise_open_files()  # the simulator and the gateway inherit it
    print(
        f"Open streams: one gateway worker, {os.cpu_count()} cores, RLIMIT_NOFILE {hard}, "
        f"somaxconn {Path('/proc/sys/net/core/somaxconn').read_text().strip()}, uvicorn "
        f"--backlog {BACKLOG}, {args.clients} client process(es), simulator on "
        + ("granian" if granian else "uvicorn")
    )
    most = max(counts)
    ramp = max(n / open_rate(n, args) for n in counts)
    tokens = math.ceil((ramp + args.seconds) * 1000 / args.chunk_ms) + 10
    with stack() as s, ProcessPoolExecutor(args.clients, mp_context=get_context("fork")) as pool:
        sim = s.simulator(
            "--model", f"m:{most * 2}", "--output-tokens", str(tokens),
            "--token-latency-ms", str(args.chunk_ms), "--token-latency-spread", f"{SPREAD:.4f}",
            "--seed", "1", "--backlog", BACKLOG, *(["--http2"] if granian else []),
        )  # fmt: skip
        sim_port = int(sim.rsplit(":", 1)[1])
        sim_pids = process_tree(s.procs[-1])  # granian's worker too (--http2)
        config = CONFIG.format(port=sim_port)
        key = s.configure(config, member="bench@example.com", application="bench")
        sources = [("Sluice", ROOT)]
        if args.baseline:
            sources.insert(0, (args.baseline[:10], s.checkout(args.baseline)))
        for n in counts:
            before = cpu_seconds(sim_pids)
            direct, _ = run_side(pool, args.clients, sim_port, None, "m", n, args)
            print(f"  (direct: simulator CPU {cpu_seconds(sim_pids) - before:.1f} s)")
            runs = []
            for (name, source), (protocol, route) in itertools.product(sources, protocols):
                name = f"{name} {protocol}" if len(protocols) > 1 or granian else name
                spy_name = f"{args.py_spy}-{name.replace(' ', '-')}" if args.py_spy else None
                via, gateway = through(s, source, pool, key, sim_pids, n, args, spy_name, route)
                runs.append((name, via, gateway))
            report(n, direct, runs, args)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
