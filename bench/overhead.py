"""What Sluice adds to a call, side by side with calling the simulator directly, in one run.

    .venv/bin/python bench/overhead.py [--seconds 10] [--concurrency 64] [--workers 1]
                                       [--only SECTION] [--rate 500] [--baseline REF]
                                       [--client loadgen|wrk]

Starts two simulators (zero latency, and 100 ms latency), a gateway under uvicorn on a
throw-away SQLite database, then prints:
  - ceiling: requests/s at the given concurrency against the zero-latency simulator, and
    the gateway's CPU milliseconds per request (its process CPU time / requests), for plain
    and streaming (16 chunks) chat completions;
  - overhead: with 100 ms simulator latency, requests/s and p50/p99 latency direct and
    through Sluice, the added p50/p99, how long the workers' event loops waited for a CPU
    meanwhile, and (one worker) the worker's event-loop lag then;
    each run counts after a warm-up second on the same connections (the steady state), and
    says what its first calls, all sent at once on new connections, took;
  - open loop: calls arriving on a Poisson schedule (`--rate` a second, bench/openloop.py)
    on the 100 ms simulator, direct and through Sluice in turns: p50/p99/max latency from
    each call's scheduled time, and what Sluice adds;
  - breakdown: where the worker's CPU per call goes at the ceiling, by stage of the call
    (auth, limits, slots, parse, upstream client, relay, audit…), from a py-spy profile;
  - protocols: the gateway's CPU per call for each pair of client and upstream protocol
    (chat, Messages, Responses): translated both ways when they differ, passed through when
    they are the same, side by side with OpenAI on both sides.
  - tracing (only with `--only tracing`): the gateway's CPU per call with OpenTelemetry
    traces off and on (a second gateway exporting OTLP/HTTP to bench/otlp_sink.py, which
    discards them), in alternating runs, plain and streaming, and the change.
  - with `--only overhead --baseline REF`: the overhead case direct, through a gateway of
    that git ref and through this checkout's, in turns, three rounds;
  - with `--baseline REF` (say `main`) otherwise, only: a gateway of that git ref and this
    checkout's, on the same simulators and database, in alternating runs, per kind of call:
    req/s, CPU ms per call and the p99 latency of each, and the change.
The load generator is bench/loadgen.py (raw keep-alive HTTP/1.1, one process), or wrk with
`--client wrk` for the ceiling and overhead cases (bench/wrk.py).
"""

import argparse
import asyncio
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import httpx
from harness import Stack, cpu_seconds, stack
from loadgen import LoadResult, build_request, run_load
from openloop import Load, fire, pct
from parsing import agent_body, chat_body
from worker_probe import cpu_breakdown, lag_quantile, loop_lag_buckets, waited_for_cpu
from wrk import WrkResult, available, run_wrk

CHAT = {"model": "", "messages": [{"role": "user", "content": "Benchmark me, briefly."}]}


CONFIG = """
[[upstreams]]
name = "sim0"
base_url = "http://127.0.0.1:{zero}/v1"
[[upstreams]]
name = "sim0a"
kind = "anthropic"
base_url = "http://127.0.0.1:{zero}/v1"
[[deployments]]
name = "zero-anthropic"
upstream = "sim0a"
model = "c"
max_concurrency = 100000
[[routes]]
name = "zero-anthropic"
chain = ["zero-anthropic"]
[[upstreams]]
name = "sim0r"
kind = "openai-responses"
base_url = "http://127.0.0.1:{zero}/v1"
[[deployments]]
name = "zero-responses"
upstream = "sim0r"
model = "r"
max_concurrency = 100000
[[routes]]
name = "zero-responses"
chain = ["zero-responses"]
[[upstreams]]
name = "sim100"
base_url = "http://127.0.0.1:{slow}/v1"
[[deployments]]
name = "zero"
upstream = "sim0"
model = "m"
max_concurrency = 100000
[[deployments]]
name = "slow"
upstream = "sim100"
model = "m"
max_concurrency = 100000
[[routes]]
name = "zero"
chain = ["zero"]
[[routes]]
name = "slow"
chain = ["slow"]
[[teams]]
slug = "bench"
[[applications]]
slug = "bench"
team = "bench"
routes = ["zero", "slow", "zero-anthropic", "zero-responses"]
[[members]]
email = "bench@example.com"
team = "bench"
"""


