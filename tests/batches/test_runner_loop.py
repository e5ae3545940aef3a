"""The runner runs on uvloop's event loop where it is installed and collects garbage on the
worker's schedule, as the gateway does (batches/management/commands/run_batches.py)."""

import asyncio
import gc
import os
import signal
import sys

import pytest

from batches.management.commands import run_batches


def test_the_runner_runs_on_uvloop_when_it_is_installed() -> None:
    uvloop = pytest.importorskip("uvloop")
    factory = run_batches.loop_factory()
    assert factory is uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)


def test_without_uvloop_asyncios_own_loop(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import fails
    assert run_batches.loop_factory() is None


@pytest.mark.django_db(transaction=True)
def test_the_runner_collects_garbage_as_a_worker_does_and_hands_back() -> None:
    seen: list[tuple[int, int, int]] = []

    async def run_then_stop() -> None:
        async def look_then_stop() -> None:
            await asyncio.sleep(0.3)
            seen.append(gc.get_threshold())
            os.kill(os.getpid(), signal.SIGTERM)  # the runner's own way to stop

        looking = asyncio.create_task(look_then_stop())
        await run_batches.Command()._main(max_in_flight=4)
        await looking

    before = gc.get_threshold()
    try:
        asyncio.run(run_then_stop())
    finally:
        gc.unfreeze()
    young, _, oldest = seen[0]
    assert young > before[0]  # young objects collected less often than Python would
    assert oldest > 10**9  # the full collections left to the clock
    assert gc.get_threshold() == before
