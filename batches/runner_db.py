"""The runner's own database thread: its frequent, short database work (reading the
batches, claims, writing answers, renewing leases) runs there, one call after another, on
one connection kept open while the runner runs.

`core.db.db_read` gives its connection back after every call, which suits a request but
costs the runner a new connection per trip (on SQLite, the last connection to close also
checkpoints the write-ahead log). Long work (validating a file, writing the result files)
stays on `db_read`/`db_write`, so it never holds up the answers of other batches.
"""

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from django.db import close_old_connections, connection

P = ParamSpec("P")
T = TypeVar("T")


def _kept(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    try:
        return fn(*args, **kwargs)
    except Exception:
        # The connection may be broken (a database restart, say): the next call opens a
        # new one.
        connection.close()
        raise


class RunnerDb:
    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-db")

    async def __call__(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._thread, functools.partial(_kept, fn, *args, **kwargs)
        )

    async def close(self) -> None:
        """Give the connection back (to the pool, under PostgreSQL) and end the thread."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, _close)
        self._thread.shutdown(wait=False)


def _close() -> None:
    close_old_connections()
    connection.close()
