"""Database reads from the async request path."""

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connection

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
