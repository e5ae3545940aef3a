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


def test_a_known_counter_is_counted_in_one_round_trip_and_survives_a_flush() -> None:
    cache, key = _cache(), f"rl-{uuid.uuid4().hex}"
    assert cache.add(key, 1, 60)
    client = cache._cache.get_client(write=True)
    commands = []
    original = client.execute_command

    def counted(*args, **kwargs):
        commands.append(args[0])
        return original(*args, **kwargs)

    client.execute_command = counted
    try:
        assert not cache.add(key, 1, 60)  # known: no round trip
        assert cache.incr(key) == 2
        assert len(commands) == 1  # the incr script alone
        cache.delete(key)  # Redis lost it: counting starts again, with its timeout
        assert cache.incr(key) == 1
    finally:
        client.execute_command = original
    assert 55 <= client.ttl(cache.make_and_validate_key(key)) <= 60


def test_get_usage_counts_every_request_across_cache_objects() -> None:
    """django-ratelimit's own path: add, then incr, through a new cache object each time."""
    from django.test import RequestFactory
    from django_ratelimit.core import get_usage

    request, group = RequestFactory().post("/v1/x"), f"g-{uuid.uuid4().hex}"
    counts = [
        get_usage(request, group=group, key=lambda g, r: "k", rate="5/m", increment=True)
        for _ in range(7)
    ]
    assert [c["count"] for c in counts] == [1, 2, 3, 4, 5, 6, 7]
    assert [c["should_limit"] for c in counts] == [False] * 5 + [True] * 2


def test_requests_per_minute_keys_carry_the_redis_prefix() -> None:
    """Every key Sluice writes to Redis starts with SLUICE_REDIS_PREFIX, the window counters
    of requests per minute too, so installations sharing a Redis count apart."""
    import redis
    from django.conf import settings
    from django.test import RequestFactory
    from django_ratelimit.core import get_usage

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    pattern = f"{settings.SLUICE_REDIS_PREFIX}:*"
    before = set(client.scan_iter(match=pattern))
    request, group = RequestFactory().post("/v1/x"), f"g-{uuid.uuid4().hex}"
    usage = get_usage(request, group=group, key=lambda g, r: "k", rate="5/m", increment=True)
    assert usage["count"] == 1
    assert len(set(client.scan_iter(match=pattern)) - before) == 1
