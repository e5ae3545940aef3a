"""Values read from the database and kept briefly in each worker (keys, routes, limits).

Staleness is bounded: a value is served for at most its time to live. A value past half
of it is reloaded by one task per key and worker while requests go on with it, so a hot
key never waits on the database; a value older than its time to live is not served while
the database answers: that request waits for the reload (after an idle spell, say).

Stale if error: when the database does not answer (a reload fails, or takes longer than
`SLUICE_DB_REQUEST_SECONDS`), a value older than its time to live (the trusted one below,
while changes are heard) is still served, for up to `SLUICE_STALE_IF_ERROR_SECONDS` past
it, while one reload per key keeps trying behind it; once a reload of any cache has
failed, no request waits for its reload until one succeeds (one database: keys, routes and
limits go down together). A change still drops what it touches at once, outage or not,
and a dropped value is never served stale.

A change (a revoked key, a drain, a limit, a config file applied) drops the values it
touches: `invalidate` clears them in this process and, with Redis, tells every worker on
one channel (routing/deployment_state/grant_listener.py listens on it beside the grants).

Heard changes: while that listener vouches that every change published up to a time
within the time to live has reached this process (`changes_heard`: its pings come back
on the same connection, after the messages published before them), a value is kept for
`SLUICE_CACHE_TRUSTED_SECONDS` instead: nothing it could miss is older than the time to
live, so the bound holds without reloading every value twice a time to live on every
worker. That window only bounds changes made behind Sluice's back (SQL by hand).
A message is a list of words, each a kind (`keys`: every key) or a kind and a selector
(`keys:prefix=sk-sluice-…`, `keys:member=7`): a cache given `select` drops only the
values the selector names; `on_change` hooks hear every word of their kind.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from django.conf import settings
from django.db import DatabaseError, transaction

from core.background import observed
from core.errors import database_unavailable

log = logging.getLogger("sluice")
V = TypeVar("V")

KEYS, LIMITS, CATALOG = "keys", "limits", "catalog"  # what a change may touch
_caches: dict[str, list["RefreshingCache[Any]"]] = {}
_hooks: dict[str, list[Callable[[str | None], None]]] = {}


class _Outage:
    """Whether the last reload (of any cache) failed: the database is away."""

    failing = False


outage = _Outage()


class _Heard:
    """Up to when (monotonic seconds) every change published on the invalidation channel
    has been heard here and has dropped what it names; None: no listener vouches now."""

    through: float | None = None


heard = _Heard()


def changes_heard(through: float | None) -> None:
    """Told by the invalidation listener: heard up to `through`; None: it vouches for
    nothing from now on (its connection was lost or replaced)."""
    if through is None or heard.through is None:
        heard.through = through
    else:
        heard.through = max(heard.through, through)


def _trusted() -> float:
    return float(settings.SLUICE_CACHE_TRUSTED_SECONDS)


def _stale_if_error() -> float:
    return float(settings.SLUICE_STALE_IF_ERROR_SECONDS)


def _reload_wait() -> float:
    return float(settings.SLUICE_DB_REQUEST_SECONDS)


class RefreshingCache(Generic[V]):
    def __init__(
        self,
        ttl: Callable[[], float],
        max_entries: int = 50_000,
        name: str = "",
        *,
        select: Callable[[Hashable, V, str], bool] | None = None,
        stale_if_error: Callable[[], float] = _stale_if_error,
        reload_wait: Callable[[], float] = _reload_wait,
        trusted: Callable[[], float] = _trusted,
    ) -> None:
        self._ttl = ttl
        self._trusted = trusted
        self._max_entries = max_entries
        self._select = select  # (key, value, selector) -> whether a change names it
        self._stale_if_error = stale_if_error
        self._reload_wait = reload_wait
        self._values: dict[Hashable, tuple[float, V]] = {}
        self._loading: dict[Hashable, asyncio.Task[V]] = {}
        self._begun: dict[Hashable, float] = {}  # when each reload in flight began
        self._generation = 0  # bumped by clear(): a load begun before it is not kept
        if name:
            _caches.setdefault(name, []).append(self)

    async def get(self, key: Hashable, load: Callable[[], Awaitable[V]]) -> V:
        hit = self._values.get(key)
        ttl = self._time_to_live()
        age = time.monotonic() - hit[0] if hit is not None else ttl
        if hit is not None and age < ttl / 2:
            return hit[1]
        task = self._loading.get(key)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            task = asyncio.ensure_future(self._reload(key, load, self._generation))
            task.add_done_callback(observed)  # its failure is logged in it
            self._loading[key] = task
            self._begun[key] = time.monotonic()
        if hit is not None and age < ttl:
            return hit[1]
        if hit is None or age >= ttl + self._stale_if_error():
            return await self._wait(key, task)
        if outage.failing:
            return hit[1]  # the database is away: stale, while the reload keeps trying
        try:
            return await self._wait(key, task)
        except Exception:  # the reload failed or hangs: stale if error
            return hit[1]

    def _time_to_live(self) -> float:
        """The time to live, or the trusted one while every change older than it has been
        heard (a change the listener has yet to hear is younger than the time to live)."""
        ttl = self._ttl()
        if heard.through is not None and heard.through >= time.monotonic() - ttl:
            return max(ttl, self._trusted())
        return ttl

    async def _wait(self, key: Hashable, task: "asyncio.Task[V]") -> V:
        """The reload's value, once it has run for at most `SLUICE_DB_REQUEST_SECONDS` (a
        database that does not answer is a 503 `database_unavailable`, not a call that
        hangs); the reload itself goes on, and keeps its value when it comes."""
        begun = self._begun.get(key, time.monotonic())
        try:
            async with asyncio.timeout(max(0.0, begun + self._reload_wait() - time.monotonic())):
                return await asyncio.shield(task)
        except TimeoutError:
            self._failed()
            raise database_unavailable() from None

    async def _reload(self, key: Hashable, load: Callable[[], Awaitable[V]], generation: int) -> V:
        started = time.monotonic()
        try:
            value = await load()
        except Exception:
            self._failed()
            raise
        finally:
            if self._loading.get(key) is asyncio.current_task():
                del self._loading[key]
                self._begun.pop(key, None)
        if outage.failing:
            outage.failing = False
            log.warning("the database answers again: cached values are reloaded as usual")
        if generation == self._generation:
            if len(self._values) >= self._max_entries:
                self._values.clear()
            self._values[key] = (started, value)  # its age counts from before the read
        return value

    def _failed(self) -> None:
        """Said once per outage, not once per reload (every key retries every request)."""
        if not outage.failing:
            outage.failing = True
            log.warning(
                "reloading a cached value failed: serving cached values for up to %.0f s "
                "past their time to live until the database answers",
                self._stale_if_error(),
                exc_info=True,
            )

    def clear(self) -> None:
        self._values.clear()
        self._loading.clear()
        self._begun.clear()
        self._generation += 1

    def drop(self, selector: str | None) -> None:
        """Forget the values a change names (every value without a selector, or when this
        cache cannot tell which): not served again, not even stale."""
        if selector is None or self._select is None:
            self.clear()
            return
        select = self._select
        for key in [k for k, (_, v) in self._values.items() if select(k, v, selector)]:
            del self._values[key]
        self._loading.clear()  # a load begun before the change is not kept either
        self._begun.clear()
        self._generation += 1


def on_change(name: str, hook: Callable[[str | None], None]) -> None:
    """Call `hook` with the selector of every change of kind `name` (None: all of them)."""
    _hooks.setdefault(name, []).append(hook)


def drop_local(names: Iterable[str]) -> None:
    """Forget the values these changes name in this process (`keys`, `keys:member=7`)."""
    for word in names:
        name, _, selector = word.partition(":")
        for cache in _caches.get(name, ()):
            cache.drop(selector or None)
        for hook in _hooks.get(name, ()):
            hook(selector or None)


def invalidation_channel() -> str:
    """Named for the database the values come from: every process that writes to it (a
    worker, the admin, a management command) tells every worker that reads from it."""
    return f"sluice:invalidate:{settings.DATABASES['default']['NAME']}"


_publisher: Any = None
# Without Redis, what writes a change to the database's change log (core/change_log.py,
# which imports this module: it is handed over when the app is ready).
_database_publisher: Callable[[tuple[str, ...]], None] | None = None


def publish_without_redis(publisher: Callable[[tuple[str, ...]], None]) -> None:
    global _database_publisher
    _database_publisher = publisher


def invalidate(*names: str) -> None:
    """Drop these kinds of values here and in every other process (through Redis, else the
    database's change log: core/change_log.py), once the current transaction commits: the
    next request reads the change."""
    transaction.on_commit(lambda: _invalidate_now(names))


def _invalidate_now(names: Iterable[str]) -> None:
    global _publisher
    names = tuple(names)
    drop_local(names)
    if not settings.REDIS_URL:
        try:
            if _database_publisher is not None:
                _database_publisher(names)
        except DatabaseError as exc:
            # The other processes drop the value within its time to live.
            log.warning("could not tell the other processes to drop %s (%s)", ", ".join(names), exc)
        return
    from redis.exceptions import RedisError

    from core.redis_client import sync_redis_client

    try:
        if _publisher is None:
            _publisher = sync_redis_client(settings.REDIS_URL)
        _publisher.publish(invalidation_channel(), " ".join(names))
    except (RedisError, OSError) as exc:
        # Workers still drop the value within its time to live.
        log.warning("could not tell the workers to drop %s (%s)", ", ".join(names), exc)
