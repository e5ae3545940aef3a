"""Priority admission under overload, side by side with admission switched off, in one run.

    .venv/bin/python bench/overload.py [--capacity 8] [--call-ms 200] [--call-spread 0.5]
                                       [--seconds 10]

The simulator's model holds `capacity` calls at a time, each `call-ms` long on average
(drawn within `call-spread` of it either side: real answers vary, and calls all of one
length keep a full deployment's slots freeing in lockstep, so a newcomer waits for the next
wave instead of the next slot); the deployment in front of it has the same limit. Calls
arrive (Poisson) at 2x and 5x what that serves, for `seconds`: 20 % interactive, 80 %
batch, from 5 members, one of them sending 10x as much as each of the others. Interactive
clients send once (success: 200 within the default 5 s wait limit). Batch clients honour
Retry-After until their call is served; a batch call is lost if it gets an answer without
Retry-After (or a connection error).

For each run: interactive success rate and p50/p99 queue wait (X-Sluice-Queue-Ms); batch
served, served after waiting in the queue, refusals with Retry-After, lost; each member's
share of the calls served while calls arrived; goodput (calls served per second while
calls arrived, from one call length after the start, against what the deployment can
serve). Then the quiet members' waits with the noisy member present and absent.
"Admission off" is the same gateway with SLUICE_PRIORITY_ADMISSION=0: first come, first
served, a full deployment answered at once with 503 and Retry-After.

    .venv/bin/python bench/overload.py --case smaller [--baseline main] [--configured 64]
                                       [--real 4] [--member-concurrency 16 --member-rpm 600]

"Provider smaller than configured": the deployment is configured for
`configured` calls at a time (the demo's `small`: 64, default breaker 3 errors / 300 s),
the provider really takes `real` calls of 300 ms. 40 batch clients call in a loop
(honouring Retry-After, at most 10 s), an interactive call arrives every 0.5 s, for 11 s.
Run twice, side by side: the gateway from git ref `baseline` (main's code, exported with
git archive) and this checkout. Printed: interactive served and queue wait, batch served
per second against what the provider serves, refusals, the longest Retry-After, the
provider's capacity errors, and whether a call 1 s after the burst is served (a 5-minute
blackout is not). With `--configured 4 --member-concurrency 16 --member-rpm 600` it is
the member's own limits, spent by their batch.

Open loop (bench/openloop.py: arrivals scheduled in advance, latency from the scheduled
time), a provider that takes `capacity` calls of 300 ms ± 30 %, 20 % interactive / 80 %
batch over five members, batch calls sent with `X-Sluice-Max-Wait: 20`, the default
breaker (3 failures), `seconds` of arrivals a point. Each table puts this checkout beside
first come, first served (SLUICE_PRIORITY_ADMISSION=0) and, with `--baseline REF`, the
gateway from that git ref, in one run:

    .venv/bin/python bench/overload.py --case sweep [--seconds 60] [--sizes 8,32]
                                       [--factors 1,2,5,10] [--baseline main] [--workers 2]

  offered load 1x … 10x the provider's capacity, the deployment sized right (8) and 4x too
  large (32): interactive and batch served, inversions (an interactive call not served
  while a batch call that arrived after it got a slot), goodput (calls served a second
  while calls arrive, against the provider's capacity), 502s, attempts cut by a deadline,
  Retry-After of refused batch calls, and the share of those served when they came back then.

    .venv/bin/python bench/overload.py --case drop [--seconds 90]

  1.5x load; the provider's capacity halves from 30 s to 60 s: interactive and batch served
  before, during and after the drop, and how soon batch is served again after it.

    .venv/bin/python bench/overload.py --case storm

  the primary of a two-deployment chain fails every call from 5 s to 65 s: calls served,
  attempts on the failing primary per call, and how long after its return the primary
  serves again.

    .venv/bin/python bench/overload.py --case fairness

  all interactive, five members, 2x capacity in all, one member sending 10x the others:
  the quiet members' p50/p99 with the loud one present and absent.
"""

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import openloop
from harness import Stack, stack

CONFIG = """
[[upstreams]]
name = "sim"
base_url = "{simulator}/v1"
[[deployments]]
name = "primary"
upstream = "sim"
model = "m"
max_concurrency = {capacity}
breaker_threshold = 0
[[routes]]
name = "m"
chain = ["primary"]
timeout_seconds = 600
[[teams]]
slug = "bench"
[[applications]]
slug = "bench"
team = "bench"
routes = ["m"]
"""
MEMBERS = {"noisy": 10, "quiet-1": 1, "quiet-2": 1, "quiet-3": 1, "quiet-4": 1}
INTERACTIVE_SHARE = 0.2
DRAIN_CAP = 300.0  # seconds after the arrivals stop that batch clients may keep trying


Arrival = openloop.Arrival


