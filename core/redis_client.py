"""Redis clients for the shared state: one per URL and event loop (redis-py's asyncio
connections belong to the loop that opened them).

`REDIS_URL` names one server (`redis://[:password@]host:port/db`, `rediss://` for TLS) or
a primary watched by Redis Sentinel:
`redis+sentinel://[[user]:password@]host1:26379,host2:26379/<master name>/<db>` (the
password is the primary's; `?sentinel_password=…` for sentinels that ask for one). With
Sentinel every connection asks the sentinels where the primary is, so after a failover
the next command reaches the new one, and the pub/sub listeners resubscribe on it. The Lua
scripts of every call do not use these clients: core/redis_wire.py.
"""

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio as aredis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelPool
from redis.sentinel import Sentinel, SentinelConnectionPool

SENTINEL_SCHEME = "redis+sentinel"
# How long Sluice waits on Redis: past this it is down (core/redis_down.py decides what then).
SOCKET_TIMEOUT = 2.0
# Both, as the clients' keyword arguments (Any: they sit among arguments of other types).
TIMEOUTS: dict[str, Any] = {
    "socket_timeout": SOCKET_TIMEOUT,
    "socket_connect_timeout": SOCKET_TIMEOUT,
}
# A sentinel that does not answer this fast is skipped for the next one.
SENTINEL_TIMEOUT = 1.0


@dataclass(frozen=True)
class SentinelTarget:
    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None

    def connection_kwargs(self) -> dict[str, Any]:
        return {"db": self.db, "username": self.username, "password": self.password}

    def sentinel_kwargs(self) -> dict[str, Any]:
        return {
            "socket_timeout": SENTINEL_TIMEOUT,
            "socket_connect_timeout": SENTINEL_TIMEOUT,
            "password": self.sentinel_password,
        }


def sentinel_target(url: str) -> SentinelTarget | None:
    """The sentinels, master name and database of a `redis+sentinel://` URL; None for any
    other URL. ValueError for a sentinel URL missing its parts."""
    parts = urlsplit(url)
    if parts.scheme.lower() != SENTINEL_SCHEME:
        return None
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    sentinels = []
    for host in hosts.split(","):
        name, _, port = host.strip().rpartition(":")
        if not name:  # no port given: Sentinel's own
            name, port = host.strip(), "26379"
        if not name or not port.isdigit():
            raise ValueError(f"REDIS_URL: not a sentinel host:port: {host!r}")
        sentinels.append((name.strip("[]"), int(port)))
    path = [p for p in parts.path.split("/") if p]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError("REDIS_URL: redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER[/DB]")
    query = parse_qs(parts.query)
    return SentinelTarget(
        sentinels=tuple(sentinels),
        master=unquote(path[0]),
        db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(username) or None,
        password=unquote(password) or None,
        sentinel_password=query.get("sentinel_password", [None])[0],
    )


class _BlockingSentinelPool(AsyncSentinelPool, aredis.BlockingConnectionPool):
    """Sentinel's pool (it finds the primary) that, like the single-server one, makes a burst
    wait for one of its few connections instead of failing."""


_clients: dict[tuple[str, asyncio.AbstractEventLoop], aredis.Redis] = {}


def redis_client(url: str) -> aredis.Redis:
    loop = asyncio.get_running_loop()
    client = _clients.get((url, loop))
    if client is None:
        # A burst queues for one of a few connections: opening hundreds at once is slow
        # on a busy machine, and a pool that overflows or times out sends calls to the
        # per-worker fallback. Commands take well under a millisecond, so 16 suffice; a
        # Redis that does not answer within 2 s is treated as down.
        pool_options = {"max_connections": 16, "timeout": 5.0}
        target = sentinel_target(url)
        if target is None:
            pool = aredis.BlockingConnectionPool.from_url(url, **pool_options, **TIMEOUTS)
            client = aredis.Redis(connection_pool=pool)
        else:
            sentinel = AsyncSentinel(
                target.sentinels, sentinel_kwargs=target.sentinel_kwargs(), **TIMEOUTS
            )
            master_options: dict[str, Any] = {**target.connection_kwargs(), **pool_options}
            client = sentinel.master_for(
                target.master, connection_pool_class=_BlockingSentinelPool, **master_options
            )
        _clients[(url, loop)] = client
    return client


def sync_redis_client(url: str) -> redis.Redis:
    """A blocking client (management commands, the capacity alert's thread, publishers)."""
    target = sentinel_target(url)
    if target is None:
        return redis.Redis.from_url(url, **TIMEOUTS)
    sentinel = Sentinel(target.sentinels, sentinel_kwargs=target.sentinel_kwargs(), **TIMEOUTS)
    client: redis.Redis = sentinel.master_for(target.master, **target.connection_kwargs())
    return client


class UrlConnectionPool:
    """`pool_class` for Django's RedisCache: understands `redis+sentinel://` too."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> redis.ConnectionPool:
        target = sentinel_target(url)
        if target is None:
            return redis.ConnectionPool.from_url(url, **options)
        sentinel = Sentinel(target.sentinels, sentinel_kwargs=target.sentinel_kwargs())
        kwargs = {"socket_timeout": SOCKET_TIMEOUT, **target.connection_kwargs(), **options}
        return SentinelConnectionPool(  # type: ignore[no-untyped-call]
            target.master, sentinel, **kwargs
        )


def cache_location(url: str) -> dict[str, Any]:
    """LOCATION and OPTIONS of a Django cache on this Redis (a sentinel URL's commas must
    not split it into several servers)."""
    if sentinel_target(url) is None:
        return {"LOCATION": url}
    return {"LOCATION": [url], "OPTIONS": {"pool_class": "core.redis_client.UrlConnectionPool"}}
