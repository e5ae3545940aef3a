"""Overload as real traffic brings it: calls keep arriving on a schedule (Poisson, open
loop) at twice what the provider serves, batch calls willing to wait 2 s, the deployment's
default breaker on. Nothing may be sent upstream that cannot finish, so the provider's work
is never thrown away, no timeout Sluice caused opens the breaker, interactive calls get
through and batch calls that cannot are told when to come back."""

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.support import GatewayHandle, SimulatorHandle, start_simulator, wait_until_served

CAPACITY, CALL_MS = 4, 200  # the provider: 4 calls of 200 ms ± 30 % at a time, 20 a second
SECONDS, LOAD = 6.0, 2.0
BATCH_MAX_WAIT = "2"
HI = [{"role": "user", "content": "Open loop."}]


@pytest.fixture(scope="module")
def provider() -> Iterator[SimulatorHandle]:
    yield from start_simulator(
        "--model", f"ol:{CAPACITY}", "--latency-ms", str(CALL_MS),
        "--latency-spread", "0.3", "--seed", "3",
    )  # fmt: skip


@pytest.fixture(scope="module")
def catalog(e2e_database: str, provider: SimulatorHandle, django_db_blocker: Any) -> None:
    from routing.catalog.config_file import apply_config, validate_config

    config = {
        "upstreams": [{"name": "ol-sim", "base_url": f"{provider.url}/v1"}],
        # The default breaker (3 failures): a timeout Sluice caused must not open it.
        "deployments": [
            {"name": "ol", "upstream": "ol-sim", "model": "ol", "max_concurrency": CAPACITY}
        ],
        "routes": [{"name": "ol", "chain": ["ol"]}],
        "applications": [{"slug": "openloop", "team": "demo", "routes": ["ol"]}],
    }
    with django_db_blocker.unblock():
        apply_config(validate_config(config))


async def _fire(url: str, keys: list[str]) -> list[tuple[str, int, str | None]]:
    """Every call at its scheduled time, whatever the earlier ones are doing."""
    rng = random.Random(11)
    arrivals, t = [], 0.0
    while (t := t + rng.expovariate(LOAD * CAPACITY / (CALL_MS / 1000))) < SECONDS:
        arrivals.append((t, rng.choice(keys), "interactive" if rng.random() < 0.2 else "batch"))

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        start = asyncio.get_running_loop().time() + 0.2

        async def one(at: float, key: str, priority: str) -> tuple[str, int, str | None]:
            await asyncio.sleep(max(0.0, start + at - asyncio.get_running_loop().time()))
            headers = {"authorization": f"Bearer {key}", "x-sluice-priority": priority}
            if priority == "batch":
                headers["x-sluice-max-wait"] = BATCH_MAX_WAIT
            body = {"model": "ol", "messages": HI}
            async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
                await r.read()
                return priority, r.status, r.headers.get("retry-after")

        return await asyncio.gather(*(one(*a) for a in arrivals))


def test_twice_the_capacity_open_loop_wastes_no_provider_work_and_keeps_the_breaker_shut(
    gateway: GatewayHandle, catalog: None, issue_key, provider: SimulatorHandle
):
    keys = [issue_key(application="openloop").plaintext for _ in range(3)]
    wait_until_served(gateway.url, keys[0], "ol", HI)
    before = provider.stats("ol")

    answers = asyncio.run(_fire(gateway.url, keys))

    after = provider.stats("ol")
    statuses = Counter((priority, status) for priority, status, _ in answers)
    interactive = [status for priority, status, _ in answers if priority == "interactive"]
    # No call was sent that its deadline then cut at the provider: nothing thrown away.
    assert after["cancelled"] - before["cancelled"] == 0, statuses
    # The breaker never opened: no 502 (nor 504), and the route still answers.
    assert {status for _, status, _ in answers} <= {200, 503}, statuses
    assert interactive.count(200) >= 0.99 * len(interactive), statuses
    refused = [(p, r) for p, status, r in answers if status == 503]
    assert refused and all(p == "batch" and r and int(r) >= 1 for p, r in refused), statuses
    # The provider was kept busy (goodput): served calls at least 80 % of what it can serve
    # while calls arrive, batch taking what interactive left.
    served = after["served"] - before["served"]
    assert served >= 0.8 * CAPACITY / (CALL_MS / 1000) * SECONDS, statuses
    assert statuses["batch", 200] > 0, statuses
    wait_until_served(gateway.url, keys[0], "ol", HI)