@dataclass
class Outcome:
    arrival: Arrival
    served_at: float | None = None  # seconds from the start
    queue_ms: float = 0.0  # of the call that was served (or refused, for interactive)
    latency: float = 0.0  # seconds from arrival until served
    refusals: int = 0  # answers with Retry-After before being served
    lost: str = ""  # why: the exception, or the answer's status


@dataclass
class Run:
    label: str
    capacity_rps: float
    seconds: float
    call_seconds: float
    outcomes: list[Outcome] = field(default_factory=list)

    def of(self, priority: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.arrival.priority == priority]

    def in_window(self, o: Outcome) -> bool:
        """Served while calls arrived, from the first moment a call could end (one call
        length after the start)."""
        return o.served_at is not None and self.call_seconds <= o.served_at <= self.seconds

    def goodput(self) -> float:
        """Calls served per second in that window, against what the deployment can serve."""
        served = sum(self.in_window(o) for o in self.outcomes)
        return served / (self.seconds - self.call_seconds) / self.capacity_rps


async def client(
    session: aiohttp.ClientSession, url: str, keys: dict[str, str], a: Arrival, start: float
) -> Outcome:
    await asyncio.sleep(max(0.0, start + a.at - time.monotonic()))
    outcome = Outcome(a)
    body = {"model": "m", "messages": [{"role": "user", "content": "Overload me."}]}
    headers = {"Authorization": f"Bearer {keys[a.member]}", "X-Sluice-Priority": a.priority}
    while True:
        try:
            async with session.post(url, json=body, headers=headers) as response:
                await response.read()
                status, retry_after = response.status, response.headers.get("Retry-After")
                outcome.queue_ms = float(response.headers.get("X-Sluice-Queue-Ms", 0))
        except aiohttp.ClientError as exc:
            outcome.lost = type(exc).__name__
            return outcome
        now = time.monotonic() - start
        if status == 200:
            outcome.served_at, outcome.latency = now, now - a.at
            return outcome
        if a.priority == "interactive":
            return outcome  # refused: interactive users do not wait minutes
        if retry_after is None or now > DRAIN_CAP + a.at:
            outcome.lost = f"status {status}"
            return outcome
        outcome.refusals += 1
        await asyncio.sleep(float(retry_after))


async def drive(url: str, keys: dict[str, str], schedule: list[Arrival]) -> list[Outcome]:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic() + 0.2
        return await asyncio.gather(*(client(session, url, keys, a, start) for a in schedule))


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def report(runs: list[Run]) -> None:
    width = 24
    print(f"  {'':34}" + "".join(f"{r.label:>{width}}" for r in runs))

    def row(label: str, values: list[str]) -> None:
        print(f"  {label:34}" + "".join(f"{v:>{width}}" for v in values))

    inter = [r.of("interactive") for r in runs]
    batch = [r.of("batch") for r in runs]
    row("interactive calls", [str(len(i)) for i in inter])
    row(
        "  success",
        [f"{sum(o.served_at is not None for o in i) / max(1, len(i)) * 100:.1f} %" for i in inter],
    )
    for p in (50, 99):
        row(
            f"  queue wait p{p} (ms)",
            [f"{pct([o.queue_ms for o in i if o.served_at is not None], p):.0f}" for i in inter],
        )
    row("batch calls", [str(len(b)) for b in batch])
    row("  served", [str(sum(o.served_at is not None for o in b)) for b in batch])
    row(
        "  of them after queueing",
        [str(sum(o.served_at is not None and o.queue_ms > 0 for o in b)) for b in batch],
    )
    row("  refusals with Retry-After", [str(sum(o.refusals for o in b)) for b in batch])
    row(
        "  calls refused at least once",
        [str(sum(o.refusals > 0 for o in b)) for b in batch],
    )
    row("  lost", [str(sum(bool(o.lost) for o in b)) for b in batch])
    for why in sorted({o.lost for r in runs for o in r.of("batch") if o.lost}):
        row(f"    {why}", [str(sum(o.lost == why for o in b)) for b in batch])
    row(
        "  p50 / max time to served (s)",
        [
            f"{pct([o.latency for o in b if o.served_at], 50):.1f} / "
            f"{max((o.latency for o in b if o.served_at), default=0):.1f}"
            for b in batch
        ],
    )
    for member in MEMBERS:
        shares = []
        for r in runs:
            window = [o for o in r.outcomes if r.in_window(o)]
            mine = sum(o.arrival.member == member for o in window)
            shares.append(f"{mine / max(1, len(window)) * 100:.1f} %")
        row(f"share of service: {member}", shares)
    row("goodput (of capacity)", [f"{r.goodput() * 100:.1f} %" for r in runs])


