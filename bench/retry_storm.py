"""A primary that fails every call, then recovers: does Sluice turn it into a retry storm?

    .venv/bin/python bench/retry_storm.py [--seconds 60] [--recover-at 40] [--clients 32]
                                          [--cooldown 10]

32 clients call route `storm` (primary -> fallback) as fast as they can. The primary
answers every call with 503 "at capacity" until --recover-at, then works again. The same
scenario runs twice, side by side: Sluice as configured (breaker: 3 errors, cooldown
--cooldown s; retry budget 10 %), and Sluice with its breaker and retry budget switched off
(threshold 0, budget 100 %), the plain "retry along the chain" proxy. Printed per run:
  - upstream attempts on the failing primary against client calls, overall and after the
    first second (aim with the breaker: <= 1.1x, in practice far below);
  - share of client calls served (aim: >= 99 %, through the fallback);
  - time from the primary's recovery to the first call it serves again (aim: within
    cooldown + probe time).
"""

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import stack

CONFIG = """
[[upstreams]]
name = "sim"
base_url = "{sim}/v1"
read_timeout = 30
[[deployments]]
name = "primary"
upstream = "sim"
model = "primary"
max_concurrency = 64
breaker_threshold = {threshold}
breaker_cooldown = {cooldown}
retry_budget = {budget}
[[deployments]]
name = "fallback"
upstream = "sim"
model = "fallback"
max_concurrency = 64
[[routes]]
name = "storm"
chain = ["primary", "fallback"]
backoff_base = 0.2
backoff_cap = 2
[[teams]]
slug = "bench"
[[applications]]
slug = "bench"
team = "bench"
routes = ["storm"]
[[members]]
email = "bench@example.com"
team = "bench"
"""


@dataclass
class Calls:
    times: list[float] = field(default_factory=list)  # seconds since start
    statuses: list[int] = field(default_factory=list)
    served_by: list[str] = field(default_factory=list)


async def _client(
    session: aiohttp.ClientSession, url: str, key: str, start: float, end: float, calls: Calls
) -> None:
    body = {"model": "storm", "messages": [{"role": "user", "content": "storm"}]}
    headers = {"Authorization": f"Bearer {key}"}
    while time.monotonic() < end:
        sent = time.monotonic() - start
        async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
            await r.read()
            calls.times.append(sent)
            calls.statuses.append(r.status)
            calls.served_by.append(r.headers.get("x-sluice-served-model", ""))


async def primary_requests(session: aiohttp.ClientSession, sim: str) -> int:
    async with session.get(f"{sim}/stats") as response:
        return (await response.json())["models"]["primary"]["requests"]


async def set_faults(session: aiohttp.ClientSession, sim: str, faults: dict) -> None:
    async with session.post(f"{sim}/admin/models/primary", json={"faults": faults}) as r:
        r.raise_for_status()


async def scenario(sim: str, url: str, key: str, args: argparse.Namespace) -> dict[str, float]:
    calls = Calls()
    async with aiohttp.ClientSession() as session:
        await (await session.post(f"{sim}/stats/reset")).release()
        await set_faults(session, sim, {"capacity": 1.0})
        start = time.monotonic()
        end = start + args.seconds

        async def recover() -> tuple[int, int]:
            await asyncio.sleep(1.0)
            after_first_second = await primary_requests(session, sim)
            await asyncio.sleep(args.recover_at - 1.0)
            at_recovery = await primary_requests(session, sim)
            await set_faults(session, sim, {})
            return after_first_second, at_recovery

        recovery = asyncio.create_task(recover())
        await asyncio.gather(
            *(_client(session, url, key, start, end, calls) for _ in range(args.clients))
        )
        after_first_second, at_recovery = await recovery

    failing = [i for i, t in enumerate(calls.times) if t < args.recover_at]
    later = [i for i in failing if calls.times[i] >= 1.0]
    back = [
        calls.times[i]
        for i, who in enumerate(calls.served_by)
        if who == "primary" and calls.times[i] >= args.recover_at
    ]
    served = sum(1 for s in calls.statuses if s == 200)
    return {
        "calls": len(calls.times),
        "ratio": at_recovery / max(1, len(failing)),
        "ratio_later": (at_recovery - after_first_second) / max(1, len(later)),
        "served": served / max(1, len(calls.times)) * 100,
        "back_after": (min(back) - args.recover_at) if back else float("nan"),
        "primary_attempts": at_recovery,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--recover-at", type=float, default=40)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--cooldown", type=float, default=10)
    args = parser.parse_args()

    results = {}
    for label, threshold, budget in (("Sluice", 3, 0.1), ("no breaker", 0, 1.0)):
        with stack() as s:
            sim = s.simulator(
                "--model", "primary:64", "--model", "fallback:64", "--latency-ms", "50"
            )
            config = CONFIG.format(
                sim=sim, threshold=threshold, cooldown=args.cooldown, budget=budget
            )
            key = s.configure(config, member="bench@example.com", application="bench")
            url, _ = s.gateway()
            results[label] = asyncio.run(scenario(sim, url, key, args))

    print(
        f"Retry storm: {args.clients} clients, {args.seconds:.0f} s, primary at capacity "
        f"until {args.recover_at:.0f} s, breaker cooldown {args.cooldown:.0f} s"
    )
    print(f"  {'':44}{'Sluice':>12}{'no breaker':>12}")
    rows = [
        ("client calls", "calls", "{:.0f}"),
        ("attempts on the failing primary", "primary_attempts", "{:.0f}"),
        ("  per client call while it failed", "ratio", "{:.3f}x"),
        ("  per client call after the first second", "ratio_later", "{:.3f}x"),
        ("client calls served", "served", "{:.2f} %"),
        ("recovery -> first call served by primary", "back_after", "{:.1f} s"),
    ]
    for label, key, fmt in rows:
        values = "".join(f"{fmt.format(results[r][key]):>12}" for r in results)
        print(f"  {label:44}{values}")


if __name__ == "__main__":
    main()
