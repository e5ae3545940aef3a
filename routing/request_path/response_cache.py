"""The response cache: answers to identical deterministic requests, kept for a while.

Opt-in per application (`cache_ttl_seconds`). The key is a hash of the route, the
application and the canonical request body (keys sorted, the stream flags left out), so
an answer is never shared across applications. Only deterministic requests are cached:
temperature 0 or a `seed` (embeddings always), no tools or functions declared (Sluice cannot
tell which have side effects); every other request goes upstream. Answers are stored from
non-streamed calls; a streamed request that hits is replayed (routing/request_path/cache_replay.py).
A Messages or Responses call on a route with a deployment of its own kind bypasses it (its
answer there is passed through in that protocol's shape, not chat's).

One interface, two backends: an LRU in process (no REDIS_URL) and Redis (shared by every
worker), both capped in bytes. A cache that fails is a miss, never a failed call.
"""

import hashlib
import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

from redis.exceptions import RedisError

from core.redis_client import redis_client
from routing.catalog.specs import RouteSpec
from routing.request_path.chain import Answer
from routing.request_path.payloads import ClientRequest, Endpoint

log = logging.getLogger("sluice.cache")

HIT, MISS, BYPASS = "hit", "miss", "bypass"

# Body fields that change how the answer is delivered, not what it says.
_DELIVERY_FIELDS = frozenset({"stream", "stream_options"})
_TOOL_FIELDS = ("tools", "functions", "tool_choice", "function_call")


@dataclass(frozen=True)
class CachedAnswer:
    body: bytes  # the upstream's JSON answer, as the client got it the first time
    deployment: str  # the deployment that served it


def deterministic(request: ClientRequest) -> bool:
    """Whether the same request always gets the same answer (as far as an upstream
    promises): embeddings, or temperature 0 or a seed, with no tools declared."""
    body = request.body
    if request.endpoint is Endpoint.EMBEDDINGS:
        return True
    if any(body.get(name) for name in _TOOL_FIELDS):
        return False
    return body.get("temperature") == 0 or isinstance(body.get("seed"), int)


def wanted(request: ClientRequest, cache_control: str | None) -> bool:
    """Whether this request may be answered from the cache (and its answer stored)."""
    if cache_control and "no-cache" in cache_control.lower():
        return False
    return deterministic(request)  # a stream is answered from a stored whole answer


