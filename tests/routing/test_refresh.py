"""The refreshing cache's staleness bound: a hot value is reloaded in the background before
its time to live runs out, and a value older than that is never served."""

import asyncio

from core.errors import GatewayError
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


class Outage(Source):
    """A database that stops answering: reads fail (or hang) while `down`."""

    def __init__(self, value: str, *, hang: bool = False) -> None:
        super().__init__(value)
        self.down, self.hang = False, hang

    async def load(self) -> str:
        if self.down:
            self.reads += 1
            if self.hang:
                await asyncio.sleep(3600)
            raise ConnectionError("the database does not answer")
        return await super().load()


def _stale(seconds: float) -> RefreshingCache[str]:
    return RefreshingCache(
        lambda: TTL,
        name="test-stale",
        select=lambda key, value, selector: key == selector,
        stale_if_error=lambda: seconds,
        reload_wait=lambda: 0.05,
    )


async def test_while_the_database_fails_a_cached_value_is_served_stale_up_to_its_bound():
    for hang in (False, True):
        cache, source = _stale(0.5), Outage("hot", hang=hang)
        await cache.get("k", source.load)
        source.down = True
        served = []
        started = asyncio.get_running_loop().time()
        while asyncio.get_running_loop().time() - started < TTL + 0.4:  # past the TTL
            served.append(await cache.get("k", source.load))
            await asyncio.sleep(0.01)
        assert set(served) == {"hot"}
        await asyncio.sleep(TTL + 0.5 - (asyncio.get_running_loop().time() - started))
        with_bound = asyncio.wait_for(cache.get("k", source.load), timeout=0.3)
        try:
            await with_bound
        except (ConnectionError, GatewayError):
            pass  # past its bound, a stale value is not served: the outage shows
        else:
            raise AssertionError("served past SLUICE_STALE_IF_ERROR_SECONDS")


async def test_once_a_reload_failed_requests_do_not_wait_for_theirs():
    cache, source = _stale(60), Outage("hot", hang=True)
    await cache.get("k", source.load)
    source.down = True
    await asyncio.sleep(TTL * 1.1)
    assert await cache.get("k", source.load) == "hot"  # waited the reload's bound (50 ms)
    loop = asyncio.get_running_loop()
    started = loop.time()
    for _ in range(20):
        assert await cache.get("k", source.load) == "hot"
    assert loop.time() - started < 0.05
    assert source.reads == 2  # the first read, then one reload (it hangs): no pile-up


async def test_a_change_during_an_outage_stops_that_value_and_only_that_one():
    cache, source = _stale(60), Outage("hot")
    await cache.get("revoked", source.load)
    await cache.get("other", source.load)
    source.down = True
    await asyncio.sleep(TTL * 1.1)
    drop_local(["test-stale:revoked"])  # a revocation heard through Redis
    try:
        await cache.get("revoked", source.load)
    except ConnectionError:
        pass
    else:
        raise AssertionError("a dropped value was served stale")
    assert await cache.get("other", source.load) == "hot"
    source.down = False
    assert await cache.get("revoked", source.load) == "hot"  # back, read afresh


async def test_a_read_that_hangs_is_a_quick_database_unavailable_not_a_hung_call():
    cache, source = _stale(60), Outage("never", hang=True)
    source.down = True
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        await cache.get("cold", source.load)
    except GatewayError as error:
        assert (error.status, error.code) == (503, "database_unavailable")
    else:
        raise AssertionError("a hung read was answered")
    assert loop.time() - started < 0.5