def quiet_waits(run: Run, priority: str) -> list[float]:
    """The quiet members' queue wait (mean, p50) and time to served (mean, p50), in ms."""
    quiet = [
        o
        for o in run.of(priority)
        if o.arrival.member.startswith("quiet") and o.served_at is not None
    ]
    waits, latencies = [o.queue_ms for o in quiet], [o.latency * 1000 for o in quiet]
    return [statistics.mean(waits), pct(waits, 50), statistics.mean(latencies), pct(latencies, 50)]


SMALLER_CONFIG = """
[[upstreams]]
name = "sim"
base_url = "{simulator}/v1"
[[deployments]]
name = "configured"
upstream = "sim"
model = "real"
max_concurrency = {configured}
[[routes]]
name = "smaller"
chain = ["configured"]
[[teams]]
slug = "bench"
[[applications]]
slug = "bench"
team = "bench"
routes = ["smaller"]
[[members]]
email = "user@example.com"
team = "bench"
"""
SMALLER_BATCH_CLIENTS = 40
SMALLER_CALL_MS = 300


@dataclass
class BurstRun:
    label: str
    seconds: float = 0.0
    interactive: list[tuple[int, float]] = field(default_factory=list)  # status, queue ms
    batch_served: int = 0
    batch_refusals: dict[int, int] = field(default_factory=dict)
    longest_retry_after: float = 0.0
    provider_served: int = 0
    provider_capacity_errors: int = 0
    after: int = 0  # status of a call made a second after the burst


async def burst(url: str, key: str, seconds: float, run: BurstRun) -> None:
    body = {"model": "smaller", "messages": [{"role": "user", "content": "Burst."}]}
    stop = asyncio.Event()

    async def call(session: aiohttp.ClientSession, priority: str) -> tuple[int, float, str]:
        headers = {"Authorization": f"Bearer {key}", "X-Sluice-Priority": priority}
        async with session.post(url, json=body, headers=headers) as response:
            await response.read()
            queue_ms = float(response.headers.get("X-Sluice-Queue-Ms", 0))
            return response.status, queue_ms, response.headers.get("Retry-After", "")

    async def batch_client(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            try:
                status, _, retry_after = await call(session, "batch")
            except aiohttp.ClientError:
                status, retry_after = 0, "1"
            if stop.is_set():
                return
            if status == 200:
                run.batch_served += 1
                continue
            run.batch_refusals[status] = run.batch_refusals.get(status, 0) + 1
            wait = float(retry_after or 1)
            run.longest_retry_after = max(run.longest_retry_after, wait)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), min(wait, 10))

    async def interactive(session: aiohttp.ClientSession, at: float) -> None:
        await asyncio.sleep(at)
        try:
            status, queue_ms, _ = await call(session, "interactive")
        except aiohttp.ClientError:
            status, queue_ms = 0, 0.0
        run.interactive.append((status, queue_ms))

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None)
    ) as session:
        started = time.monotonic()
        clients = [asyncio.create_task(batch_client(session)) for _ in range(SMALLER_BATCH_CLIENTS)]
        count = round(seconds / 0.5)
        await asyncio.gather(*(interactive(session, 0.5 * (i + 1)) for i in range(count)))
        run.seconds = time.monotonic() - started
        stop.set()
        await asyncio.gather(*clients)
        await asyncio.sleep(1.0)
        run.after = (await call(session, "interactive"))[0]


def provider_stats(simulator: str) -> tuple[int, int]:
    import httpx

    model = httpx.get(f"{simulator}/stats").json()["models"]["real"]
    return model["served"], model["capacity_errors"]


