"""What Sluice adds to a call, side by side with calling the simulator directly, in one run.

    .venv/bin/python bench/overhead.py [--seconds 10] [--concurrency 64] [--workers 1]

Starts two simulators (zero latency, and 100 ms latency), a gateway under uvicorn on a
throw-away SQLite database, then prints:
  - ceiling: requests/s at the given concurrency against the zero-latency simulator, and
    the gateway's CPU milliseconds per request (its process CPU time / requests), for plain
    and streaming (16 chunks) chat completions;
  - overhead: with 100 ms simulator latency, requests/s and p50/p99 latency direct and
    through Sluice, and the added p50/p99.
The load generator is bench/loadgen.py (raw keep-alive HTTP/1.1, one process).
"""

import argparse
import asyncio
import os
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import cpu_seconds, stack
from loadgen import LoadResult, build_request, run_load

CHAT = {"model": "", "messages": [{"role": "user", "content": "Benchmark me, briefly."}]}


CONFIG = """
[[upstreams]]
name = "sim0"
base_url = "http://127.0.0.1:{zero}/v1"
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
routes = ["zero", "slow"]
[[members]]
email = "bench@example.com"
team = "bench"
"""


def measure(
    port: int,
    body: dict,
    headers: dict[str, str],
    *,
    concurrency: int,
    seconds: float,
    pids: list[int] | None = None,
) -> tuple[LoadResult, float | None]:
    request = build_request("127.0.0.1", port, "/v1/chat/completions", body, headers)
    asyncio.run(run_load("127.0.0.1", port, request, concurrency=concurrency, seconds=1.0))
    before = cpu_seconds(pids) if pids else 0.0
    result = asyncio.run(
        run_load("127.0.0.1", port, request, concurrency=concurrency, seconds=seconds)
    )
    served = sum(result.statuses.values())
    cpu_ms = (cpu_seconds(pids) - before) * 1000 / served if pids and served else None
    if result.errors or set(result.statuses) - {200}:
        print(f"    note: statuses {result.statuses}, connection errors {result.errors}")
    return result, cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()

    with stack() as s:
        zero = s.simulator("--model", "m:100000", "--output-tokens", "16")
        slow = s.simulator("--model", "m:100000", "--output-tokens", "16", "--latency-ms", "100")
        zero_port, slow_port = (int(url.rsplit(":", 1)[1]) for url in (zero, slow))
        config = CONFIG.format(zero=zero_port, slow=slow_port)
        key = s.configure(config, member="bench@example.com", application="bench")
        gateway, pids = s.gateway(workers=args.workers)
        gw_port = int(gateway.rsplit(":", 1)[1])
        auth = {"Authorization": f"Bearer {key}"}
        c, secs = args.concurrency, args.seconds
        database = s.env["DATABASE_URL"].split(":")[0]
        print(
            f"Sluice overhead: concurrency {c}, {secs:.0f} s per run, {args.workers} gateway "
            f"worker(s), {os.cpu_count()} cores, database {database}"
        )
        client_cpu = resource.getrusage(resource.RUSAGE_SELF)

        print("\nCeiling (zero-latency simulator)")
        print(f"  {'':28}{'direct req/s':>14}{'Sluice req/s':>14}{'Sluice CPU ms/req':>19}")
        for label, extra in (
            ("chat, non-streaming", {}),
            ("chat, streaming 16 chunks", {"stream": True}),
        ):
            direct, _ = measure(
                zero_port, {**CHAT, "model": "m", **extra}, {}, concurrency=c, seconds=secs
            )
            via, cpu = measure(
                gw_port,
                {**CHAT, "model": "zero", **extra},
                auth,
                concurrency=c,
                seconds=secs,
                pids=pids,
            )
            print(f"  {label:28}{direct.rps():14.0f}{via.rps():14.0f}{cpu:19.2f}")

        print("\nOverhead (simulator latency 100 ms)")
        print(f"  {'':10}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
        direct, _ = measure(slow_port, {**CHAT, "model": "m"}, {}, concurrency=c, seconds=secs)
        via, _ = measure(gw_port, {**CHAT, "model": "slow"}, auth, concurrency=c, seconds=secs)
        for label, r in (("direct", direct), ("Sluice", via)):
            print(f"  {label:10}{r.rps():10.1f}{r.percentile(50):10.1f}{r.percentile(99):10.1f}")
        print(
            f"  {'added':10}{via.rps() / direct.rps() * 100:9.1f}%"
            f"{via.percentile(50) - direct.percentile(50):10.2f}"
            f"{via.percentile(99) - direct.percentile(99):10.2f}"
        )
        print("\nLimits (simulator latency 100 ms): every limit set on the key, none tripping")
        limited = s.issue_key("bench@example.com", "bench")
        prefix = limited[: len("sk-sluice-") + 12]
        s.manage(
            "set_limit",
            "key",
            prefix,
            "--rpm",
            "1000000",
            "--tpm",
            "1000000000",
            "--concurrency",
            "10000",
            "--daily-tokens",
            "1000000000000",
            "--monthly-tokens",
            "1000000000000",
            "--monthly-cost",
            "1000000",
        )
        with_limits, _ = measure(
            gw_port,
            {**CHAT, "model": "slow"},
            {"Authorization": f"Bearer {limited}"},
            concurrency=c,
            seconds=secs,
        )
        print(f"  {'':12}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
        for label, r in (("no limits", via), ("all limits", with_limits)):
            print(f"  {label:12}{r.rps():10.1f}{r.percentile(50):10.1f}{r.percentile(99):10.1f}")
        print(
            f"  {'added':12}{'':10}{with_limits.percentile(50) - via.percentile(50):10.2f}"
            f"{with_limits.percentile(99) - via.percentile(99):10.2f}"
        )
        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = used.ru_utime - client_cpu.ru_utime + used.ru_stime - client_cpu.ru_stime
        print(f"\n(load generator CPU: {spent:.1f} s)")


if __name__ == "__main__":
    main()
