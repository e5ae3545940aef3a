"""Without Redis, changes go through the database: another process writes a change, this
one reads it at its next read of the log and drops what it names; each read vouches for
the changes before it, so cached values outlive their time to live without reloads."""

import asyncio
import logging
import time

import pytest
from django.db import DatabaseError

from core import change_log
from core.change_log import ChangeReader, publish
from core.db import db_write
from core.models import Change
from core.refresh import RefreshingCache, changes_heard, heard
from tests.support.caches import Source

pytestmark = pytest.mark.django_db(transaction=True)  # the reader's thread sees commits only

TTL = 0.3
TRUSTED = 60.0


def cache(kind: str, ttl: float = TTL) -> RefreshingCache[str]:
    return RefreshingCache(lambda: ttl, name=kind, trusted=lambda: TRUSTED)


@pytest.fixture
async def reader():
    changes_heard(None)
    reading = ChangeReader()
    await reading.read()  # the first read: the newest row, and every cached value dropped
    yield reading
    await reading.stop()
    changes_heard(None)


async def test_a_change_written_by_another_process_drops_the_value_at_the_next_read(reader):
    values, source = cache("keys", ttl=TRUSTED), Source("valid")
    assert await values.get("k", source.load) == "valid"
    source.value = "revoked"
    await db_write(publish, ["keys:prefix=sk-sluice-0123"])  # as a management command does
    assert await values.get("k", source.load) == "valid"  # not read yet
    await reader.read()
    assert await values.get("k", source.load) == "revoked"
    assert source.reads == 2


async def test_a_change_drops_only_what_it_names(reader):
    keys, catalog = cache("keys", ttl=TRUSTED), cache("catalog", ttl=TRUSTED)
    key_source, catalog_source = Source("k1"), Source("c1")
    await keys.get("k", key_source.load)
    await catalog.get("c", catalog_source.load)
    await db_write(publish, ["catalog"])
    await reader.read()
    await keys.get("k", key_source.load)
    await catalog.get("c", catalog_source.load)
    assert (key_source.reads, catalog_source.reads) == (1, 2)


async def test_while_reads_vouch_a_value_outlives_its_ttl_without_a_reload(reader):
    values, source = cache("limits"), Source("a")
    await values.get("k", source.load)
    source.value = "b"  # behind Sluice's back: no change written
    for _ in range(3):
        await asyncio.sleep(TTL / 2)
        await reader.read()
    assert heard.through is not None and heard.through > time.monotonic() - TTL
    assert await values.get("k", source.load) == "a"
    assert source.reads == 1


async def test_without_reads_a_value_older_than_its_ttl_is_reloaded(reader):
    values, source = cache("limits"), Source("a")
    await values.get("k", source.load)
    source.value = "b"
    await asyncio.sleep(TTL * 1.2)  # no read since the fixture's: it vouches no more
    assert await values.get("k", source.load) == "b"


async def test_the_first_read_drops_what_was_cached_before_it():
    changes_heard(None)
    values, source = cache("keys", ttl=TRUSTED), Source("a")
    await values.get("k", source.load)
    await db_write(publish, ["limits"])  # names nothing cached here, but nobody read it
    await ChangeReader().read()
    await values.get("k", source.load)
    assert source.reads == 2
    changes_heard(None)


async def test_rows_pruned_before_they_were_read_drop_everything(reader, monkeypatch):
    monkeypatch.setattr(change_log, "KEEP", 3)
    values, source = cache("catalog", ttl=TRUSTED), Source("a")
    await values.get("k", source.load)
    for n in range(6):  # none names the catalog; the first three are pruned unread
        await db_write(publish, [f"keys:prefix=sk-sluice-{n}"])
    await reader.read()
    await values.get("k", source.load)
    assert source.reads == 2


async def test_the_log_keeps_only_its_latest_rows(monkeypatch):
    monkeypatch.setattr(change_log, "KEEP", 3)
    for n in range(7):
        await db_write(publish, [f"keys:member={n}"])
    kept = await db_write(lambda: [c.words for c in Change.objects.order_by("pk")])
    assert kept == [f"keys:member={n}" for n in (4, 5, 6)]


async def test_a_reader_that_cannot_read_vouches_for_nothing_and_says_so_once(
    reader, monkeypatch, settings, caplog
):
    settings.SLUICE_CHANGE_POLL_SECONDS = 0.02

    def unreachable(last: int) -> None:
        raise DatabaseError("connection refused")

    monkeypatch.setattr(change_log, "_after", unreachable)
    values, source = cache("keys"), Source("a")
    await values.get("k", source.load)
    source.value = "b"
    with caplog.at_level(logging.WARNING, logger="sluice"):
        reader.start()
        deadline = time.monotonic() + 5
        while heard.through is not None:
            assert time.monotonic() < deadline, "still vouching"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # several failed reads
    assert [r.message for r in caplog.records].count(
        "reading the change log failed (connection refused); retrying"
    ) == 1
    await asyncio.sleep(TTL)
    assert await values.get("k", source.load) == "b"


def test_a_change_made_here_is_written_for_the_other_processes(settings):
    from core.refresh import invalidate

    settings.REDIS_URL = ""
    invalidate("keys:prefix=sk-sluice-abc", "limits")
    assert list(Change.objects.values_list("words", flat=True)) == [
        "keys:prefix=sk-sluice-abc limits"
    ]