def smaller_case(args: argparse.Namespace) -> None:
    with stack() as s:
        simulator = s.simulator(
            "--model", f"real:{args.real}", "--latency-ms", str(SMALLER_CALL_MS)
        )  # fmt: skip
        config = SMALLER_CONFIG.format(simulator=simulator, configured=args.configured)
        if args.member_concurrency or args.member_rpm:
            config += '[[limits]]\nscope = "member"\nname = "user@example.com"\n'
            if args.member_concurrency:
                config += f"max_concurrency = {args.member_concurrency}\n"
            if args.member_rpm:
                config += f"requests_per_minute = {args.member_rpm}\n"
        key = s.configure(config, member="user@example.com", application="bench")
        capacity = args.real / (SMALLER_CALL_MS / 1000)
        state = "Redis" if s.env.get("REDIS_URL") else "in process"
        print(
            f"Provider smaller than configured: deployment configured for {args.configured}, "
            f"the provider takes {args.real} calls of {SMALLER_CALL_MS} ms "
            f"({capacity:.1f} calls/s); {SMALLER_BATCH_CLIENTS} batch clients and an "
            f"interactive call every 0.5 s for {args.seconds:.0f} s; member limits: "
            f"concurrency {args.member_concurrency or '-'}, rpm {args.member_rpm or '-'}; "
            f"{args.workers} gateway worker(s), state {state}"
        )
        sources = [(f"before ({args.baseline})", s.checkout(args.baseline)), ("after", None)]
        runs = []
        for label, source in sources:
            env = {"SLUICE_REDIS_PREFIX": uuid.uuid4().hex}
            extra = {"source": source} if source is not None else {}
            gateway, _ = s.gateway(workers=args.workers, env=env, **extra)
            run = BurstRun(label)
            served, errors = provider_stats(simulator)
            asyncio.run(burst(f"{gateway}/v1/chat/completions", key, args.seconds, run))
            served_after, errors_after = provider_stats(simulator)
            run.provider_served = served_after - served
            run.provider_capacity_errors = errors_after - errors
            runs.append(run)
            s.stop_last()
            time.sleep(1.0)  # the provider's slots come free

        width = 22
        print(f"  {'':38}" + "".join(f"{r.label:>{width}}" for r in runs))

        def row(label: str, values: list[str]) -> None:
            print(f"  {label:38}" + "".join(f"{v:>{width}}" for v in values))

        def served(r: BurstRun) -> int:
            return sum(status == 200 for status, _ in r.interactive)

        row("interactive served", [f"{served(r)} of {len(r.interactive)}" for r in runs])
        for p in (50, 99):
            row(
                f"  queue wait p{p} (ms), served ones",
                [f"{pct([q for st, q in r.interactive if st == 200], p):.0f}" for r in runs],
            )
        row(
            "  refused (status: count)",
            [
                " ".join(
                    f"{st}:{n}"
                    for st, n in sorted(Counter(st for st, _ in r.interactive if st != 200).items())
                )
                or "-"
                for r in runs
            ],
        )
        row("batch served", [str(r.batch_served) for r in runs])
        row(
            "  per second (provider's capacity)",
            [f"{r.batch_served / r.seconds:.1f} ({capacity:.1f})" for r in runs],
        )
        row(
            "  refusals (status: count)",
            [" ".join(f"{st}:{n}" for st, n in sorted(r.batch_refusals.items())) or "-"
             for r in runs],
        )  # fmt: skip
        row("  longest Retry-After (s)", [f"{r.longest_retry_after:.0f}" for r in runs])
        row("provider: served", [str(r.provider_served) for r in runs])
        row("provider: capacity errors", [str(r.provider_capacity_errors) for r in runs])
        row("a call 1 s after the burst", [str(r.after) for r in runs])


OPEN_CONFIG = """
[[upstreams]]
name = "sim"
base_url = "{simulator}/v1"
[[deployments]]
name = "primary"
upstream = "sim"
model = "m"
max_concurrency = {size}
[[deployments]]
name = "fallback"
upstream = "sim"
model = "f"
max_concurrency = {size}
[[routes]]
name = "m"
chain = ["primary"]
[[routes]]
name = "storm"
chain = ["primary", "fallback"]
[[teams]]
slug = "bench"
[[applications]]
slug = "bench"
team = "bench"
routes = ["m", "storm"]
"""
OPEN_MEMBERS = {f"member-{i}": 1.0 for i in range(1, 6)}
OPEN_CALL_MS, OPEN_SPREAD, BATCH_MAX_WAIT = 300, 0.3, "20"


def _batch_wait(a: openloop.Arrival) -> dict[str, str]:
    return {"X-Sluice-Max-Wait": BATCH_MAX_WAIT} if a.priority == "batch" else {}


@dataclass
class Gateways:
    """The gateways a table compares: this checkout, first come first served, a baseline."""

    s: Stack
    workers: int
    baseline: str | None

    def modes(self) -> list[tuple[str, dict[str, str], Path | None]]:
        modes: list[tuple[str, dict[str, str], Path | None]] = [
            ("sluice", {}, None),
            ("fcfs", {"SLUICE_PRIORITY_ADMISSION": "0"}, None),
        ]
        if self.baseline:
            modes.append((f"before ({self.baseline})", {}, self.s.checkout(self.baseline)))
        return modes

    def start(self, env: dict[str, str], source: Path | None) -> str:
        env = env | {"SLUICE_REDIS_PREFIX": uuid.uuid4().hex}
        extra = {"source": source} if source is not None else {}
        return self.s.gateway(workers=self.workers, env=env, **extra)[0]


def _open_stack(s: Stack, capacity: int, size: int, *, seed: int) -> tuple[str, dict[str, str]]:
    simulator = s.simulator(
        "--model", f"m:{capacity}", "--model", f"f:{capacity}",
        "--latency-ms", str(OPEN_CALL_MS), "--latency-spread", str(OPEN_SPREAD),
        "--seed", str(seed),
    )  # fmt: skip
    config = OPEN_CONFIG.format(simulator=simulator, size=size)
    config += "".join(
        f'[[members]]\nemail = "{m}@example.com"\nteam = "bench"\n' for m in OPEN_MEMBERS
    )
    s.configure(config, member="member-1@example.com", application="bench")
    keys = {m: s.issue_key(f"{m}@example.com", "bench") for m in OPEN_MEMBERS}
    return simulator, keys


