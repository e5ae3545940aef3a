"""`manage.py deployment_status`: the one-call snapshot of every deployment, as admins read it."""

import asyncio
import io
import os
import time
import uuid

import pytest
from django.core.management import call_command

import routing.deployment_state.factory as deployment_state_module
from routing.catalog.specs import catalog
from routing.deployment_state import LocalDeploymentState
from routing.deployment_state.slot_policy import Claim


@pytest.fixture
def state(monkeypatch):
    if os.environ.get("REDIS_URL"):
        from routing.deployment_state.redis import RedisDeploymentState

        backend = RedisDeploymentState(os.environ["REDIS_URL"], f"test-{uuid.uuid4().hex[:8]}")
    else:
        backend = LocalDeploymentState()
    monkeypatch.setattr(deployment_state_module, "_state", backend)
    return backend


def test_status_shows_in_flight_and_waiting_by_class(state, e2e_database, committed_db):
    catalog.invalidate()

    async def crowd() -> None:
        limits = (await catalog.routes())["smart"].chain[0].limits  # big: 4 slots
        for i in range(limits.max_concurrency):
            claim = Claim("batch" if i == 0 else "interactive", "m", 0, 0)
            await state.acquire_slot("big", limits, f"held-{i}", retry=False, claim=claim)
        until = time.time() + 60
        for slot, priority in (("w1", "interactive"), ("w2", "batch"), ("w3", "batch")):
            claim = Claim(priority, "m", 0, 0)
            queued = await state.acquire_slot(
                "big", limits, slot, retry=False, claim=claim, wait_until=until
            )
            assert queued.queued
        if hasattr(state, "_client"):
            await state._client().aclose()

    asyncio.run(crowd())
    out = io.StringIO()
    call_command("deployment_status", stdout=out, stderr=io.StringIO())
    (big,) = [line.split() for line in out.getvalue().splitlines() if line.startswith("big ")]
    assert big[:7] == ["big", "closed", "4", "4", "4", "1", "1/2"]
