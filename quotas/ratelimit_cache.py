"""The cache django-ratelimit counts requests per minute in (RATELIMIT_USE_CACHE).

Django's RedisCache builds a new redis-py client for every operation and spends two round
trips on `incr` (EXISTS, then INCRBY). django-ratelimit calls `add` (create the window's
counter) then `incr` for every limited request. This subclass keeps one client per
connection pool, shared by every cache object of the process, makes `incr` one atomic
script, and remembers which counters exist: `add` on a counter it knows answers False
without a round trip, so a counted request costs one round trip, not two.

Should a remembered counter be gone from Redis (a flush, a restart), `incr` creates it with
the timeout `add` was given, which is what `add` would have done. On any other key `incr`
behaves as Django's: a missing key raises ValueError.
"""

import time
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property

# ARGV: delta, and the timeout to create the key with ('' : a missing key is an error).
_INCR = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[2] == '' then return false end
  redis.call('SET', KEYS[1], 0, 'EX', ARGV[2])
end
return redis.call('INCRBY', KEYS[1], ARGV[1])
"""
_KNOWN_MAX = 10_000  # remembered counters before the expired ones are forgotten


class _Client(RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}
        self._incr_scripts: dict[int, Any] = {}
        self._known: dict[Any, tuple[float, int]] = {}  # key -> (exists until, its timeout)

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            pool = self._get_connection_pool(write)
            client = self._clients[index] = self._client(connection_pool=pool)
            self._incr_scripts[index] = client.register_script(_INCR)
        return client

    def add(self, key: Any, value: Any, timeout: Any) -> bool:
        if not timeout:  # no expiry, or none at all: nothing to remember
            return super().add(key, value, timeout)
        now = time.monotonic()
        known = self._known.get(key)
        if known is not None and known[0] > now:
            return False
        added = super().add(key, value, timeout)
        # Whoever created it, trust it for a timeout: if it is gone sooner, `incr`
        # creates it again just as `add` would have.
        if len(self._known) >= _KNOWN_MAX:
            self._known = {k: v for k, v in self._known.items() if v[0] > now}
        self._known[key] = (now + timeout, timeout)
        return added

    def incr(self, key: Any, delta: int) -> Any:
        self.get_client(key, write=True)
        script = self._incr_scripts[self._get_connection_pool_index(True)]
        known = self._known.get(key)
        value = script(keys=[key], args=[delta, known[1] if known else ""])
        if value is None:
            raise ValueError(f"Key '{key}' not found.")
        return value


_shared: dict[str, _Client] = {}


class RateLimitRedisCache(RedisCache):
    """Django keeps a cache object per context, and every request runs in a new one: built
    per request, each would open its own connection pool. All share one client here."""

    @cached_property
    def _cache(self) -> _Client:
        identity = repr((self._servers, sorted(self._options.items())))
        client = _shared.get(identity)
        if client is None:
            client = _shared.setdefault(identity, _Client(self._servers, **self._options))
        return client