async def _sim_admin(simulator: str, change: dict) -> None:
    """Change the simulator's model `m` live (capacity, faults)."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{simulator}/admin/models/m", json=change) as r,
    ):
        r.raise_for_status()


def _sim_stats(simulator: str, model: str = "m") -> dict:
    import httpx

    return httpx.get(f"{simulator}/stats").json()["models"][model]


def _table(title: str, columns: list[str], rows: list[tuple[str, list[str]]]) -> None:
    print(f"\n{title}")
    width = max(18, *(len(c) + 2 for c in columns))
    print(f"  {'':34}" + "".join(f"{c:>{width}}" for c in columns))
    for label, values in rows:
        print(f"  {label:34}" + "".join(f"{v:>{width}}" for v in values))


def _share(results: list[openloop.Result], priority: str) -> str:
    mine = [r for r in results if r.arrival.priority == priority]
    if not mine:
        return "-"
    return f"{sum(r.served for r in mine) / len(mine) * 100:.1f} %"


def _goodput(results: list[openloop.Result], capacity_rps: float, seconds: float) -> float:
    """Calls served a second (first tries and tries again after Retry-After), from one
    call length after the start until the arrivals end, against the provider's capacity."""
    start = OPEN_CALL_MS / 1000
    served = sum(1 for r in results if r.served and start <= r.ended <= seconds)
    served += sum(1 for r in results if r.retried == 200 and start <= r.retried_ended <= seconds)
    return served / (seconds - start) / capacity_rps


def inversions(results: list[openloop.Result]) -> int:
    """Interactive calls not served while a batch call that arrived after them was given a
    slot (its arrival plus its queue wait) before they were answered."""
    granted = sorted(
        (r.arrival.at + r.queue_ms / 1000, r.arrival.at)
        for r in results
        if r.served and r.arrival.priority == "batch"
    )
    count = 0
    for r in results:
        if r.arrival.priority != "interactive" or r.served:
            continue
        if any(r.arrival.at < arrived and at < r.ended for at, arrived in granted):
            count += 1
    return count


def _open_rows(
    runs: list[tuple[list[openloop.Result], dict]], capacity_rps: float, seconds: float
) -> list[tuple[str, list[str]]]:
    def count(results: list[openloop.Result], status: int) -> str:
        return str(sum(r.status == status for r in results))

    def retry_afters(results: list[openloop.Result]) -> str:
        values = [r.retry_after for r in results if r.arrival.priority == "batch" and r.retry_after]
        if not values:
            return "-"
        return f"{openloop.pct(values, 50):.0f} / {max(values):.0f}"

    def came_back(results: list[openloop.Result]) -> str:
        back = [r for r in results if r.retried is not None]
        return f"{sum(r.retried == 200 for r in back)} of {len(back)}" if back else "-"

    def p99(results: list[openloop.Result]) -> str:
        served = [
            r.latency * 1000 for r in results if r.served and r.arrival.priority == "interactive"
        ]
        return f"{openloop.pct(served, 99):.0f}"

    def queue_p99(results: list[openloop.Result]) -> str:
        waits = [r.queue_ms for r in results if r.served and r.arrival.priority == "interactive"]
        return f"{openloop.pct(waits, 99):.0f}"

    return [
        ("interactive served", [_share(r, "interactive") for r, _ in runs]),
        ("  inversions (later batch first)", [str(inversions(r)) for r, _ in runs]),
        ("  p99 from scheduled time (ms)", [p99(r) for r, _ in runs]),
        ("  p99 queue wait in Sluice (ms)", [queue_p99(r) for r, _ in runs]),
        ("batch served", [_share(r, "batch") for r, _ in runs]),
        (
            "goodput (served / capacity)",
            [f"{_goodput(r, capacity_rps, seconds) * 100:.0f} %" for r, _ in runs],
        ),
        ("answered 502", [count(r, 502) for r, _ in runs]),
        ("answered 503", [count(r, 503) for r, _ in runs]),
        ("answered 504", [count(r, 504) for r, _ in runs]),
        ("batch Retry-After p50 / max (s)", [retry_afters(r) for r, _ in runs]),
        ("  came back then: served", [came_back(r) for r, _ in runs]),
        ("provider: cancelled mid-call", [str(st["cancelled"]) for _, st in runs]),
        ("provider: at-capacity 503s", [str(st["capacity_errors"]) for _, st in runs]),
    ]


