"""Database work from the async request path: reads (`db_read`) and writes (`db_write`)."""

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from core.errors import database_unavailable

P = ParamSpec("P")
T = TypeVar("T")


def released(fn: Callable[P, T]) -> Callable[P, T]:
    """Run `fn`, then give its connection back (to the pool, under PostgreSQL), so the
    proxy holds none while it waits on upstreams or relays a long stream."""

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            if not connection.in_atomic_block:
                close_old_connections()

    return run


async def db_read(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn` in a worker thread (not the per-request thread Django would make), connection
    released afterwards."""
    return await sync_to_async(released(fn), thread_sensitive=False)(*args, **kwargs)


async def db_write(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """A write (a service) run as `db_read` runs a read: in a worker thread, connection
    released afterwards. Its own name so a call site says which it does."""
    return await db_read(fn, *args, **kwargs)


async def db_read_on_request(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`db_read` for a call that waits on it: bounded by `SLUICE_DB_REQUEST_SECONDS`, and
    an unreachable database (or a pool with no connection to give) is a 503 with
    Retry-After, never a 500 after the pool's own timeout."""
    try:
        async with asyncio.timeout(settings.SLUICE_DB_REQUEST_SECONDS):
            return await db_read(fn, *args, **kwargs)
    except (TimeoutError, DatabaseError):
        raise database_unavailable() from None
