"""The audit writer against the real database: one bad row never holds the others back,
whatever the driver raises, and strings a database cannot store are made storable."""

import asyncio
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from django.db import connection

from core.db import db_read
from quotas.models import UsageRollup
from routing.models import Attempt, CallRecord
from routing.observability.audit import AttemptLog, AuditWriter, CallLog, _statements, _write


def _call(model: str = "fast", prefix: str | None = None) -> CallLog:
    call = CallLog(
        request_id=f"req_{uuid.uuid4().hex}", endpoint="chat/completions", client_ip=None
    )
    call.key_prefix = prefix or uuid.uuid4().hex[:12]
    call.member_id, call.requested_model, call.served_deployment = 1, model, "small"
    call.tokens_in, call.tokens_out, call.cost = 3, 5, Decimal("0.25")
    return call


def _written(calls: list[CallLog]) -> set[str]:
    ids = [c.request_id for c in calls]
    return set(CallRecord.objects.filter(request_id__in=ids).values_list("request_id", flat=True))


@pytest.mark.django_db
@pytest.mark.parametrize("poison", ["fast\ud800", "fast\x00", "\udfff" * 3])
def test_a_lone_surrogate_or_nul_is_stored_replaced_with_the_rest_of_the_batch(poison):
    prefix = uuid.uuid4().hex[:12]
    calls = [_call(prefix=prefix), _call(poison, prefix=prefix), _call(prefix=prefix)]
    _write(calls)
    assert _written(calls) == {c.request_id for c in calls}
    stored = CallRecord.objects.get(request_id=calls[1].request_id).requested_model
    assert stored.startswith(("fast", "?", "\ufffd")) and "\x00" not in stored
    stored.encode("utf-8")  # storable, and readable back
    rollups = UsageRollup.objects.filter(key_prefix=prefix)  # one row per route
    assert sum(r.requests for r in rollups) == 3
    assert sum(r.tokens_out for r in rollups) == 15
    assert all("\x00" not in r.route for r in rollups)


@pytest.mark.django_db
def test_any_error_writing_a_batch_isolates_the_bad_row_and_writes_the_rest():
    """Not only DatabaseError: here the row cannot even be prepared (a TypeError)."""
    prefix = uuid.uuid4().hex[:12]
    bad = _call(prefix=prefix)
    bad.created_at = "not a date"  # type: ignore[assignment]
    calls = [_call(prefix=prefix), bad, _call(prefix=prefix)]
    _write(calls)  # never raises for a bad row
    assert _written(calls) == {calls[0].request_id, calls[2].request_id}
    assert UsageRollup.objects.get(key_prefix=prefix).requests == 2


@pytest.mark.django_db
def test_a_batch_larger_than_one_statement_is_written_whole_and_once():
    """Rows go many to a statement (SQLite's driver takes 999 parameters: 29 calls); a
    batch written again, as after a commit whose answer was lost, adds nothing."""
    prefix = uuid.uuid4().hex[:12]
    calls = [_call(prefix=prefix) for _ in range(70)]
    for call in calls:
        call.attempts = [AttemptLog(1, "small", call.created_at, status_code=200)]
    _write(calls)
    _write(calls[:40])
    assert _written(calls) == {c.request_id for c in calls}
    assert Attempt.objects.filter(call__key_prefix=prefix).count() == 70


def test_batches_of_every_size_take_statements_of_a_few_sizes():
    """As many rows as a statement takes, then powers of two: whatever a batch's size, its
    statements are among a few texts the driver keeps prepared, and cover every row once."""
    sizes: set[int] = set()
    for rows in range(300):
        spans = list(_statements(rows, 27))
        assert [i for start, size in spans for i in range(start, start + size)] == list(range(rows))
        sizes |= {size for _, size in spans}
    assert sizes == {27, 16, 8, 4, 2, 1}


@pytest.mark.django_db
def test_a_call_s_times_read_back_as_the_instants_written_whatever_their_zone():
    """UTC times take a shorter way to the database than times in other zones; both, and a
    time on a whole second (no fraction in its text), must come back as the same instant,
    and sort and filter by time as the ORM's own rows do."""
    moments = [
        datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC),
        datetime(2026, 3, 1, 12, 30, 15, tzinfo=UTC),
        datetime(2026, 3, 1, 14, 30, 16, 5, tzinfo=timezone(timedelta(hours=2))),
    ]
    calls = [_call() for _ in moments]
    for call, moment in zip(calls, moments, strict=True):
        call.created_at = moment
        call.attempts = [AttemptLog(1, "small", moment, status_code=200)]
    _write(calls)
    for call, moment in zip(calls, moments, strict=True):
        record = CallRecord.objects.get(request_id=call.request_id)
        assert record.created_at == moment
        assert Attempt.objects.get(call=record).started_at == moment
    ids = [c.request_id for c in calls]
    later = CallRecord.objects.filter(request_id__in=ids, created_at__gt=moments[0])
    assert list(later.order_by("created_at").values_list("request_id", flat=True)) == ids[2:]


@pytest.mark.django_db(transaction=True)
async def test_the_writer_goes_on_after_a_poisoned_row_instead_of_retrying_it_forever():
    writer = AuditWriter()
    bad = _call()
    bad.created_at = "not a date"  # type: ignore[assignment]
    first = [_call("fast\ud800"), bad, _call()]
    for call in first:
        writer.record(call)
    await writer.flush()
    later = [_call(), _call()]
    for call in later:
        writer.record(call)
    await writer.flush()
    assert writer.pending() == 0
    # The writer's thread keeps its connection: close it, or the test database cannot go.
    await asyncio.get_running_loop().run_in_executor(writer._executor, lambda: connection.close())
    written = await db_read(_written, first + later)
    assert written == {c.request_id for c in first + later if c is not bad}


@pytest.mark.django_db(transaction=True)
async def test_a_flush_waits_for_the_write_under_way(monkeypatch, settings):
    """A worker stopping while its writer is mid-write: the calls of that write are no
    longer pending, and a flush that did not wait for it let the worker exit first."""
    import threading

    from routing.observability import audit

    settings.SLUICE_AUDIT_FLUSH_SECONDS = 0.01
    entered, release = threading.Event(), threading.Event()
    write = audit._write

    def slow_write(calls: list[CallLog]) -> None:
        entered.set()
        release.wait(5)
        write(calls)

    monkeypatch.setattr(audit, "_write", slow_write)
    writer = AuditWriter()
    call = _call()
    writer.record(call)
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, entered.wait, 5)  # the writer's own write began
    assert writer.pending() == 0
    flushing = asyncio.ensure_future(writer.flush())
    await asyncio.sleep(0.2)
    assert not flushing.done()  # waits for it
    release.set()
    await flushing
    await loop.run_in_executor(writer._executor, lambda: connection.close())
    assert await db_read(_written, [call]) == {call.request_id}
