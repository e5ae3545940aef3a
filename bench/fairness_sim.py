"""Fair share in virtual time: the in-process deployment state (the real slot policy) driven
by a seeded schedule of arrivals and call ends, with `now=` passed in, so the figures do not
depend on the machine's load and a rule change can be judged over many seeds in seconds.

    .venv/bin/python bench/fairness_sim.py [--seconds 300] [--seeds 1,2,3] [--capacity 8]

Four quiet members at 3.8 calls/s each and a loud one at 10x that (2x the capacity in all),
all interactive, calls of 300 ms +- 30 %, the deployment sized to the provider (no capacity
errors here: only the policy is measured). Printed per seed: the quiet members' p50/p99
from arrival to answer with the loud member present and absent (the +% is the cost the
loud member puts on them), and the shares of the quiet and the loud members' calls served
with the loud member present.
"""

import argparse
import asyncio
import heapq
import itertools
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from routing.deployment_state.interface import Limits, Result  # noqa: E402
from routing.deployment_state.local import LocalDeploymentState  # noqa: E402
from routing.deployment_state.slot_policy import INTERACTIVE, Claim  # noqa: E402

CALL = 0.3  # seconds a call takes upstream, on average
SPREAD = 0.3  # either side, as a share of CALL
QUIET_RATE = 3.8  # calls a second per quiet member
WAIT = 5.0  # seconds an interactive call may queue (the default)
PROMPT, ANSWER = 60, 16  # tokens of a call: what fair share is charged


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


async def run(seconds: float, seed: int, capacity: int, loud: bool) -> dict[str, list[float]]:
    """Latencies (s) per member of the calls served, and each member's count of calls."""
    rng = random.Random(seed)
    rates = {f"quiet-{i}": QUIET_RATE for i in range(4)}
    draws = random.Random(seed + 1)
    arrivals: list[tuple[float, str]] = []
    for member, rate in ({**rates, "loud": 10 * QUIET_RATE} if loud else rates).items():
        t = 0.0
        while True:
            t += rng.expovariate(rate)
            if t >= seconds:
                break
            arrivals.append((t, member))
    state = LocalDeploymentState()
    limits = Limits(max_concurrency=capacity, threshold=0)
    name = "d"
    ids = itertools.count()
    events: list[tuple[float, int, str, str]] = []  # (at, order, kind, slot)
    for at, member in arrivals:
        heapq.heappush(events, (at, next(ids), "arrive", member))
    calls: dict[str, tuple[str, float]] = {}  # slot -> (member, arrived)
    queued: set[str] = set()
    served: dict[str, list[float]] = {}
    offered: dict[str, int] = {}

    def started(slot: str, now: float) -> None:
        heapq.heappush(
            events, (now + CALL * (1 + draws.uniform(-SPREAD, SPREAD)), next(ids), "end", slot)
        )

    async def granted(now: float) -> None:
        for slot in await state.sweep(name, limits, sorted(queued), now=now):
            queued.discard(slot)
            started(slot, now)

    while events:
        now, _, kind, what = heapq.heappop(events)
        if kind == "arrive":
            slot = f"s{next(ids)}"
            calls[slot] = (what, now)
            offered[what] = offered.get(what, 0) + 1
            claim = Claim(INTERACTIVE, what, float(PROMPT), WAIT)
            admission = await state.acquire_slot(
                name, limits, slot, retry=False, claim=claim,
                wait_until=now + WAIT, deadline=now + 60, now=now,
            )  # fmt: skip
            if admission.admitted:
                started(slot, now)
            elif admission.queued:
                queued.add(slot)
                heapq.heappush(events, (admission.until, next(ids), "give up", slot))
            await granted(now)
        elif kind == "give up":
            if what in queued:
                queued.discard(what)
                departure = await state.leave(name, limits, what, now=now)
                if departure.granted:
                    started(what, now)
        else:
            member, arrived = calls.pop(what)
            served.setdefault(member, []).append(now - arrived)
            await state.release(
                name, limits, what, Result.SUCCESS,
                service=float(PROMPT + 2 * ANSWER), took=now - arrived, now=now,
            )  # fmt: skip
            await granted(now)
    return {"served": served, "offered": offered}  # type: ignore[dict-item]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--capacity", type=int, default=8)
    args = parser.parse_args()
    print(
        f"{'seed':>5} {'quiet p50 ms':>18} {'quiet p99 ms':>18} {'p99 +%':>7}"
        f" {'quiet served':>12} {'loud served':>12}"
    )
    for seed in (int(s) for s in args.seeds.split(",")):
        out = {}
        for loud in (True, False):
            result = asyncio.run(run(args.seconds, seed, args.capacity, loud))
            quiet = [x for m, v in result["served"].items() if m != "loud" for x in v]
            out[loud] = (pct(quiet, 50) * 1000, pct(quiet, 99) * 1000, result)
        with_, without = out[True], out[False]
        loud_served = len(with_[2]["served"].get("loud", [])) / with_[2]["offered"]["loud"]
        quiet_asked = sum(n for m, n in with_[2]["offered"].items() if m != "loud")
        quiet_served = sum(len(v) for m, v in with_[2]["served"].items() if m != "loud")
        print(
            f"{seed:5} {with_[0]:8.0f} / {without[0]:<7.0f} {with_[1]:8.0f} / {without[1]:<7.0f}"
            f" {(with_[1] / without[1] - 1) * 100:+6.1f}% {quiet_served / quiet_asked * 100:11.1f}%"
            f" {loud_served * 100:11.1f}%"
        )


if __name__ == "__main__":
    main()
