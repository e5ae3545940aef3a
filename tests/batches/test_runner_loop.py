"""The runner runs on uvloop's event loop where it is installed, as the gateway does
(batches/management/commands/run_batches.py)."""

import asyncio
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
