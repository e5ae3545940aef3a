"""What /metrics costs: the counting every call does, and scrapes under load.

    .venv/bin/python bench/metrics_cost.py [--seconds 10] [--concurrency 64] [--workers 1]

Starts a 100 ms-latency simulator and the gateway (REDIS_URL and DATABASE_URL as set; a
throw-away SQLite database otherwise), then prints, side by side in one run:
  - the counting itself: microseconds per call of `metrics_record` (in this process);
  - load alone vs load with a scrape every 100 ms: requests/s, p50 and p99 of the calls;
  - the scrapes: p50 and p95 time to answer /metrics under that load, and its size.
"""

import argparse
import asyncio
import logging
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from harness import stack  # noqa: E402
from loadgen import build_request, run_load  # noqa: E402
from overhead import CONFIG  # noqa: E402

CHAT = {"model": "slow", "messages": [{"role": "user", "content": "Benchmark me, briefly."}]}


def record_cost(n: int = 200_000) -> float:
    import django

    django.setup()
    from routing.observability.audit import AttemptLog, CallLog
    from routing.observability.metrics import metrics_record

    call = CallLog(request_id="r", endpoint="chat/completions", client_ip=None)
    call.route, call.served_deployment, call.priority = "smart", "small", "batch"
    call.tokens_in, call.tokens_out, call.latency_ms, call.queue_ms = 10, 20, 140.0, 3.0
    call.attempts = [AttemptLog(number=1, deployment="small", started_at=call.created_at)]
    started = time.perf_counter()
    for _ in range(n):
        metrics_record(call)
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--every", type=float, default=0.1, help="seconds between scrapes")
    args = parser.parse_args()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # Django's settings log requests
    print(f"metrics_record: {record_cost():.2f} µs per call (this process)")
    with stack() as s:
        slow = s.simulator("--model", "m:100000", "--output-tokens", "16", "--latency-ms", "100")
        zero = s.simulator("--model", "m:100000", "--output-tokens", "16")
        ports = {n: int(u.rsplit(":", 1)[1]) for n, u in (("zero", zero), ("slow", slow))}
        key = s.configure(CONFIG.format(**ports), member="bench@example.com", application="bench")
        base, _ = s.gateway(workers=args.workers)
        port = int(base.rsplit(":", 1)[1])
        request = build_request(
            "127.0.0.1", port, "/v1/chat/completions", CHAT, {"Authorization": f"Bearer {key}"}
        )

        def load():
            return asyncio.run(
                run_load(
                    "127.0.0.1", port, request, concurrency=args.concurrency, seconds=args.seconds
                )
            )

        asyncio.run(run_load("127.0.0.1", port, request, concurrency=8, seconds=1.0))
        results = {"no scrapes": load()}
        scrapes: list[float] = []
        size = [0]
        stop = threading.Event()

        def scrape() -> None:
            with httpx.Client(base_url=base) as client:
                while not stop.is_set():
                    started = time.perf_counter()
                    body = client.get("/metrics").content
                    scrapes.append((time.perf_counter() - started) * 1000)
                    size[0] = len(body)
                    time.sleep(args.every)

        scraper = threading.Thread(target=scrape)
        scraper.start()
        results[f"scrape every {args.every * 1000:.0f} ms"] = load()
        stop.set()
        scraper.join()
        results["no scrapes, again"] = load()
        print(
            f"\nload: concurrency {args.concurrency}, {args.seconds:.0f} s each, "
            f"{args.workers} worker(s), simulator latency 100 ms"
        )
        print(f"  {'':26}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}")
        for label, r in results.items():
            print(f"  {label:26}{r.rps():9.1f}{r.percentile(50):9.1f}{r.percentile(99):9.1f}")
        q = statistics.quantiles(scrapes, n=20)
        print(
            f"\n/metrics under that load: {len(scrapes)} scrapes, p50 "
            f"{statistics.median(scrapes):.1f} ms, p95 {q[18]:.1f} ms, {size[0] / 1024:.1f} KiB"
        )


if __name__ == "__main__":
    main()
