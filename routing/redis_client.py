"""Redis clients for the shared state: one per URL and event loop (redis-py's asyncio
connections belong to the loop that opened them)."""

import asyncio

import redis.asyncio as redis

_clients: dict[tuple[str, asyncio.AbstractEventLoop], redis.Redis] = {}


def redis_client(url: str) -> redis.Redis:
    loop = asyncio.get_running_loop()
    client = _clients.get((url, loop))
    if client is None:
        # A burst waits up to a second for a connection instead of failing at the pool's
        # limit; short socket timeouts make a slow Redis fall back rather than hold calls.
        pool = redis.BlockingConnectionPool.from_url(
            url,
            max_connections=512,
            timeout=1.0,
            socket_timeout=0.5,
            socket_connect_timeout=0.5,
        )
        client = _clients[(url, loop)] = redis.Redis(connection_pool=pool)
    return client
