"""The refreshing cache's staleness bound: a hot value is reloaded in the background before
its time to live runs out, and a value older than that is never served."""

import asyncio

from core.refresh import RefreshingCache, drop_local

TTL = 0.2


class Source:
    """What the database holds; counts the reads."""

    def __init__(self, value: str) -> None:
        self.value, self.reads = value, 0

    async def load(self) -> str:
        self.reads += 1
        await asyncio.sleep(0.01)
        return self.value


async def test_a_value_younger_than_half_its_ttl_is_served_without_a_read():
    cache, source = RefreshingCache(lambda: TTL), Source("a")
    assert await cache.get("k", source.load) == "a"
    source.value = "b"
    assert await cache.get("k", source.load) == "a"
    assert source.reads == 1


async def test_a_hot_value_is_reloaded_in_the_background_before_it_expires():
    cache, source = RefreshingCache(lambda: TTL), Source("a")
    await cache.get("k", source.load)
    source.value = "b"
    await asyncio.sleep(TTL * 0.6)
    assert await cache.get("k", source.load) == "a"  # served at once, reloading behind it
    await asyncio.sleep(0.05)
    assert await cache.get("k", source.load) == "b"
    assert source.reads == 2


async def test_a_value_older_than_its_ttl_is_never_served():
    """An idle spell, then a change: the first request waits for the reload and sees it
    (before, it was answered with the value of any age, then reloaded)."""
    cache, source = RefreshingCache(lambda: TTL), Source("valid")
    await cache.get("k", source.load)
    await asyncio.sleep(TTL * 1.1)
    source.value = "revoked"
    assert await cache.get("k", source.load) == "revoked"


async def test_a_change_drops_the_values_of_its_kind_at_once():
    cache, source = RefreshingCache(lambda: 60, name="test-kind"), Source("old")
    other, other_source = RefreshingCache(lambda: 60, name="other-kind"), Source("kept")
    await cache.get("k", source.load)
    await other.get("k", other_source.load)
    source.value, other_source.value = "new", "changed"
    drop_local(["test-kind"])
    assert await cache.get("k", source.load) == "new"
    assert await other.get("k", other_source.load) == "kept"


async def test_a_load_begun_before_a_change_is_not_kept():
    cache, source = RefreshingCache(lambda: 60, name="test-race"), Source("old")
    loading = asyncio.ensure_future(cache.get("k", source.load))
    await asyncio.sleep(0)
    drop_local(["test-race"])  # the change commits while the old value is being read
    assert await loading == "old"
    source.value = "new"
    assert await cache.get("k", source.load) == "new"
