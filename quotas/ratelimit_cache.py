"""The cache django-ratelimit counts requests per minute in (RATELIMIT_USE_CACHE).

Django's RedisCache builds a new redis-py client for every operation and spends two round
trips on `incr` (EXISTS, then INCRBY). django-ratelimit calls `add` then `incr` for every
limited request, so this subclass keeps one client per connection pool, shared by every
cache object of the process, and makes `incr` one atomic script. Behaviour is Django's:
`incr` on a missing key raises ValueError.
"""

from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property

_INCR_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('INCRBY', KEYS[1], ARGV[1])
"""


class _Client(RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}
        self._incr_scripts: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            pool = self._get_connection_pool(write)
            client = self._clients[index] = self._client(connection_pool=pool)
            self._incr_scripts[index] = client.register_script(_INCR_IF_EXISTS)
        return client

    def incr(self, key: Any, delta: int) -> Any:
        self.get_client(key, write=True)
        script = self._incr_scripts[self._get_connection_pool_index(True)]
        value = script(keys=[key], args=[delta])
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
