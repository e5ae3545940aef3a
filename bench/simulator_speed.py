"""How fast is the upstream simulator? (It must never be the bottleneck of a gateway benchmark.)

Starts ``python -m simulator`` (zero latency) in a subprocess and drives it from several
client processes with keep-alive connections for a few seconds, non-streaming then streaming
(16 chunks). The default client is a minimal raw HTTP/1.1 client, so that the measuring side
costs less than the measured side; ``--client httpx`` uses httpx.AsyncClient instead.

Also reports the server's own CPU time per request (from /proc), which says what one simulator
process can sustain regardless of how fast the clients are.

    .venv/bin/python bench/simulator_speed.py [--seconds 5] [--concurrency 64] [--clients N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench"
OUTPUT_TOKENS = 16


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _body(stream: bool) -> bytes:
    return json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Say something short."}],
            "stream": stream,
        }
    ).encode()


def _raw_request(port: int, stream: bool, worker: int) -> bytes:
    body = _body(stream)
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"Authorization: Bearer sk-bench-{worker:012d}\r\n\r\n"
    ).encode() + body


async def _raw_connection(
    port: int, request: bytes, stream: bool, start: float, end: float, latencies: list[float]
) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    done = 0
    await asyncio.sleep(max(0.0, start - time.time()))
    try:
        while True:
            t0 = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if head[9:12] != b"200":
                raise RuntimeError(f"unexpected response: {head[:40]!r}")
            if stream:  # chunked: read up to the terminating zero-size chunk
                data = await reader.readuntil(b"\r\n0\r\n\r\n")
                if b"data: [DONE]" not in data:
                    raise RuntimeError("stream without [DONE]")
            else:
                i = head.lower().index(b"content-length:") + 15
                await reader.readexactly(int(head[i : head.index(b"\r\n", i)]))
            now = time.time()
            if now >= end:
                return done
            done += 1
            latencies.append(time.perf_counter() - t0)
    finally:
        writer.close()


async def _httpx_connection(
    client: httpx.AsyncClient, stream: bool, start: float, end: float, latencies: list[float]
) -> int:
    done = 0
    body = _body(stream)
    headers = {"content-type": "application/json", "authorization": "Bearer sk-bench"}
    await asyncio.sleep(max(0.0, start - time.time()))
    while True:
        t0 = time.perf_counter()
        if stream:
            async with client.stream(
                "POST", "/v1/chat/completions", content=body, headers=headers
            ) as resp:
                last = b""
                async for piece in resp.aiter_bytes():
                    last = piece
                if resp.status_code != 200 or not last.endswith(b"data: [DONE]\n\n"):
                    raise RuntimeError(f"bad stream ({resp.status_code})")
        else:
            resp = await client.post("/v1/chat/completions", content=body, headers=headers)
            if resp.status_code != 200:
                raise RuntimeError(f"unexpected status {resp.status_code}")
        if time.time() >= end:
            return done
        done += 1
        latencies.append(time.perf_counter() - t0)


async def _worker_async(
    port: int,
    stream: bool,
    connections: int,
    start: float,
    end: float,
    client_kind: str,
    worker: int,
) -> tuple[int, list[float]]:
    latencies: list[float] = []
    if client_kind == "raw":
        request = _raw_request(port, stream, worker)
        counts = await asyncio.gather(
            *(_raw_connection(port, request, stream, start, end, latencies)
              for _ in range(connections))
        )  # fmt: skip
    else:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30
        ) as client:
            counts = await asyncio.gather(
                *(_httpx_connection(client, stream, start, end, latencies)
                  for _ in range(connections))
            )  # fmt: skip
    return sum(counts), latencies


def _worker(args: tuple[int, bool, int, float, float, str, int]) -> tuple[int, list[float]]:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # plain asyncio still works, just slower
        pass
    return asyncio.run(_worker_async(*args))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _phase(
    pool: ProcessPoolExecutor,
    server: subprocess.Popen,
    port: int,
    stream: bool,
    args: argparse.Namespace,
) -> None:
    per_client = [args.concurrency // args.clients] * args.clients
    for i in range(args.concurrency % args.clients):
        per_client[i] += 1
    start = time.time() + 1.0  # let every client process connect first
    end = start + args.seconds
    jobs = [(port, stream, n, start, end, args.client, i) for i, n in enumerate(per_client) if n]
    futures = [pool.submit(_worker, job) for job in jobs]
    time.sleep(max(0.0, start - time.time()))
    cpu0 = _cpu_seconds(server.pid)
    time.sleep(args.seconds)
    cpu1 = _cpu_seconds(server.pid)
    results = [f.result() for f in futures]
    total = sum(r[0] for r in results)
    latencies = sorted(x for r in results for x in r[1])
    rps = total / args.seconds
    cpu = cpu1 - cpu0
    p50 = statistics.median(latencies) * 1000 if latencies else float("nan")
    p99 = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
    label = f"streaming ({OUTPUT_TOKENS} chunks)" if stream else "non-streaming"
    print(
        f"{label:>24}: {rps:8.0f} req/s   p50 {p50:6.2f} ms  p99 {p99:6.2f} ms   "
        f"server CPU {cpu / args.seconds * 100:4.0f}%  = {cpu / max(total, 1) * 1e6:5.0f} µs/req"
        f"  (~{total / cpu if cpu else float('inf'):,.0f} req/s per server core)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--clients", type=int, default=max(1, (os.cpu_count() or 2) - 1),
        help="client processes (default: CPUs - 1, leaving one core to the server)",
    )  # fmt: skip
    parser.add_argument("--client", choices=["raw", "httpx"], default="raw")
    args = parser.parse_args()

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "simulator", "--port", str(port),
         "--model", f"{MODEL}:100000", "--output-tokens", str(OUTPUT_TOKENS)],
        cwd=ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/stats", timeout=0.5)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("simulator did not start") from None
                time.sleep(0.05)
        print(
            f"simulator pid {server.pid}; {args.clients} client process(es) x "
            f"{args.concurrency} connections total ({args.client} client), {args.seconds:g} s "
            f"per phase, {os.cpu_count()} CPUs",
            flush=True,
        )
        with ProcessPoolExecutor(args.clients) as pool:
            for stream in (False, True):
                _phase(pool, server, port, stream, args)
        stats = httpx.get(f"http://127.0.0.1:{port}/stats").json()["models"][MODEL]
        print(
            f"simulator /stats: served {stats['served']}, peak in flight "
            f"{stats['peak_in_flight']}, errors {stats['capacity_errors'] + stats['rate_limited']}"
        )
    finally:
        server.terminate()
        server.wait(5)


if __name__ == "__main__":
    main()
