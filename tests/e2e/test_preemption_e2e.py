"""Batch lines give their slots back to interactive calls (routing/deployment_state/slot_policy.py
rule 5), against a real simulator whose answers take 2 s: an interactive call that finds the
deployment full of batch calls is served at once, not after a batch call's 2 s; the batch
call is cancelled upstream and its line runs again, once.

In process (the chain walk, on the suite's backend: in-process state, or Redis in CI's
second run), and end to end with the gateway and a `manage.py run_batches` runner in
separate processes (Redis only: without it they do not see each other's calls)."""

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import (
    GatewayHandle,
    IssuedKey,
    SimulatorHandle,
    start_simulator,
    wait_until,
    wait_until_served,
)
from tests.support.batches import chat_lines, upload

CALL_MS = 2000
BOUND_S = 1.0  # an interactive call's queue wait: half a batch call, far above a handover


@pytest.fixture(scope="module")
def long_simulator() -> Iterator[SimulatorHandle]:
    """Model `long`: 4 in flight, each answer after 2 s."""
    yield from start_simulator("--model", "long:4", "--latency-ms", str(CALL_MS))


@pytest.fixture(scope="module")
def long_route(e2e_database: str, long_simulator: SimulatorHandle, django_db_blocker: Any) -> str:
    """Deployment `long` (4 slots; batch may hold 3, the reserve keeps 1 for interactive),
    a batch application and an interactive one allowed its route."""
    from routing.catalog.config_file import apply_config, validate_config

    config = {
        "upstreams": [{"name": "long-sim", "base_url": f"{long_simulator.url}/v1"}],
        "deployments": [
            {
                "name": "long",
                "upstream": "long-sim",
                "model": "long",
                "max_concurrency": 4,
                "breaker_threshold": 0,
            }
        ],
        "routes": [{"name": "long", "chain": ["long"]}],
        "applications": [
            {
                "slug": "preempt-batch",
                "team": "demo",
                "routes": ["long", "fast"],
                "default_priority": "batch",
            },
            {"slug": "preempt-live", "team": "demo", "routes": ["long", "fast"]},
        ],
    }
    with django_db_blocker.unblock():
        apply_config(validate_config(config))
    return "long"


def _in_flight(simulator: SimulatorHandle) -> int:
    return simulator.stats("long")["in_flight"]


@pytest.fixture
def keys(long_route: str, issue_key: Callable[..., IssuedKey]) -> dict[str, IssuedKey]:
    return {"batch": issue_key("preempt-batch"), "live": issue_key("preempt-live")}


