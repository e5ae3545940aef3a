"""The cache django-ratelimit counts in: Django's RedisCache semantics, one shared client."""

import os
import threading
import uuid

import pytest
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache

from quotas.ratelimit_cache import RateLimitRedisCache

pytestmark = pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="REDIS_URL is not set")


def _cache() -> RedisCache:
    return RateLimitRedisCache(os.environ["REDIS_URL"], {"KEY_PREFIX": "sluice-test"})


def test_incr_counts_atomically_and_refuses_a_missing_key() -> None:
    cache, key = _cache(), f"rl-{uuid.uuid4().hex}"
    assert cache.add(key, 1, 60)
    assert not cache.add(key, 1, 60)
    assert cache.incr(key) == 2
    assert cache.incr(key, 5) == 7
    with pytest.raises(ValueError):
        cache.incr(f"{key}-missing")


def test_cache_objects_share_one_client_and_pool() -> None:
    """Django makes a cache object per context (every request): they must not each open a
    connection pool of their own."""
    first, second = _cache(), _cache()
    first.add("rl-shared", 1, 1)
    second.add("rl-shared", 1, 1)
    assert first._cache is second._cache
    assert first._cache.get_client(write=True) is second._cache.get_client(write=True)


def test_the_configured_ratelimit_cache_is_the_same_in_every_thread() -> None:
    seen = []

    def look() -> None:
        seen.append(caches["ratelimit"]._cache)

    threads = [threading.Thread(target=look) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    look()
    assert len({id(c) for c in seen}) == 1
