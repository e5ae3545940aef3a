"""An open-loop load generator: calls arrive on a schedule made in advance (Poisson), whether
or not earlier ones have finished, as real traffic does; each call's latency counts from its
scheduled time, so a gateway that falls behind cannot hide it by slowing the client down
(closed-loop clients, a new call only when one ends, do exactly that).

`schedule` draws the arrivals; `fire` sends each once at its time and records what came
back; with `retry_batch`, a refused batch call comes back once after its Retry-After (a 429
or 503 that says to within a minute), to show whether that time was true.
"""

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

RETRY_CAP = 60.0  # seconds: a refused batch call comes back once if told to within this


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds from the start
    member: str
    priority: str  # interactive | batch


@dataclass
class Result:
    arrival: Arrival
    status: int = 0  # 0: no answer (connection error)
    code: str = ""  # the error's code, for a refusal
    retry_after: float | None = None
    ended: float = 0.0  # seconds from the start
    queue_ms: float = 0.0
    served_by: str = ""  # X-Sluice-Served-Model
    request_id: str = ""  # X-Sluice-Request-Id: a gateway answered
    retried: int | None = None  # the status of the one retry after Retry-After, if made
    retried_ended: float = 0.0

    @property
    def served(self) -> bool:
        return self.status == 200

    @property
    def latency(self) -> float:
        """Seconds from the scheduled arrival to the answer."""
        return self.ended - self.arrival.at


@dataclass
class Load:
    """What a run sends: Poisson arrivals at `rate` a second for `seconds`."""

    rate: float
    seconds: float
    members: dict[str, float]  # member -> relative weight
    interactive_share: float = 0.2
    seed: int = 1
    arrivals: list[Arrival] = field(init=False)

    def __post_init__(self) -> None:
        self.arrivals = schedule(
            self.rate, self.seconds, self.members, self.interactive_share, self.seed
        )


def schedule(
    rate: float,
    seconds: float,
    members: dict[str, float],
    interactive_share: float,
    seed: int,
) -> list[Arrival]:
    rng = random.Random(seed)
    names, weights = list(members), list(members.values())
    out, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return out
        priority = "interactive" if rng.random() < interactive_share else "batch"
        out.append(Arrival(t, rng.choices(names, weights)[0], priority))


async def _call(
    session: aiohttp.ClientSession, url: str, body: dict, headers: dict[str, str], result: Result
) -> None:
    try:
        async with session.post(url, json=body, headers=headers) as response:
            payload = await response.read()
            retry_after = response.headers.get("Retry-After")
            result.queue_ms = float(response.headers.get("X-Sluice-Queue-Ms", 0) or 0)
            result.served_by = response.headers.get("X-Sluice-Served-Model", "")
            result.request_id = response.headers.get("X-Sluice-Request-Id", "")
            result.status = response.status
    except (aiohttp.ClientError, OSError):
        result.status, result.code = 0, "connection"
        return
    result.retry_after = None if retry_after is None else float(retry_after)
    if result.status != 200:
        result.code = _error_code(payload)


def _error_code(payload: bytes) -> str:
    try:
        return str(json.loads(payload)["error"].get("code") or "")
    except (ValueError, KeyError, TypeError, AttributeError):
        return ""


async def fire(
    url: str,
    keys: dict[str, str],
    arrivals: Sequence[Arrival],
    *,
    model: str,
    headers_for: Callable[[Arrival], dict[str, str]] = lambda a: {},
    retry_batch: bool = False,
    events: Sequence[tuple[float, Callable[[], object]]] = (),
    extra: dict | None = None,
    events_ran: list[float] | None = None,
) -> list[Result]:
    """Send every arrival at its time; run each `events` callback (a coroutine function)
    at its time too (a capacity change, say); `extra` fields go in every call's body.
    `events_ran` gets the time (from the start, like arrivals) each event really began: a
    busy loop wakes it late. Returns one result per arrival."""
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None)
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Open loop."}],
        **(extra or {}),
    }
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic() + 0.5

        async def one(a: Arrival) -> Result:
            await asyncio.sleep(max(0.0, start + a.at - time.monotonic()))
            headers = {"Authorization": f"Bearer {keys[a.member]}", "X-Sluice-Priority": a.priority}
            headers |= headers_for(a)
            result = Result(a)
            await _call(session, url, body, headers, result)
            result.ended = time.monotonic() - start
            told = result.status in (429, 503) and result.retry_after
            if retry_batch and a.priority == "batch" and told and result.retry_after <= RETRY_CAP:
                await asyncio.sleep(result.retry_after)
                again = Result(a)
                await _call(session, url, body, headers, again)
                result.retried, result.retried_ended = again.status, time.monotonic() - start
            return result

        async def event(at: float, action: Callable[[], object]) -> None:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            if events_ran is not None:
                events_ran.append(time.monotonic() - start)
            outcome = action()
            if asyncio.iscoroutine(outcome):
                await outcome

        tasks = [asyncio.create_task(event(at, action)) for at, action in events]
        results = await asyncio.gather(*(one(a) for a in arrivals))
        await asyncio.gather(*tasks)
        return list(results)


def pct(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]