async def _serve(principal: Any, *, batch: bool) -> tuple[Any, float]:
    """A call through the request path in this process (as the runner makes them); its
    response and how long it took."""
    from django.http import HttpRequest

    from routing.observability.audit import CallLog, new_request_id
    from routing.request_path.payloads import Endpoint
    from routing.request_path.proxy import serve

    body = json.dumps({"model": "long", "messages": [{"role": "user", "content": "hi"}]})
    request = HttpRequest()
    request.method = "POST"
    request._body = body.encode()
    request.META = {"CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body))}
    if batch:
        request.META["HTTP_X_SLUICE_PRIORITY"] = "batch"
    call = CallLog(request_id=new_request_id(), endpoint="/v1/chat/completions", client_ip=None)
    started = time.monotonic()
    response = await serve(call, request, Endpoint.CHAT, principal, preemptible=batch)
    return response, time.monotonic() - started


async def test_in_process_an_interactive_call_takes_a_preemptible_batch_slot_at_once(
    keys: dict[str, IssuedKey], long_simulator: SimulatorHandle, monkeypatch: Any
) -> None:
    from accounts.authentication import principal_for_prefix
    from core.refresh import CATALOG, KEYS, LIMITS, drop_local
    from routing.request_path.upstream import close_sessions

    # The audit is the end-to-end test's; here its writer's thread would keep a connection.
    monkeypatch.setattr("routing.request_path.finish.audit_writer.record", lambda call: None)
    drop_local((CATALOG, KEYS, LIMITS))  # the config this module applied
    batch = await principal_for_prefix(keys["batch"].prefix)
    live = await principal_for_prefix(keys["live"].prefix)
    cancelled = long_simulator.stats("long")["cancelled"]
    try:
        batch_calls = [asyncio.create_task(_serve(batch, batch=True)) for _ in range(3)]
        first = asyncio.create_task(_serve(live, batch=False))  # the reserve's slot
        for _ in range(100):  # every slot taken (3 batch, 1 interactive)
            if _in_flight(long_simulator) == 4:
                break
            await asyncio.sleep(0.02)
        second, took = await _serve(live, batch=False)  # full: a batch call must give way

        assert second.status_code == 200
        assert float(second["X-Sluice-Queue-Ms"]) < BOUND_S * 1000
        assert took < CALL_MS / 1000 + BOUND_S  # its own 2 s, not a batch call's first
        done = [await t for t in batch_calls]
        preempted = [r for r, _ in done if r.status_code == 503]
        assert len(preempted) == 1  # one interactive call waited: one batch call gave way
        assert json.loads(preempted[0].content)["error"]["code"] == "preempted"
        assert [r.status_code for r, _ in done].count(200) == 2
        assert (await first)[0].status_code == 200
        assert long_simulator.stats("long")["cancelled"] == cancelled + 1  # cancelled upstream
    finally:
        await close_sessions()


def test_batch_lines_give_way_to_interactive_calls_and_run_again_exactly_once(
    keys: dict[str, IssuedKey],
    long_simulator: SimulatorHandle,
    batch_gateway: GatewayHandle,
    start_runner: Callable[..., Any],
    tmp_path: Path,
) -> None:
    if not os.environ.get("REDIS_URL"):
        pytest.skip("the gateway and the runner see each other's calls only through Redis")
    from openai import OpenAI

    from routing.models import CallRecord

    live = keys["live"].plaintext
    hello = [{"role": "user", "content": "hi"}]
    wait_until_served(batch_gateway.url, live, "fast", hello)  # the gateway knows the key
    client = OpenAI(
        base_url=f"{batch_gateway.url}/v1", api_key=keys["batch"].plaintext, max_retries=0
    )
    start_runner()
    cancelled = long_simulator.stats("long")["cancelled"]
    file_id = upload(client, chat_lines(4, model="long"), tmp_path)
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    wait_until(lambda: _in_flight(long_simulator) == 3, timeout=30, every=0.02)  # batch's 3

    def interactive() -> httpx.Response:
        return httpx.post(
            f"{batch_gateway.url}/v1/chat/completions",
            headers={"authorization": f"Bearer {live}"},
            json={"model": "long", "messages": hello},
            timeout=30,
        )

    async def two_at_once() -> list[httpx.Response]:
        return await asyncio.gather(*(asyncio.to_thread(interactive) for _ in range(2)))

    answers = asyncio.run(two_at_once())  # the reserve's slot, and one a batch call gives
    assert [a.status_code for a in answers] == [200, 200]
    assert max(float(a.headers["X-Sluice-Queue-Ms"]) for a in answers) < BOUND_S * 1000

    done = wait_until(
        lambda: (b := client.batches.retrieve(batch.id)).status == "completed" and b,
        timeout=60,
        every=0.2,
    )
    assert (done.request_counts.completed, done.request_counts.failed) == (4, 0)
    out = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
    assert sorted(o["custom_id"] for o in out) == [f"req-{i}" for i in range(4)]
    assert long_simulator.stats("long")["cancelled"] >= cancelled + 1

    def outcomes() -> Counter[str] | None:
        rows = CallRecord.objects.filter(batch_id=batch.id).values_list("custom_id", "outcome")
        counts = Counter(outcome for _, outcome in rows)
        return rows if counts["success"] == 4 else None

    rows = wait_until(outcomes)
    preempted = {c for c, outcome in rows if outcome == "preempted"}
    assert preempted  # audited as such, not as a failure
    assert {outcome for _, outcome in rows} == {"success", "preempted"}
    assert Counter(c for c, outcome in rows if outcome == "success") == Counter(
        f"req-{i}" for i in range(4)
    )
