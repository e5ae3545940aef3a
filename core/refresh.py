"""Values read from the database and kept briefly in each worker (keys, routes, limits).

A value older than its time to live is reloaded by one task per key and worker, while
requests go on with the value they had (stale for the few milliseconds of the reload), so
no request waits on the database except the very first for a key.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

log = logging.getLogger("sluice")
V = TypeVar("V")


class RefreshingCache(Generic[V]):
    def __init__(self, ttl: Callable[[], float], max_entries: int = 50_000) -> None:
        self._ttl = ttl
        self._max_entries = max_entries
        self._values: dict[Hashable, tuple[float, V]] = {}
        self._loading: dict[Hashable, asyncio.Task[V]] = {}

    async def get(self, key: Hashable, load: Callable[[], Awaitable[V]]) -> V:
        hit = self._values.get(key)
        if hit is not None and time.monotonic() - hit[0] < self._ttl():
            return hit[1]
        task = self._loading.get(key)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = asyncio.ensure_future(self._reload(key, load))
            # Its failure is the awaiting request's to report, or none's (a stale value was
            # served, the caller left): never "Task exception was never retrieved".
            task.add_done_callback(_retrieve)
            self._loading[key] = task
        if hit is not None:
            return hit[1]
        return await asyncio.shield(task)

    async def _reload(self, key: Hashable, load: Callable[[], Awaitable[V]]) -> V:
        try:
            value = await load()
        except Exception:
            if key in self._values:
                log.exception("reload failed; going on with the value known so far")
            raise
        finally:
            self._loading.pop(key, None)
        if len(self._values) >= self._max_entries:
            self._values.clear()
        self._values[key] = (time.monotonic(), value)
        return value

    def clear(self) -> None:
        self._values.clear()


def _retrieve(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()
