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
