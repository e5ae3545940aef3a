"""Fire-and-forget work that must not be lost to the garbage collector."""

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("sluice")
_running: set[asyncio.Task[Any]] = set()


def spawn(coro: Coroutine[Any, Any, Any]) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _running.add(task)
    task.add_done_callback(_done)


def _done(task: asyncio.Task[Any]) -> None:
    _running.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.error("background task failed", exc_info=task.exception())


def observed(future: "asyncio.Future[Any]") -> None:
    """A done callback for a future whose failure its awaiters see, or nobody needs to: its
    exception is marked retrieved, so asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()


async def settle_background(within: float) -> None:
    """Wait, up to `within` seconds, for the work spawned so far (a process about to exit:
    a slot's release must reach the shared state rather than wait for its lease to end)."""
    if _running:
        await asyncio.wait(list(_running), timeout=within)