def _run_open(
    url: str,
    simulator: str,
    keys: dict[str, str],
    arrivals: list[openloop.Arrival],
    *,
    model: str = "m",
    retry_batch: bool = False,
    events: tuple = (),
) -> tuple[list[openloop.Result], dict]:
    before = _sim_stats(simulator)
    results = asyncio.run(
        openloop.fire(
            f"{url}/v1/chat/completions",
            keys,
            arrivals,
            model=model,
            headers_for=_batch_wait,
            retry_batch=retry_batch,
            events=events,
        )
    )
    after = _sim_stats(simulator)
    return results, {k: after[k] - before[k] for k in ("cancelled", "capacity_errors", "served")}


def sweep_case(args: argparse.Namespace) -> None:
    capacity_rps = args.capacity / (OPEN_CALL_MS / 1000)
    sizes = [int(v) for v in args.sizes.split(",")]
    factors = [float(v) for v in args.factors.split(",")]
    with stack() as s:
        gateways = Gateways(s, args.workers, args.baseline)
        modes = gateways.modes()
        for size in sizes:
            simulator, keys = _open_stack(s, args.capacity, size, seed=args.seed)
            for factor in factors:
                load = openloop.Load(
                    factor * capacity_rps, args.seconds, OPEN_MEMBERS, seed=args.seed
                )
                runs = []
                for _, env, source in modes:
                    url = gateways.start(env, source)
                    runs.append(_run_open(url, simulator, keys, load.arrivals, retry_batch=True))
                    s.stop_last()
                    time.sleep(OPEN_CALL_MS / 1000 * 2)  # the provider's slots come free
                _table(
                    f"{factor:g}x capacity ({len(load.arrivals)} calls in {args.seconds:.0f} s), "
                    f"deployment max_concurrency {size}, provider {args.capacity} x "
                    f"{OPEN_CALL_MS} ms ± {OPEN_SPREAD:.0%} ({capacity_rps:.1f} calls/s), "
                    f"{args.workers} worker(s)",
                    [m for m, _, _ in modes],
                    _open_rows(runs, capacity_rps, args.seconds),
                )
            s.stop_last()  # the simulator


def _phase(results: list[openloop.Result], priority: str, start: float, end: float) -> str:
    mine = [r for r in results if r.arrival.priority == priority and start <= r.arrival.at < end]
    if not mine:
        return "-"
    return f"{sum(r.served for r in mine) / len(mine) * 100:.1f} %"


