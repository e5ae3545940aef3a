"""Redis clients for the shared state: one per URL and event loop (redis-py's asyncio
connections belong to the loop that opened them)."""

import asyncio

import redis.asyncio as redis

_clients: dict[tuple[str, asyncio.AbstractEventLoop], redis.Redis] = {}


def redis_client(url: str) -> redis.Redis:
    loop = asyncio.get_running_loop()
    client = _clients.get((url, loop))
    if client is None:
        # A burst queues for one of a few connections: opening hundreds at once is slow
        # on a busy machine, and a pool that overflows or times out sends calls to the
        # per-worker fallback. Commands take well under a millisecond, so 16 suffice; a
        # Redis that does not answer within 2 s is treated as down.
        pool = redis.BlockingConnectionPool.from_url(
            url,
            max_connections=16,
            timeout=5.0,
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
        )
        client = _clients[(url, loop)] = redis.Redis(connection_pool=pool)
    return client
