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
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import LoadResult, build_request, run_load

ROOT = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CHAT = {"model": "", "messages": [{"role": "user", "content": "Benchmark me, briefly."}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process for {url} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / CLOCK_TICKS


def gateway_pids(proc: subprocess.Popen) -> list[int]:
    """The uvicorn process and its workers (with --workers N the parent only supervises)."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return [proc.pid, *map(int, children)]


def start_simulator(port: int, latency_ms: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "routing.simulator",
            "--port",
            str(port),
            "--model",
            "m:100000",
            "--latency-ms",
            str(latency_ms),
            "--output-tokens",
            "16",
        ],
        cwd=ROOT,
    )
    wait_ready(f"http://127.0.0.1:{port}/stats", proc)
    return proc


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


def setup_database(env: dict[str, str], zero: int, slow: int, tmp: Path) -> str:
    config = tmp / "bench.toml"
    config.write_text(CONFIG.format(zero=zero, slow=slow))
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run(
        [*manage, "apply_config", str(config)],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    issued = subprocess.run(
        [*manage, "issue_key", "--member", "bench@example.com", "--application", "bench"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return issued.stdout.strip().splitlines()[-1]


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

    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    env = os.environ | {
        "DATABASE_URL": os.environ.get("DATABASE_URL", f"sqlite:///{tmp}/bench.sqlite3"),
        "SLUICE_SECRET_KEY": "bench",
        "SLUICE_LOG_LEVEL": "WARNING",
    }
    zero_port, slow_port, gw_port = free_port(), free_port(), free_port()
    procs = [start_simulator(zero_port, 0), start_simulator(slow_port, 100)]
    try:
        key = setup_database(env, zero_port, slow_port, tmp)
        gateway = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "config.asgi:application",
                "--port",
                str(gw_port),
                "--workers",
                str(args.workers),
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
        )
        procs.append(gateway)
        wait_ready(f"http://127.0.0.1:{gw_port}/healthz", gateway)
        time.sleep(0.5)
        pids = gateway_pids(gateway)
        auth = {"Authorization": f"Bearer {key}"}
        c, s = args.concurrency, args.seconds
        print(
            f"Sluice overhead: concurrency {c}, {s:.0f} s per run, {args.workers} gateway "
            f"worker(s), {os.cpu_count()} cores, database {env['DATABASE_URL'].split(':')[0]}"
        )
        client_cpu = resource.getrusage(resource.RUSAGE_SELF)

        print("\nCeiling (zero-latency simulator)")
        print(f"  {'':28}{'direct req/s':>14}{'Sluice req/s':>14}{'Sluice CPU ms/req':>19}")
        for label, extra in (
            ("chat, non-streaming", {}),
            ("chat, streaming 16 chunks", {"stream": True}),
        ):
            direct, _ = measure(
                zero_port, {**CHAT, "model": "m", **extra}, {}, concurrency=c, seconds=s
            )
            via, cpu = measure(
                gw_port,
                {**CHAT, "model": "zero", **extra},
                auth,
                concurrency=c,
                seconds=s,
                pids=pids,
            )
            print(f"  {label:28}{direct.rps():14.0f}{via.rps():14.0f}{cpu:19.2f}")

        print("\nOverhead (simulator latency 100 ms)")
        print(f"  {'':10}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
        direct, _ = measure(slow_port, {**CHAT, "model": "m"}, {}, concurrency=c, seconds=s)
        via, _ = measure(gw_port, {**CHAT, "model": "slow"}, auth, concurrency=c, seconds=s)
        for label, r in (("direct", direct), ("Sluice", via)):
            print(f"  {label:10}{r.rps():10.1f}{r.percentile(50):10.1f}{r.percentile(99):10.1f}")
        print(
            f"  {'added':10}{via.rps() / direct.rps() * 100:9.1f}%"
            f"{via.percentile(50) - direct.percentile(50):10.2f}"
            f"{via.percentile(99) - direct.percentile(99):10.2f}"
        )
        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = used.ru_utime - client_cpu.ru_utime + used.ru_stime - client_cpu.ru_stime
        print(f"\n(load generator CPU: {spent:.1f} s)")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