def drop_case(args: argparse.Namespace) -> None:
    seconds = args.seconds if args.seconds != 10 else 90.0
    drop, back = seconds / 3, 2 * seconds / 3
    capacity_rps = args.capacity / (OPEN_CALL_MS / 1000)
    with stack() as s:
        gateways = Gateways(s, args.workers, args.baseline)
        simulator, keys = _open_stack(s, args.capacity, args.capacity, seed=args.seed)
        load = openloop.Load(1.5 * capacity_rps, seconds, OPEN_MEMBERS, seed=args.seed)

        events = (
            (drop, lambda: _sim_admin(simulator, {"capacity": args.capacity // 2})),
            (back, lambda: _sim_admin(simulator, {"capacity": args.capacity})),
        )
        modes = gateways.modes()
        runs = []
        for _, env, source in modes:
            url = gateways.start(env, source)
            runs.append(_run_open(url, simulator, keys, load.arrivals, events=events)[0])
            s.stop_last()
            time.sleep(1.0)

        def batch_again(results: list[openloop.Result]) -> str:
            served = sorted(r.ended for r in results if r.served and r.arrival.priority == "batch")
            after = [t for t in served if t >= back]
            return f"{after[0] - back:.1f} s" if after else "never"

        phases = (("before", 0, drop), ("during", drop, back), ("after", back, seconds))
        rows = []
        for priority in ("interactive", "batch"):
            for label, start, end in phases:
                rows.append(
                    (f"{priority} served, {label}", [_phase(r, priority, start, end) for r in runs])
                )
        rows.append(("batch served again after the drop", [batch_again(r) for r in runs]))
        rows.append(("answered 502", [str(sum(x.status == 502 for x in r)) for r in runs]))
        _table(
            f"Capacity drop: 1.5x load ({len(load.arrivals)} calls in {seconds:.0f} s), the "
            f"provider takes {args.capacity} then {args.capacity // 2} calls from {drop:.0f} s "
            f"to {back:.0f} s; {args.workers} worker(s)",
            [m for m, _, _ in modes],
            rows,
        )


def storm_case(args: argparse.Namespace) -> None:
    seconds, fail_from, fail_until = 90.0, 5.0, 65.0
    capacity_rps = args.capacity / (OPEN_CALL_MS / 1000)
    with stack() as s:
        gateways = Gateways(s, args.workers, args.baseline)
        simulator, keys = _open_stack(s, args.capacity, args.capacity, seed=args.seed)
        load = openloop.Load(0.5 * capacity_rps, seconds, OPEN_MEMBERS, seed=args.seed)

        seen: dict[str, int] = {}  # the primary's request count when it fails, and recovers

        async def fail() -> None:
            seen["from"] = _sim_stats(simulator)["requests"]
            await _sim_admin(simulator, {"faults": {"server_error": 1.0}})

        async def recover() -> None:
            seen["until"] = _sim_stats(simulator)["requests"]
            await _sim_admin(simulator, {"faults": {}})

        events = ((fail_from, fail), (fail_until, recover))
        modes = gateways.modes()
        runs = []
        for _, env, source in modes:
            url = gateways.start(env, source)
            results = asyncio.run(
                openloop.fire(
                    f"{url}/v1/chat/completions", keys, load.arrivals, model="storm",
                    headers_for=_batch_wait, events=events,
                )
            )  # fmt: skip
            during = sum(1 for r in results if fail_from <= r.arrival.at < fail_until)
            runs.append((results, (seen["until"] - seen["from"]) / max(1, during)))
            s.stop_last()
            time.sleep(1.0)
        _table(
            f"Storm: chain primary -> fallback at 0.5x load ({len(load.arrivals)} calls in "
            f"{seconds:.0f} s); the primary fails every call from {fail_from:.0f} s to "
            f"{fail_until:.0f} s; {args.workers} worker(s)",
            [m for m, _, _ in modes],
            [
                ("calls served", [_share_all(r) for r, _ in runs]),
                ("attempts on the failing primary per call", [f"{n:.3f}" for _, n in runs]),
                (
                    "primary serves again after",
                    [_primary_back(url_results, fail_until) for url_results, _ in runs],
                ),
            ],
        )


def _share_all(results: list[openloop.Result]) -> str:
    return f"{sum(r.served for r in results) / max(1, len(results)) * 100:.1f} %"


def _primary_back(results: list[openloop.Result], recovered: float) -> str:
    """Seconds from the primary's return to the first call it served again."""
    again = [r.ended for r in results if r.served_by == "primary" and r.arrival.at >= recovered]
    return f"{min(again) - recovered:.1f} s" if again else "never"


def fairness_case(args: argparse.Namespace) -> None:
    capacity_rps = args.capacity / (OPEN_CALL_MS / 1000)
    loud = {"member-1": 10.0} | {m: 1.0 for m in list(OPEN_MEMBERS)[1:]}
    quiet = [m for m in OPEN_MEMBERS if m != "member-1"]
    with stack() as s:
        gateways = Gateways(s, args.workers, args.baseline)
        simulator, keys = _open_stack(s, args.capacity, args.capacity, seed=args.seed)
        load = openloop.Load(2 * capacity_rps, args.seconds, loud, 1.0, seed=args.seed)
        alone = [a for a in load.arrivals if a.member in quiet]
        modes = gateways.modes()
        columns, rows = [], {}
        for mode, env, source in modes:
            for label, arrivals in (("loud present", load.arrivals), ("loud absent", alone)):
                url = gateways.start(env, source)
                results = _run_open(url, simulator, keys, arrivals)[0]
                s.stop_last()
                time.sleep(1.0)
                columns.append(f"{mode}, {label}")
                mine = [r for r in results if r.arrival.member in quiet]
                served = [r.latency * 1000 for r in mine if r.served]
                rows.setdefault("quiet members served", []).append(_share(mine, "interactive"))
                refused = Counter(f"{r.status} {r.code}".strip() for r in mine if not r.served)
                rows.setdefault("  quiet not served (status code)", []).append(
                    ", ".join(f"{n} x {k}" for k, n in refused.most_common(1)) or "-"
                )
                for p in (50, 99):
                    rows.setdefault(f"  quiet p{p} from scheduled (ms)", []).append(
                        f"{openloop.pct(served, p):.0f}"
                    )
                waits = [r.queue_ms for r in mine if r.served]
                rows.setdefault("  quiet queue wait p99 (ms)", []).append(
                    f"{openloop.pct(waits, 99):.0f}"
                )
                louds = [r for r in results if r.arrival.member == "member-1"]
                rows.setdefault("loud member served", []).append(_share(louds, "interactive"))
        _table(
            f"Fairness: all interactive at 2x capacity ({len(load.arrivals)} calls in "
            f"{args.seconds:.0f} s), member-1 sends 10x each of the four others",
            columns,
            list(rows.items()),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=8)
    parser.add_argument("--call-ms", type=float, default=200)
    parser.add_argument("--call-spread", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-off", action="store_true", help="no run with admission off")
    parser.add_argument("--workers", type=int, default=1, help="more than 1 needs REDIS_URL")
    parser.add_argument(
        "--case",
        choices=["overload", "smaller", "sweep", "drop", "storm", "fairness"],
        default="overload",
    )
    parser.add_argument("--sizes", default="8,32", help="sweep: deployment max_concurrency")
    parser.add_argument("--factors", default="1,2,5,10", help="sweep: load / capacity")
    parser.add_argument(
        "--baseline", default=None, help="git ref of the 'before' gateway (smaller: main)"
    )
    parser.add_argument("--configured", type=int, default=64)
    parser.add_argument("--real", type=int, default=4)
    parser.add_argument("--member-concurrency", type=int, default=0)
    parser.add_argument("--member-rpm", type=int, default=0)
    args = parser.parse_args()
    if args.case == "smaller":
        args.seconds = args.seconds if args.seconds != 10 else 11.0
        args.baseline = args.baseline or "main"
        smaller_case(args)
        return
    open_cases = {"sweep": sweep_case, "drop": drop_case, "storm": storm_case}
    if args.case in open_cases or args.case == "fairness":
        if args.capacity == 8 and args.seconds == 10 and args.case != "drop":
            args.seconds = 30.0
        (open_cases | {"fairness": fairness_case})[args.case](args)
        return
    capacity_rps = args.capacity / (args.call_ms / 1000)

    with stack() as s:
        simulator = s.simulator(
            "--model", f"m:{args.capacity}", "--latency-ms", str(args.call_ms),
            "--latency-spread", str(args.call_spread), "--seed", str(args.seed),
        )  # fmt: skip
        config = CONFIG.format(simulator=simulator, capacity=args.capacity)
        config += "".join(
            f'[[members]]\nemail = "{m}@example.com"\nteam = "bench"\n' for m in MEMBERS
        )
        s.configure(config, member="noisy@example.com", application="bench")
        keys = {m: s.issue_key(f"{m}@example.com", "bench") for m in MEMBERS}
        state = "Redis" if s.env.get("REDIS_URL") else "in process"
        print(
            f"Overload: deployment of {args.capacity} slots, calls of {args.call_ms:.0f} ms "
            f"± {args.call_spread:.0%} "
            f"({capacity_rps:.0f} calls/s at most), {args.seconds:.0f} s of arrivals per run; "
            f"members {', '.join(f'{m} x{w}' for m, w in MEMBERS.items())}; "
            f"{args.workers} gateway worker(s), state {state}"
        )
        scenarios = {
            factor: openloop.schedule(
                factor * capacity_rps, args.seconds, MEMBERS, INTERACTIVE_SHARE, args.seed + factor
            )
            for factor in (2, 5)
        }
        quiet_only = {m: w for m, w in MEMBERS.items() if m != "noisy"}
        # The 2x run's quiet members, at the same rates, with the noisy member absent.
        alone = [a for a in scenarios[2] if a.member in quiet_only]
        runs: dict[tuple[str, int], Run] = {}
        modes = [("admission", "1")] + ([] if args.skip_off else [("off", "0")])
        for mode, admission in modes:
            env = {"SLUICE_PRIORITY_ADMISSION": admission, "SLUICE_REDIS_PREFIX": uuid.uuid4().hex}
            gateway, _ = s.gateway(workers=args.workers, env=env)
            url = f"{gateway}/v1/chat/completions"
            for factor, schedule in scenarios.items():
                run = Run(f"{factor}x {mode}", capacity_rps, args.seconds, args.call_ms / 1000)
                run.outcomes = asyncio.run(drive(url, keys, schedule))
                runs[(mode, factor)] = run
            if mode == "admission":
                quiet_run = Run("2x, noisy absent", capacity_rps, args.seconds, args.call_ms / 1000)
                quiet_run.outcomes = asyncio.run(drive(url, keys, alone))
            s.stop_last()

        for factor in (2, 5):
            print(f"\n{factor}x overload ({len(scenarios[factor])} calls)")
            report([runs[m, factor] for m, _ in modes])
        print("\nQuiet members, 2x overload with admission (ms)")
        print(f"  {'':36}{'queue wait':>20}{'time to served':>20}")
        print(f"  {'':36}{'mean':>10}{'p50':>10}{'mean':>10}{'p50':>10}")
        for priority in ("interactive", "batch"):
            present = quiet_waits(runs[("admission", 2)], priority)
            absent = quiet_waits(quiet_run, priority)
            for label, figures in (
                ("noisy member present", present),
                ("noisy member absent", absent),
            ):
                print(f"  {priority:12}{label:24}{''.join(f'{v:10.0f}' for v in figures)}")
            # Call lengths are drawn at random: two runs' times to served differ by more than
            # the noisy member adds, so the queue wait it adds is the measure.
            added = present[0] - absent[0]
            print(
                f"  {'':12}{'added wait (mean)':24}{added:+10.0f}"
                f"  = {added / absent[2]:.0%} of the time to served without it"
            )


if __name__ == "__main__":
    main()
