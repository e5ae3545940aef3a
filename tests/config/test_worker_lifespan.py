"""A worker's start and stop report what failed: uvicorn's default (`--lifespan auto`) takes
an exception raised from the lifespan for an application without one and says so at INFO,
so a worker would serve without its tasks, or stop without writing its audit rows, and no
log at the usual level would say why."""

import asyncio
import logging
from typing import Any

import pytest

import config.asgi
from config.draining import WorkerDrain


async def _lifespan(*messages: str) -> list[dict[str, Any]]:
    """What the application sends the server for these lifespan messages."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for kind in messages:
        queue.put_nowait({"type": f"lifespan.{kind}"})
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(config.asgi.Application()({"type": "lifespan"}, queue.get, send), 5)
    return sent


@pytest.fixture(autouse=True)
def own_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config.asgi, "worker_drain", WorkerDrain())  # not the process's own


def test_a_start_that_fails_is_told_to_the_server_and_logged(monkeypatch, caplog) -> None:
    def broken(full_every: float) -> None:
        raise OSError("no room for the collector's clock")

    monkeypatch.setattr(config.asgi, "take_over", broken)
    with caplog.at_level(logging.ERROR, logger="sluice.worker"):
        sent = asyncio.run(_lifespan("startup"))
    assert sent == [
        {
            "type": "lifespan.startup.failed",
            "message": 'OSError("no room for the collector\'s clock")',
        }
    ]
    assert "worker start failed" in caplog.text


def test_a_stop_step_that_fails_keeps_no_other_from_running(monkeypatch, caplog) -> None:
    closed = []

    async def flush() -> None:
        raise RuntimeError("the writer's thread is gone")

    async def close_sessions() -> None:
        closed.append(True)

    monkeypatch.setattr(config.asgi.audit_writer, "flush", flush)
    monkeypatch.setattr(config.asgi, "close_sessions", close_sessions)
    with caplog.at_level(logging.ERROR, logger="sluice.worker"):
        sent = asyncio.run(_lifespan("shutdown"))
    assert sent == [
        {"type": "lifespan.shutdown.failed", "message": "worker stop: audit rows failed"}
    ]
    assert closed == [True]  # the step after the one that failed still ran
    assert "worker stop: audit rows failed" in caplog.text
    assert "the writer's thread is gone" in caplog.text  # the traceback, in the log


def test_a_stop_that_goes_well_says_so(monkeypatch) -> None:
    flushed = []

    async def flush() -> None:
        flushed.append(True)

    monkeypatch.setattr(config.asgi.audit_writer, "flush", flush)
    sent = asyncio.run(_lifespan("shutdown"))
    assert sent == [{"type": "lifespan.shutdown.complete"}]
    assert flushed == [True]
