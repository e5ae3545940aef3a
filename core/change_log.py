"""Changes told through the database, for a deployment without Redis.

With Redis, a change that drops cached values (core/refresh.py `invalidate`) is published
and every worker's listener hears it at once. Without Redis there is one worker, but other
processes still change what it caches: a management command, the batch runner, a second
console. Each change is written here as a row of its words (`keys:prefix=…`, `catalog`),
and every process that caches values reads the rows newer than the last it read, every
`SLUICE_CHANGE_POLL_SECONDS`, and drops what they name.

A read also proves that every change committed before it began has been heard, as the
listener's pings do with Redis (`changes_heard`): so the caches keep their values for
`SLUICE_CACHE_TRUSTED_SECONDS` instead of reloading a key, its limits and the route
catalog every second, each on a thread of the default pool with a connection of its own.
The first read, and a read that finds rows it missed already pruned, drop every cached
value instead.

Reads go through one thread of their own that keeps its SQLite connection (opening one
costs 1.4 to 1.7 ms of CPU); elsewhere the connection goes back to the pool.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, connection

from core.models import Change
from core.refresh import CATALOG, KEYS, LIMITS, changes_heard, drop_local

log = logging.getLogger("sluice")

T = TypeVar("T")
KEEP = 1000  # rows kept: a reader further behind than this drops everything
PAGE = 500  # rows read at a time
EVERYTHING = (KEYS, LIMITS, CATALOG)


def publish(names: Iterable[str]) -> None:
    """Write a change for the other processes to read (called once its transaction has
    committed); the oldest rows past `KEEP` go."""
    change = Change.objects.create(words=" ".join(names))
    Change.objects.filter(pk__lte=change.pk - KEEP).delete()


def _newest() -> int:
    return Change.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def _after(last: int) -> tuple[list[tuple[int, str]], int]:
    """The rows after `last`, oldest first, and the newest id."""
    rows = list(Change.objects.filter(pk__gt=last).order_by("pk").values_list("pk", "words")[:PAGE])
    if len(rows) == PAGE:
        return rows, _newest()
    return rows, rows[-1][0] if rows else last


_thread: ThreadPoolExecutor | None = None


async def _on_thread(fn: Callable[..., T], *args: Any) -> T:
    """`fn` on the readers' thread, which keeps its SQLite connection between reads."""
    global _thread
    if _thread is None:
        _thread = ThreadPoolExecutor(1, thread_name_prefix="sluice-changes")

    def run() -> T:
        try:
            return fn(*args)
        except DatabaseError:
            connection.close()  # a new connection on the next read
            raise
        finally:
            if connection.vendor != "sqlite":
                connection.close()  # back to the pool

    return await asyncio.get_running_loop().run_in_executor(_thread, run)


class ChangeReader:
    """One per event loop: reads the change log and drops what it names."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self.last: int | None = None  # the newest row read; None: start afresh
        self.failing = False

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="sluice-change-reader"
            )

    async def _run(self) -> None:
        while True:
            try:
                await self.read()
                self.failing = False
            except Exception as exc:  # the database is away: say so once, keep trying
                # Vouch for nothing: values live their time to live meanwhile. The rows
                # stay: the next read goes on from the last one read.
                changes_heard(None)
                if not self.failing:
                    log.warning("reading the change log failed (%s); retrying", exc)
                self.failing = True
            await asyncio.sleep(settings.SLUICE_CHANGE_POLL_SECONDS)

    async def read(self) -> None:
        """Drop what the rows new since the last read name, then vouch for every change
        committed before this read began."""
        began = time.monotonic()
        if self.last is None:
            self.last = await _on_thread(_newest)
            # Values cached before anyone read the log may predate a change it holds.
            drop_local(EVERYTHING)
            changes_heard(began)
            return
        rows, newest = await _on_thread(_after, self.last)
        if newest - KEEP > self.last:
            drop_local(EVERYTHING)  # rows this reader never read may be pruned
        for pk, words in rows:
            drop_local(words.split())
            self.last = pk
        if len(rows) < PAGE:  # every row read: no change before `began` is unheard
            changes_heard(began)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


_readers: dict[asyncio.AbstractEventLoop, ChangeReader] = {}


def change_reader() -> ChangeReader:
    """The reader of the running loop."""
    loop = asyncio.get_running_loop()
    reader = _readers.get(loop)
    if reader is None:
        reader = _readers[loop] = ChangeReader()
    return reader