def call_body(model: str, path: str, extra: dict) -> dict:
    """A short call's body in the shape of the endpoint at `path`."""
    if path == "/v1/messages":
        return {**CHAT, "model": model, **extra, "max_tokens": 16}
    if path == "/v1/responses":
        return {"model": model, "input": CHAT["messages"], **extra}
    return {**CHAT, "model": model, **extra}


def measure(
    port: int,
    body: dict,
    headers: dict[str, str],
    *,
    concurrency: int,
    seconds: float,
    pids: list[int] | None = None,
    path: str = "/v1/chat/completions",
    warmed: Callable[[], None] | None = None,
    client: str = "loadgen",
) -> tuple[LoadResult | WrkResult, float | None]:
    """A warm-up second, then `seconds` counted on the same connections (the steady state;
    the first calls, sent at once on new connections, are the result's `burst`); `warmed`
    is called as the counting starts. With wrk as the `client`, the counted run opens its
    connections anew and counts its first calls too."""
    before = 0.0

    def counting() -> None:
        nonlocal before
        before = cpu_seconds(pids) if pids else 0.0
        if warmed is not None:
            warmed()

    if client == "wrk":
        url = f"http://127.0.0.1:{port}{path}"
        found = run_wrk(
            url, body, headers, connections=concurrency, seconds=seconds, warmed=counting
        )
        served = found.requests
        if found.errors or found.non2xx:
            print(f"    note: {found.non2xx} answers not 2xx, connection errors {found.errors}")
    else:
        request = build_request("127.0.0.1", port, path, body, headers)
        load = run_load(
            "127.0.0.1", port, request,
            concurrency=concurrency, seconds=seconds, warmup=1.0, warmed=counting,
        )  # fmt: skip
        result = asyncio.run(load)
        served = sum(result.statuses.values())
        if result.errors or set(result.statuses) - {200}:
            print(f"    note: statuses {result.statuses}, connection errors {result.errors}")
        found = result
    cpu_ms = (cpu_seconds(pids) - before) * 1000 / served if pids and served else None
    return found, cpu_ms


@dataclass
class Run:
    stack: Stack
    gateway: int
    zero: int
    slow: int
    key: str
    pids: list[int]
    concurrency: int
    seconds: float
    workers: int = 1
    client: str = "loadgen"  # or "wrk": the closed-loop cases' load generator

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.gateway}"

    def auth(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}

    def load(
        self,
        port: int,
        model: str,
        headers: dict[str, str],
        *,
        cpu: bool = False,
        path: str = "/v1/chat/completions",
        warmed: Callable[[], None] | None = None,
        **extra: object,
    ) -> tuple[LoadResult, float | None]:
        if "paced" in extra:
            return self.paced(port, model, headers, PACED)
        return measure(
            port,
            call_body(model, path, extra),
            headers,
            concurrency=self.concurrency,
            seconds=self.seconds,
            pids=self.pids if cpu else None,
            path=path,
            warmed=warmed,
            client=self.client,
        )

    def paced(
        self, port: int, model: str, headers: dict[str, str], rate: float
    ) -> tuple[LoadResult, float | None]:
        """Chat calls arriving at `rate` a second (Poisson) for the run's seconds, after a
        warm-up second; the gateway's CPU per call over that time."""
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        key = headers["Authorization"].removeprefix("Bearer ")
        warm, load = (
            Load(rate, s, {"bench": 1.0}, interactive_share=1.0) for s in (1, self.seconds)
        )
        asyncio.run(fire(url, {"bench": key}, warm.arrivals, model=model))
        before = cpu_seconds(self.pids)
        results = asyncio.run(fire(url, {"bench": key}, load.arrivals, model=model))
        cpu = cpu_seconds(self.pids) - before
        served = [r.latency for r in results if r.served]
        measured = LoadResult(latencies=served, statuses={200: len(served)}, elapsed=self.seconds)
        return measured, cpu * 1000 / len(served) if served else None


