"""Made-up key prefixes are refused from memory: each worker holds every key's prefix, so a
flood of made-up ones costs a query a second, not one each (counted at the database cursor,
every thread), while a key made a moment ago, even by a process that could not tell the
worker, is still found (accounts/authentication.py)."""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.db.backends import utils

from accounts.authentication import authenticate, forget_cached_keys, known_prefixes
from accounts.keys import key_prefix_of
from core.errors import GatewayError

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every SQL statement run, from any thread."""
    seen: list[str] = []
    execute, executemany = utils.CursorWrapper.execute, utils.CursorWrapper.executemany

    def counted(self, sql, params=None):
        seen.append(sql)
        return execute(self, sql, params)

    def counted_many(self, sql, param_list):
        seen.append(sql)
        return executemany(self, sql, param_list)

    monkeypatch.setattr(utils.CursorWrapper, "execute", counted)
    monkeypatch.setattr(utils.CursorWrapper, "executemany", counted_many)
    forget_cached_keys()
    yield seen
    forget_cached_keys()


@pytest.fixture(autouse=True)
async def _closed_after() -> AsyncIterator[None]:
    """The connection of the thread `sync_to_async` ran the setup on is closed after each
    test, so the test database can be dropped at the end of the session."""
    yield
    await sync_to_async(connections.close_all)()


def _made_up() -> str:
    return f"sk-sluice-{uuid.uuid4().hex[:12]}-" + "x" * 43


def _issue() -> str:
    from accounts.models import Application, Team
    from accounts.services import SYSTEM, key_create, member_ensure

    team = Team.objects.create(slug=f"t{uuid.uuid4().hex[:6]}", name="t")
    app = Application.objects.create(team=team, slug=f"a{uuid.uuid4().hex[:6]}", name="a")
    member = member_ensure(email=f"{uuid.uuid4().hex[:8]}@example.com", team=team)
    return key_create(actor=SYSTEM, member=member, application=app)[1]


async def _refused(key: str) -> bool:
    try:
        await authenticate(key)
    except GatewayError as refused:
        assert refused.status == 401
        return True
    return False


async def test_a_flood_of_made_up_prefixes_costs_a_query_a_second_not_one_each(queries) -> None:
    real = await sync_to_async(_issue)()
    assert not await _refused(real)  # the worker has seen keys: the set is loaded
    queries.clear()
    started = time.monotonic()
    for _ in range(5):  # five waves of 200 made-up keys at once
        assert all(await asyncio.gather(*(_refused(_made_up()) for _ in range(200))))
    took = time.monotonic() - started
    # One whole-set load per wave (at most one a second): not 1,000 lookups.
    assert len(queries) <= took + 2, (len(queries), took)
    assert not await _refused(real)


async def test_a_key_made_where_this_worker_did_not_hear_of_it_is_still_found(queries) -> None:
    assert await _refused(_made_up())  # the set is loaded now, without the new key
    key = await sync_to_async(_issue)()
    known_prefixes.prefixes.discard(key_prefix_of(key))  # as if made by another process
    assert not await _refused(key)  # missing from the set: looked for in a load made after


async def test_a_new_keys_message_adds_its_prefix_at_once(queries) -> None:
    assert await _refused(_made_up())
    loads = known_prefixes.loads
    key = await sync_to_async(_issue)()  # saved here: its invalidation adds the prefix
    assert not await _refused(key)
    assert known_prefixes.loads == loads  # no whole-set load was needed


async def test_calls_that_arrive_while_a_new_workers_first_load_runs_wait_for_it_only(
    queries, settings
) -> None:
    """A worker's first load is under way when most of a burst arrives: a key it finds is
    found, not looked for again in a load after the pause between loads."""
    settings.SLUICE_KEY_PREFIXES_RELOAD_SECONDS = 30
    key = await sync_to_async(_issue)()
    forget_cached_keys()  # a new worker: no prefix known
    loads = known_prefixes.loads
    first = asyncio.ensure_future(_refused(key))
    for _ in range(10_000):  # a few steps of the loop: the first call begins the first load
        if known_prefixes.loads > loads:
            break
        await asyncio.sleep(0)
    assert known_prefixes.loads == loads + 1
    later = [asyncio.ensure_future(_refused(key)) for _ in range(20)]  # arrived after it began
    async with asyncio.timeout(10):  # the next load would begin 30 s after the first
        refused = await asyncio.gather(first, *later)
    assert not any(refused)
    assert known_prefixes.loads == loads + 1


async def test_a_keys_load_reads_its_member_application_and_team_in_one_query(queries) -> None:
    """A key is loaded when first seen and again about every second while it is used: its
    team comes with it, not in a query of its own."""
    assert await _refused(_made_up())  # the set is loaded
    key = await sync_to_async(_issue)()
    queries.clear()
    assert not await _refused(key)
    selects = [q for q in queries if q.startswith("SELECT")]
    assert any('FROM "accounts_apikey"' in q and '"accounts_team"' in q for q in selects)
    assert not [q for q in selects if q.split(" FROM ", 1)[1].startswith('"accounts_team"')]
