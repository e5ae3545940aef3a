"""Values read from the database and kept briefly in each worker (keys, routes, limits).

Staleness is bounded: a value is served for at most its time to live. A value past half
of it is reloaded by one task per key and worker while requests go on with it, so a hot
key never waits on the database; a value older than its time to live is never served:
that request waits for the reload (after an idle spell, say). A change (a revoked key, a
drain, a limit, a config file applied) also drops the values it touches at once:
`invalidate` clears them in this process and, with Redis, tells every worker on one
channel (routing/deployment_state/grant_listener.py listens on it beside the grants).
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

log = logging.getLogger("sluice")
V = TypeVar("V")

KEYS, LIMITS, CATALOG = "keys", "limits", "catalog"  # what a change may touch
_caches: dict[str, list["RefreshingCache[Any]"]] = {}


class RefreshingCache(Generic[V]):
    def __init__(self, ttl: Callable[[], float], max_entries: int = 50_000, name: str = "") -> None:
        self._ttl = ttl
        self._max_entries = max_entries
        self._values: dict[Hashable, tuple[float, V]] = {}
        self._loading: dict[Hashable, asyncio.Task[V]] = {}
        self._generation = 0  # bumped by clear(): a load begun before it is not kept
        if name:
            _caches.setdefault(name, []).append(self)

    async def get(self, key: Hashable, load: Callable[[], Awaitable[V]]) -> V:
        hit = self._values.get(key)
        ttl = self._ttl()
        age = time.monotonic() - hit[0] if hit is not None else ttl
        if hit is not None and age < ttl / 2:
            return hit[1]
        task = self._loading.get(key)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = asyncio.ensure_future(self._reload(key, load, self._generation))
            task.add_done_callback(_observed)
            self._loading[key] = task
        if hit is not None and age < ttl:
            return hit[1]
        return await asyncio.shield(task)

    async def _reload(self, key: Hashable, load: Callable[[], Awaitable[V]], generation: int) -> V:
        started = time.monotonic()
        try:
            value = await load()
        except Exception:
            log.exception("reload failed")
            raise
        finally:
            if self._loading.get(key) is asyncio.current_task():
                del self._loading[key]
        if generation == self._generation:
            if len(self._values) >= self._max_entries:
                self._values.clear()
            self._values[key] = (started, value)  # its age counts from before the read
        return value

    def clear(self) -> None:
        self._values.clear()
        self._loading.clear()
        self._generation += 1


def _observed(task: "asyncio.Task[Any]") -> None:
    """A background reload's failure is logged in it; nobody else may ask for it."""
    if not task.cancelled():
        task.exception()


def drop_local(names: Iterable[str]) -> None:
    """Forget the values of these kinds in this process."""
    for name in names:
        for cache in _caches.get(name, ()):
            cache.clear()


def invalidation_channel() -> str:
    """Named for the database the values come from: every process that writes to it (a
    worker, the admin, a management command) tells every worker that reads from it."""
    from django.conf import settings

    return f"sluice:invalidate:{settings.DATABASES['default']['NAME']}"


_publisher: Any = None


def invalidate(*names: str) -> None:
    """Drop these kinds of values here and (with Redis) on every worker, once the current
    transaction commits: the next request reads the change."""
    from django.db import transaction

    transaction.on_commit(lambda: _invalidate_now(names))


def _invalidate_now(names: Iterable[str]) -> None:
    global _publisher
    from django.conf import settings

    names = tuple(names)
    drop_local(names)
    if not settings.REDIS_URL:
        return
    import redis
    from redis.exceptions import RedisError

    try:
        if _publisher is None:
            _publisher = redis.Redis.from_url(
                settings.REDIS_URL, socket_timeout=2.0, socket_connect_timeout=2.0
            )
        _publisher.publish(invalidation_channel(), " ".join(names))
    except (RedisError, OSError) as exc:
        # Workers still drop the value within its time to live.
        log.warning("could not tell the workers to drop %s (%s)", ", ".join(names), exc)