def cache_key(*, route: str, application_id: int, request: ClientRequest) -> str:
    body = {k: v for k, v in request.body.items() if k not in _DELIVERY_FIELDS}
    canonical = json.dumps(
        [route, application_id, request.endpoint.value, body],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _pack(answer: CachedAnswer) -> bytes:
    head = answer.deployment.encode()
    return len(head).to_bytes(2, "big") + head + answer.body


def _unpack(raw: bytes) -> CachedAnswer:
    size = int.from_bytes(raw[:2], "big")
    return CachedAnswer(body=raw[2 + size :], deployment=raw[2 : 2 + size].decode())


@dataclass
class CacheStep:
    """What the cache said about one call, and where its answer goes on a miss."""

    status: str = ""  # hit, miss, bypass; "" when the application has no cache
    key: str = ""
    ttl: float = 0.0
    answer: Answer | None = None  # a hit, ready to hand back


async def cache_lookup(
    *,
    ttl: float,
    application_id: int,
    route: RouteSpec,
    request: ClientRequest,
    cache_control: str | None,
) -> CacheStep:
    """A hit is answered as the deployment that first served it, while that deployment is
    still in the route's chain (a chain changed since then misses)."""
    if ttl <= 0:
        return CacheStep()
    native = any(request.passes_through(d.upstream.kind) for d in route.chain)
    if native or not wanted(request, cache_control):
        return CacheStep(BYPASS)
    key = cache_key(route=route.name, application_id=application_id, request=request)
    cached = await response_cache().get(key)
    deployment = next(
        (d for d in route.chain if cached is not None and d.name == cached.deployment), None
    )
    if cached is None or deployment is None:
        return CacheStep(MISS, key, ttl)
    payload = json.loads(cached.body)
    return CacheStep(HIT, key, ttl, Answer(deployment, 200, cached.body, payload))


async def cache_store(step: CacheStep, answer: Answer) -> None:
    """Keep a successful answer to a request that missed."""
    if step.status == MISS and answer.status == 200 and answer.payload is not None:
        await response_cache().put(
            step.key, CachedAnswer(answer.body, answer.deployment.name), step.ttl
        )


class ResponseCache(Protocol):
    async def get(self, key: str) -> CachedAnswer | None: ...

    async def put(self, key: str, answer: CachedAnswer, ttl: float) -> None: ...

    async def clear(self) -> None: ...


class LocalResponseCache:
    """Least recently used first out, past `max_bytes` of entries, in this process."""

    def __init__(self, max_bytes: int, max_entry_bytes: int) -> None:
        self.max_bytes, self.max_entry_bytes = max_bytes, max_entry_bytes
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0

    async def get(self, key: str) -> CachedAnswer | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, raw = entry
        if time.monotonic() >= expires:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return _unpack(raw)

    async def put(self, key: str, answer: CachedAnswer, ttl: float) -> None:
        raw = _pack(answer)
        if len(raw) > self.max_entry_bytes or ttl <= 0:
            return
        self._drop(key)
        self._entries[key] = (time.monotonic() + ttl, raw)
        self._bytes += len(raw)
        while self._bytes > self.max_bytes and self._entries:
            self._drop(next(iter(self._entries)))

    async def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= len(entry[1])


# Entries expire on their own (SET PX); an index (sorted by last use: a counter, not the
# clock, so uses within one millisecond keep their order) and the sizes let the script
# evict the least recently used past the cap, and forget entries that expired.
# KEYS: entry, index, sizes, total, use counter. ARGV: key, value, ttl ms, cap bytes.
_PUT = """
local size = string.len(ARGV[2])
local old = redis.call('HGET', KEYS[3], ARGV[1])
if old then
  redis.call('DECRBY', KEYS[4], old)
end
local total = redis.call('INCRBY', KEYS[4], size)
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[3], ARGV[1], size)
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[5]), ARGV[1])
local cap = tonumber(ARGV[4])
local prefix = string.sub(KEYS[1], 1, string.len(KEYS[1]) - string.len(ARGV[1]))
while total > cap do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #oldest == 0 then break end
  local victim = oldest[1]
  local bytes = tonumber(redis.call('HGET', KEYS[3], victim) or '0')
  redis.call('ZREM', KEYS[2], victim)
  redis.call('HDEL', KEYS[3], victim)
  redis.call('DEL', prefix .. victim)
  total = redis.call('DECRBY', KEYS[4], bytes)
end
return total
"""

# KEYS: entry, index, sizes, total, use counter. ARGV: key. An expired entry is forgotten.
_GET = """
local value = redis.call('GET', KEYS[1])
if value then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[5]), ARGV[1])
  return value
end
local bytes = redis.call('HGET', KEYS[3], ARGV[1])
if bytes then
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('DECRBY', KEYS[4], bytes)
end
return false
"""


class RedisResponseCache:
    """Shared by every worker; the same cap and eviction, kept atomic by Lua scripts."""

    def __init__(self, url: str, prefix: str, max_bytes: int, max_entry_bytes: int) -> None:
        self.url, self.max_bytes, self.max_entry_bytes = url, max_bytes, max_entry_bytes
        # One hash tag: the whole cache on one Redis Cluster slot (the scripts touch several).
        self.base = f"{prefix}:cache:{{rc}}"
        self._scripts: dict[int, dict[str, Any]] = {}

    def _keys(self, key: str) -> list[str]:
        return [
            f"{self.base}:e:{key}",
            f"{self.base}:index",
            f"{self.base}:sizes",
            f"{self.base}:total",
            f"{self.base}:uses",
        ]

    def _script(self, name: str) -> Any:
        client = redis_client(self.url)
        scripts = self._scripts.get(id(client))
        if scripts is None:
            scripts = self._scripts[id(client)] = {
                "get": client.register_script(_GET),
                "put": client.register_script(_PUT),
            }
        return scripts[name]

    async def get(self, key: str) -> CachedAnswer | None:
        try:
            raw = await self._script("get")(keys=self._keys(key), args=[key])
        except (RedisError, OSError) as exc:
            log.warning("response cache unavailable (%s): a miss", type(exc).__name__)
            return None
        return None if raw is None else _unpack(raw)

    async def put(self, key: str, answer: CachedAnswer, ttl: float) -> None:
        raw = _pack(answer)
        if len(raw) > self.max_entry_bytes or ttl <= 0:
            return
        args = [key, raw, max(1, int(ttl * 1000)), self.max_bytes]
        try:
            await self._script("put")(keys=self._keys(key), args=args)
        except (RedisError, OSError) as exc:
            log.warning("response cache unavailable (%s): not stored", type(exc).__name__)

    async def clear(self) -> None:
        client = redis_client(self.url)
        names = [name async for name in client.scan_iter(match=f"{self.base}:*", count=500)]
        if names:
            await client.delete(*names)


_cache: ResponseCache | None = None


def response_cache() -> ResponseCache:
    """The process's backend, chosen by REDIS_URL."""
    global _cache
    if _cache is None:
        from django.conf import settings

        size, entry = settings.SLUICE_CACHE_MAX_BYTES, settings.SLUICE_CACHE_MAX_ENTRY_BYTES
        if settings.REDIS_URL:
            _cache = RedisResponseCache(
                settings.REDIS_URL, settings.SLUICE_REDIS_PREFIX, size, entry
            )
        else:
            _cache = LocalResponseCache(size, entry)
    return _cache
