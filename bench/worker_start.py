"""A new worker's first calls: what the first calls after a worker starts take, one after the
other on new connections, for this checkout and a baseline git ref, new workers of each in
turns, in one run. A step left to a worker's first call (an import, a cache's first load, the
upstream client's TLS context) holds that call, and with it every call the worker took in
meanwhile: after a restart or a deploy, every worker pays it once.

    .venv/bin/python bench/worker_start.py --baseline REF [--rounds 5] [--calls 4]
"""

import argparse
import asyncio
import statistics
import time

from harness import stack
from loadgen import build_request, read_response
from overhead import call_body, upstreams


async def _one_call(port: int, request: bytes) -> float:
    """Milliseconds from the request's send to its answer's end, on a new connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        started = time.perf_counter()
        writer.write(request)
        await read_response(reader)
        return (time.perf_counter() - started) * 1000
    finally:
        writer.close()


async def _first_calls(port: int, request: bytes, calls: int) -> list[float]:
    return [await _one_call(port, request) for _ in range(calls)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="git ref to compare with, say main")
    parser.add_argument("--rounds", type=int, default=5, help="new workers of each side")
    parser.add_argument("--calls", type=int, default=4, help="calls timed on each new worker")
    args = parser.parse_args()
    with stack() as s:
        _, _, key = upstreams(s)
        # The zero-latency route: what a call takes is the gateway's.
        body = call_body("zero", "/v1/chat/completions", {})
        sources = {"before": s.checkout(args.baseline), "after": None}
        taken: dict[str, list[list[float]]] = {side: [] for side in sources}
        for _ in range(args.rounds):
            for side, source in sources.items():
                url, _ = s.gateway(**({"source": source} if source else {}))
                port = int(url.rsplit(":", 1)[1])
                headers = {"Authorization": f"Bearer {key}"}
                request = build_request("127.0.0.1", port, "/v1/chat/completions", body, headers)
                taken[side].append(asyncio.run(_first_calls(port, request, args.calls)))
                s.stop_last()
        print(
            f"A new worker's first calls, one after the other (zero-latency simulator, "
            f"{args.rounds} new workers a side, in turns; ms, median of the workers)"
        )
        print(f"  {'call':8}{args.baseline:>14}{'this checkout':>16}")
        for n in range(args.calls):
            before, after = (statistics.median(r[n] for r in taken[side]) for side in sources)
            print(f"  {n + 1:<8}{before:14.1f}{after:16.1f}")
        firsts = {side: " ".join(f"{r[0]:.1f}" for r in taken[side]) for side in sources}
        print(f"  first calls, worker by worker: before {firsts['before']}")
        print(f"  {'':31}after {firsts['after']}")


if __name__ == "__main__":
    main()