def ceiling(run: Run) -> None:
    print("\nCeiling (zero-latency simulator)")
    print(f"  {'':28}{'direct req/s':>14}{'Sluice req/s':>14}{'Sluice CPU ms/req':>19}")
    for label, extra in (
        ("chat, non-streaming", {}),
        ("chat, streaming 16 chunks", {"stream": True}),
    ):
        direct, _ = run.load(run.zero, "m", {}, **extra)
        via, cpu = run.load(run.gateway, "zero", run.auth(), cpu=True, **extra)
        print(f"  {label:28}{direct.rps():14.0f}{via.rps():14.0f}{cpu:19.2f}")


def overhead(run: Run) -> None:
    print("\nOverhead (simulator latency 100 ms)")
    print(f"  {'':10}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
    direct, _ = run.load(run.slow, "m", {})
    # The lag from when the counting starts (read on a thread: the load's loop goes on).
    lag_before: dict[float, float] = {}
    scrape = threading.Thread(target=lambda: lag_before.update(loop_lag_buckets(run.url)))
    counted_from: list[tuple[float, int]] = []  # the loops' waits for a CPU until then

    def warmed() -> None:
        counted_from.append(waited_for_cpu(run.pids))
        scrape.start()

    via, _ = run.load(run.gateway, "slow", run.auth(), warmed=warmed)
    (waited_then, turns_then), (waited, turns) = counted_from[0], waited_for_cpu(run.pids)
    waited, turns = waited - waited_then, turns - turns_then
    scrape.join()
    lag_after = loop_lag_buckets(run.url)
    for label, r in (("direct", direct), ("Sluice", via)):
        print(f"  {label:10}{r.rps():10.1f}{r.percentile(50):10.1f}{r.percentile(99):10.1f}")
    print(
        f"  {'added':10}{via.rps() / direct.rps() * 100:9.1f}%"
        f"{via.percentile(50) - direct.percentile(50):10.2f}"
        f"{via.percentile(99) - direct.percentile(99):10.2f}"
    )
    if isinstance(via, WrkResult):
        print("  (wrk: counted after a warm-up second, its first calls on new connections too)")
    else:
        print(f"  (counted after a warm-up second on the same connections; {burst(direct, via)})")
    print(
        f"  the workers' loops waited {waited * 1000:.0f} ms for a CPU in all "
        f"({waited * 1e6 / max(turns, 1):.0f} µs a wake-up on average: other processes ran)"
    )
    if run.workers == 1:  # a scrape reads the worker that answers it: one worker, its loop
        p50, p99 = (lag_quantile(lag_before, lag_after, q) for q in (0.5, 0.99))
        print(f"  event-loop lag during the Sluice run: p50 {p50:.2f} ms, p99 {p99:.2f} ms")


def burst_added(direct: LoadResult | WrkResult, via: LoadResult | WrkResult) -> str:
    """What the slowest of a run's first calls added (wrk counts them in the run: "-")."""
    if isinstance(direct, WrkResult) or isinstance(via, WrkResult):
        return "-"
    return f"{(max(via.burst) - max(direct.burst)) * 1000:+.1f}"


def burst(direct: LoadResult, via: LoadResult) -> str:
    """What the warm-up's first calls took, sent all at once on new connections."""
    return (
        f"its first {len(via.burst)} calls, sent at once on new connections, took up to "
        f"{max(direct.burst) * 1000:.1f} ms direct and {max(via.burst) * 1000:.1f} ms "
        "through Sluice"
    )


def open_loop(run: Run, rate: float, rounds: int = 2) -> None:
    """The 100 ms case as real traffic comes: arrivals scheduled in advance, whether or not
    earlier calls ended, each call's latency counted from its scheduled time. A closed
    loop's 64 clients send their next call only when one ends, so calls that ended together
    (behind one stall) come back together, one time per upstream latency; here a stall
    shows in the calls that arrived during it, and only there."""
    load = Load(rate, run.seconds + 1, {"bench": 1.0}, interactive_share=1.0)
    print(f"\nOpen loop (simulator latency 100 ms, Poisson arrivals at {rate:g} a second)")
    print(f"  {'':10}{'served/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}{'failed':>8}")
    sides = (("direct", run.slow, "m", "none"), ("Sluice", run.gateway, "slow", run.key))
    latencies: dict[str, list[list[float]]] = {"direct": [], "Sluice": []}
    for _ in range(rounds):
        for label, port, model, key in sides:
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            results = asyncio.run(fire(url, {"bench": key}, load.arrivals, model=model))
            kept = [r for r in results if r.arrival.at >= 1.0]  # past the warm-up second
            ms = [r.latency * 1000 for r in kept if r.served]
            latencies[label].append(ms)
            print(
                f"  {label:10}{len(ms) / run.seconds:10.1f}{pct(ms, 50):10.1f}{pct(ms, 99):10.1f}"
                f"{max(ms, default=float('nan')):10.1f}{len(kept) - len(ms):8d}"
            )
    for q in (50, 99):
        pairs = zip(latencies["direct"], latencies["Sluice"], strict=True)
        each = [pct(via, q) - pct(direct, q) for direct, via in pairs]
        print(f"  added p{q}: " + ", ".join(f"{a:+.2f}" for a in each) + " ms")


def breakdown(run: Run) -> None:
    """Where a worker's CPU goes at the ceiling: a py-spy profile of the worker during the
    non-streaming ceiling load, each sample put in the stage of the call it was in."""
    print("\nCPU per call by stage (zero-latency simulator, non-streaming, py-spy samples)")
    pid = run.pids[-1]
    measured: dict[str, tuple[LoadResult, float | None]] = {}
    load = threading.Thread(
        target=lambda: measured.update(x=run.load(run.gateway, "zero", run.auth(), cpu=True))
    )
    load.start()
    time.sleep(1.5)  # past the load's warm-up second
    stages = cpu_breakdown(pid, max(1.0, run.seconds - 1))
    load.join()
    if stages is None:
        print("  (py-spy is not installed or may not attach: pip install py-spy; run as root)")
        return
    _, cpu = measured["x"]
    total = sum(stages.values())
    print(f"  {'stage':32}{'share':>8}{'CPU ms/call':>13}")
    for stage, samples in stages.most_common():
        share = samples / total
        print(f"  {stage:32}{share * 100:7.1f}%{(cpu or 0) * share:13.3f}")
    print(f"  {'all':32}{100:7.1f}%{cpu or 0:13.3f}   (one worker: pid {pid})")


def protocols(run: Run, rounds: int = 2) -> None:
    """The four pairs of client and upstream protocol, in alternation (drift on a shared
    machine falls on all alike); the gateway's CPU per call is what translation costs."""
    print("\nProtocols (zero-latency simulator): the gateway's CPU per call")
    pairs = {
        "openai → openai": ("/v1/chat/completions", "zero"),
        "openai → anthropic": ("/v1/chat/completions", "zero-anthropic"),
        "anthropic → openai": ("/v1/messages", "zero"),
        "anthropic → anthropic": ("/v1/messages", "zero-anthropic"),  # passed through
        "responses → openai": ("/v1/responses", "zero"),
        "responses → responses": ("/v1/responses", "zero-responses"),  # passed through
    }
    print("  (same protocol on both sides: passed through; otherwise translated both ways)")
    print(f"  {'client → upstream':24}{'':14}{'Sluice req/s':>14}{'CPU ms/req':>12}{'added':>9}")
    for label, extra in (("plain", {}), ("streaming", {"stream": True})):
        cpu: dict[str, list[float]] = {pair: [] for pair in pairs}
        rps: dict[str, list[float]] = {pair: [] for pair in pairs}
        for _ in range(rounds):
            for pair, (path, model) in pairs.items():
                result, ms = run.load(run.gateway, model, run.auth(), cpu=True, path=path, **extra)
                cpu[pair].append(ms or 0.0)
                rps[pair].append(result.rps())
        base = sum(cpu["openai → openai"]) / rounds
        for pair in pairs:
            ms = sum(cpu[pair]) / rounds
            print(
                f"  {pair:24}{label:14}{sum(rps[pair]) / rounds:14.0f}{ms:12.3f}{ms - base:+9.3f}"
            )
    print(f"  ({rounds} alternating runs each)")


# label, route, path, extra body fields
# A coding agent's turn (tools, then the conversation so far) as a Messages body and a chat
# conversation of the same size, less the model and the stream flag each case sets.
AGENT_TURN = {
    k: v for k, v in json.loads(agent_body(120_000)).items() if k not in ("model", "stream")
}
CHAT_TURN = {"messages": json.loads(chat_body(120_000))["messages"]}
PACED = 200  # calls a second
VERSUS = [
    ("chat", "zero", "/v1/chat/completions", {}),
    ("chat, streaming", "zero", "/v1/chat/completions", {"stream": True}),
    ("chat, 120 KB", "zero", "/v1/chat/completions", CHAT_TURN),
    ("messages → anthropic", "zero-anthropic", "/v1/messages", {}),
    ("messages → anthropic, stream", "zero-anthropic", "/v1/messages", {"stream": True}),
    ("messages → anthropic, 120 KB", "zero-anthropic", "/v1/messages", AGENT_TURN),
    ("responses → responses", "zero-responses", "/v1/responses", {}),
    ("chat, 100 ms upstream", "slow", "/v1/chat/completions", {}),
    # Open loop at a steady rate: what a worker spends each second besides its calls
    # (reloads, timers, collectors) shows in the CPU of each call.
    (f"chat, {PACED} a second", "zero", "/v1/chat/completions", {"paced": True}),
]


def versus(run: Run, baseline: Run, ref: str, rounds: int = 2) -> None:
    """This checkout against a baseline gateway, call kind by call kind, in alternation (drift
    on a shared machine falls on both alike)."""
    print(f"\nVersus {ref} (same simulators and database; {rounds} alternating runs each)")
    print(
        f"  {'':30}{'req/s before':>13}{'after':>8}{'CPU ms before':>15}{'after':>8}"
        f"{'p99 ms before':>15}{'after':>8}{'CPU':>8}"
    )
    for label, route, path, extra in VERSUS:
        results = {"before": LoadResult(), "after": LoadResult()}
        cpu: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(rounds):
            for side, r in (("before", baseline), ("after", run)):
                result, ms = r.load(r.gateway, route, r.auth(), cpu=True, path=path, **extra)
                results[side].merge(result)
                cpu[side].append(ms or 0.0)
        b, a = (sum(cpu[side]) / rounds for side in ("before", "after"))
        print(
            f"  {label:30}{results['before'].rps():13.0f}"
            f"{results['after'].rps():8.0f}{b:15.3f}{a:8.3f}"
            f"{results['before'].percentile(99):15.1f}{results['after'].percentile(99):8.1f}"
            f"{(a - b) / b * 100 if b else 0:+7.1f}%"
        )


def overhead_versus(run: Run, baseline: Run, ref: str, rounds: int = 3) -> None:
    """The goal case (100 ms upstream) direct, through the baseline and through this
    checkout, in turns: what each adds at p50 and p99, round by round."""
    print(f"\nOverhead versus {ref} (simulator latency 100 ms; {rounds} rounds in turns)")
    print(
        f"  {'round':8}{'side':8}{'req/s':>9}{'% direct':>10}{'added p50':>11}{'added p99':>11}"
        f"{'burst max':>11}"
    )
    for n in range(1, rounds + 1):
        direct, _ = run.load(run.slow, "m", {})
        for side, r in (("before", baseline), ("after", run)):
            via, _ = r.load(r.gateway, "slow", r.auth())
            print(
                f"  {n:<8}{side:8}{via.rps():9.1f}{via.rps() / direct.rps() * 100:9.1f}%"
                f"{via.percentile(50) - direct.percentile(50):11.2f}"
                f"{via.percentile(99) - direct.percentile(99):11.2f}"
                f"{burst_added(direct, via):>11}"
            )
    if run.client == "wrk":
        print("  (ms; wrk: counted after a warm-up second, its first calls on new connections too)")
        return
    print(
        "  (ms; counted after a warm-up second on the same connections; burst max: what the\n"
        "  slowest of the first calls, sent at once on new connections, added)"
    )


def tracing(run: Run, traced: Run, sink: str, rounds: int = 4) -> None:
    """The same calls to a gateway without traces and to one exporting them, in alternation
    (drift on a shared machine falls on both alike); the CPU per call is what tracing costs
    (its span building and export threads run in the gateway's process)."""
    print(f"\nTracing (zero-latency simulator; {rounds} alternating runs each)")
    print(f"  {'':28}{'req/s off':>11}{'on':>8}{'CPU ms off':>12}{'on':>8}{'CPU':>8}")
    calls = 0
    for label, extra in (("chat", {}), ("chat, streaming", {"stream": True})):
        results = {"off": LoadResult(), "on": LoadResult()}
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(rounds):
            for side, r in (("off", run), ("on", traced)):
                result, ms = r.load(r.gateway, "zero", r.auth(), cpu=True, **extra)
                results[side].merge(result)
                cpu[side].append(ms or 0.0)
        calls += sum(results["on"].statuses.values())
        off, on = (sum(cpu[side]) / rounds for side in ("off", "on"))
        print(
            f"  {label:28}{results['off'].rps():11.0f}{results['on'].rps():8.0f}"
            f"{off:12.3f}{on:8.3f}{(on - off) / off * 100 if off else 0:+7.1f}%"
        )
    time.sleep(2)  # the last batch of spans exported
    taken = httpx.get(f"{sink}/stats").json()
    print(
        f"  (the sink took {taken['requests']} OTLP requests, {taken['bytes'] / 1e6:.1f} MB, "
        f"for about {calls} traced calls measured, warm-ups not counted)"
    )


LIMITS = {
    "--rpm": "1000000",
    "--tpm": "1000000000",
    "--concurrency": "10000",
    "--daily-tokens": "1000000000000",
    "--monthly-tokens": "1000000000000",
    "--monthly-cost": "1000000",
}


def limits(run: Run, rounds: int = 3) -> None:
    """Keys of one member: none limited, every limit set (none tripping), and every limit
    but requests per minute (django-ratelimit's share), measured in alternation so drift on
    a shared machine falls on all alike."""
    print("\nLimits (simulator latency 100 ms): limits set on the key, none tripping")
    keys = {"no limits": run.key}
    for label, flags in (
        ("all limits", LIMITS),
        ("all but rpm", {k: v for k, v in LIMITS.items() if k != "--rpm"}),
    ):
        keys[label] = run.stack.issue_key("bench@example.com", "bench")
        prefix = keys[label][: len("sk-sluice-") + 12]
        run.stack.manage("set_limit", "key", prefix, *(x for kv in flags.items() for x in kv))
    time.sleep(3)  # past the workers' limit cache
    results = {label: LoadResult() for label in keys}
    for _ in range(rounds):
        for label, key in keys.items():
            results[label].merge(run.load(run.gateway, "slow", run.auth(key))[0])
    print(f"  {'':12}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'added p50':>11}{'added p99':>11}")
    plain = results["no limits"]
    for label, r in results.items():
        print(
            f"  {label:12}{r.rps():10.1f}{r.percentile(50):10.1f}{r.percentile(99):10.1f}"
            f"{r.percentile(50) - plain.percentile(50):11.2f}"
            f"{r.percentile(99) - plain.percentile(99):11.2f}"
        )
    print(f"  ({rounds} alternating runs each)")


def upstreams(s: Stack) -> tuple[int, int, str]:
    """The zero-latency and the 100 ms simulators, CONFIG applied: their ports and a key."""
    zero = s.simulator(
        "--model", "m:100000", "--model", "c:100000:anthropic",
        "--model", "r:100000:openai-responses", "--output-tokens", "16",
    )  # fmt: skip
    slow = s.simulator("--model", "m:100000", "--output-tokens", "16", "--latency-ms", "100")
    zero_port, slow_port = (int(url.rsplit(":", 1)[1]) for url in (zero, slow))
    config = CONFIG.format(zero=zero_port, slow=slow_port)
    key = s.configure(config, member="bench@example.com", application="bench")
    return zero_port, slow_port, key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--rate", type=float, default=500, help="open loop: calls a second (100 ms upstream)"
    )
    parser.add_argument(
        "--only",
        choices=["ceiling", "overhead", "openloop", "breakdown", "limits", "protocols", "tracing"],
        help="run one section (and its baseline)",
    )
    parser.add_argument(
        "--baseline", help="git ref (say main) to compare this checkout with, side by side"
    )
    parser.add_argument(
        "--client",
        choices=["loadgen", "wrk"],
        default="loadgen",
        help="the closed loop's load generator: bench/loadgen.py, or wrk (Debian's package; "
        "only with --only ceiling or --only overhead; --baseline with --only overhead)",
    )
    args = parser.parse_args()
    if args.client == "wrk" and (
        args.only not in ("ceiling", "overhead") or (args.baseline and args.only != "overhead")
    ):
        parser.error("--client wrk: only with --only ceiling or --only overhead (and --baseline)")
    if args.client == "wrk" and not available():
        parser.error("--client wrk: wrk is not installed (apt-get install wrk)")
    wanted = (
        {args.only}
        if args.only
        else {"ceiling", "overhead", "openloop", "breakdown", "limits", "protocols"}
    )

    with stack() as s:
        zero_port, slow_port, key = upstreams(s)
        gateway, pids = s.gateway(workers=args.workers)
        gw_port = int(gateway.rsplit(":", 1)[1])
        c, secs = args.concurrency, args.seconds
        database = s.env["DATABASE_URL"].split(":")[0]
        print(
            f"Sluice overhead: concurrency {c}, {secs:.0f} s per run, {args.workers} gateway "
            f"worker(s), {os.cpu_count()} cores, database {database}, load from {args.client}"
        )
        client_cpu = resource.getrusage(resource.RUSAGE_SELF)
        run = Run(s, gw_port, zero_port, slow_port, key, pids, c, secs, args.workers, args.client)
        if args.baseline:
            before, before_pids = s.gateway(workers=args.workers, source=s.checkout(args.baseline))
            before_port = int(before.rsplit(":", 1)[1])
            baseline = replace(run, gateway=before_port, pids=before_pids)
            if args.only == "overhead":
                overhead_versus(run, baseline, args.baseline)
            else:
                versus(run, baseline, args.baseline)
        for name, section in (
            ("ceiling", ceiling),
            ("overhead", overhead),
            ("openloop", lambda run: open_loop(run, args.rate)),
            ("breakdown", breakdown),
            ("limits", limits),
            ("protocols", protocols),
        ):
            if name in wanted and not args.baseline:
                section(run)
        if "tracing" in wanted and not args.baseline:
            sink = s.otlp_sink()
            # The SDK's batch defaults, but a short delay: the sink's count is current.
            otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": sink, "OTEL_BSP_SCHEDULE_DELAY": "500"}
            on, on_pids = s.gateway(workers=args.workers, env=otel)
            on_port = int(on.rsplit(":", 1)[1])
            traced = replace(run, gateway=on_port, pids=on_pids)
            tracing(run, traced, sink)
        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = used.ru_utime - client_cpu.ru_utime + used.ru_stime - client_cpu.ru_stime
        print(f"\n(load generator CPU: {spent:.1f} s)")


if __name__ == "__main__":
    main()
