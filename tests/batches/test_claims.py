"""Claiming lines: several runners at once never take the same line; a dead runner's lines
come back when its lease runs out, and its late answer is not written (batches/services.py).
Runs on SQLite and on PostgreSQL (SELECT ... FOR UPDATE SKIP LOCKED)."""

import importlib
import json
import random
import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.apps import apps as django_apps
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Application, Team
from batches.models import Batch, BatchCount, BatchFile, BatchLine
from batches.runner import Runner
from batches.selectors import line_counts
from batches.services import (
    ClaimedLine,
    LineAnswer,
    batch_finalize,
    line_finish,
    line_release,
    lines_claim,
    lines_finish,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _batch(lines: int) -> Batch:
    team = Team.objects.create(slug=f"t{Team.objects.count()}", name="t")
    app = Application.objects.create(team=team, slug=f"a{Application.objects.count()}", name="a")
    now = timezone.now()
    source = BatchFile.objects.create(
        id=f"file-{app.pk}",
        application=app,
        purpose="batch",
        filename="in.jsonl",
        bytes=0,
        storage_name="x",
        created_at=now,
    )
    batch = Batch.objects.create(
        id=f"batch_{app.pk}",
        application=app,
        key_prefix="sk-sluice-x",
        endpoint="/v1/chat/completions",
        input_file=source,
        completion_window="24h",
        status="in_progress",
        total=lines,
        created_at=now,
        expires_at=now + timedelta(hours=1),
    )
    BatchLine.objects.bulk_create(
        BatchLine(batch=batch, number=i, custom_id=f"c{i}", model="fast", offset=i, length=1)
        for i in range(1, lines + 1)
    )
    return batch


def test_concurrent_runners_never_claim_the_same_line() -> None:
    batch = _batch(200)
    taken: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    start = threading.Barrier(4)

    def runner(name: str) -> None:
        got: list[int] = []
        try:
            start.wait()
            while claimed := lines_claim(batch_id=batch.id, model="fast", runner=name, limit=7):
                got += [line.number for line in claimed]
                time.sleep(0.01)  # running them: the others claim meanwhile
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            taken[name] = got
            connection.close()

    threads = [threading.Thread(target=runner, args=(f"r{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    everything = [n for got in taken.values() for n in got]
    assert sorted(everything) == list(range(1, 201))  # each line once, none left
    assert sum(1 for got in taken.values() if got) >= 2  # the work was shared


def test_a_dead_runners_lines_come_back_after_its_lease_and_its_late_answer_is_dropped() -> None:
    batch = _batch(3)
    past = timezone.now() - timedelta(minutes=5)
    dead = lines_claim(batch_id=batch.id, model="fast", runner="dead", limit=3, now=past)
    assert len(dead) == 3
    # Leases still running are not taken again; these ran out long ago.
    again = lines_claim(batch_id=batch.id, model="fast", runner="alive", limit=10)
    assert [line.number for line in again] == [1, 2, 3]
    assert BatchLine.objects.get(batch=batch, number=1).claims == 2
    assert not line_finish(line=dead[0], runner="dead", result={"x": 1}, failed=False)
    for line in again:
        assert line_finish(line=line, runner="alive", result={"n": line.number}, failed=False)
    assert lines_claim(batch_id=batch.id, model="fast", runner="late", limit=10) == []


def test_a_live_lease_is_not_taken_and_holds_finalization(settings, tmp_path) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "batches": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path)},
        },
    }
    batch = _batch(2)
    held = lines_claim(batch_id=batch.id, model="fast", runner="a", limit=1)
    others = lines_claim(batch_id=batch.id, model="fast", runner="b", limit=5)
    assert [line.number for line in others] == [2]
    Batch.objects.filter(pk=batch.pk).update(cancelling_at=timezone.now(), status="cancelling")
    assert batch_finalize(batch_id=batch.id, runner="b") is None  # a's line is in flight
    assert line_finish(line=held[0], runner="a", result={"custom_id": "c1"}, failed=False)
    line_release(line_id=others[0].id, runner="b")  # b abandons its line on the cancel
    assert batch_finalize(batch_id=batch.id, runner="b") == "cancelled"
    batch.refresh_from_db()
    assert batch.cancelled_at is not None and batch.status == "cancelled"
    output = (tmp_path / batch.output_file.storage_name).read_text().splitlines()
    errors = (tmp_path / batch.error_file.storage_name).read_text().splitlines()
    assert [json.loads(line)["custom_id"] for line in output] == ["c1"]
    assert [json.loads(line)["error"]["code"] for line in errors] == ["batch_cancelled"]
    assert not BatchLine.objects.filter(batch=batch).exclude(result="").exists()  # not kept


def test_batch_status_lists_progress_and_window() -> None:
    from io import StringIO

    from django.core.management import call_command

    batch = _batch(3)
    claimed = lines_claim(batch_id=batch.id, model="fast", runner="a", limit=2)
    line_finish(line=claimed[0], runner="a", result={}, failed=False)
    Application.objects.filter(pk=batch.application_id).update(batch_windows="00:00-06:00")
    out = StringIO()
    call_command("batch_status", stdout=out)
    row = next(line for line in out.getvalue().splitlines() if line.startswith(batch.id))
    assert row.split()[2:] == ["in_progress", "1/3", "0", "1", "00:00-06:00"]


def test_answers_written_together_are_each_fenced_by_their_own_claim() -> None:
    """A runner writes many answers (and gives lines back) in one call: each line is
    written only if it is still that runner's; the others are named, not overwritten."""
    batch = _batch(5)
    past = timezone.now() - timedelta(minutes=5)
    stalled = lines_claim(batch_id=batch.id, model="fast", runner="a", limit=2, now=past)
    taken = lines_claim(batch_id=batch.id, model="fast", runner="b", limit=2)  # lapsed: 1, 2
    assert [line.number for line in taken] == [1, 2]
    fresh = lines_claim(batch_id=batch.id, model="fast", runner="a", limit=3, lapsed=False)
    assert [line.number for line in fresh] == [3, 4, 5]
    answers = [
        LineAnswer(batch.id, line.id, json.dumps({"by": "a", "n": line.number}), line.number == 4)
        for line in stalled + fresh[:2]
    ]
    lost = lines_finish(runner="a", answers=answers, released=[fresh[2].id])
    assert sorted(lost) == sorted(line.id for line in stalled)
    rows = {r.number: r for r in BatchLine.objects.filter(batch=batch)}
    assert [rows[n].state for n in range(1, 6)] == ["running"] * 2 + ["done"] * 2 + ["pending"]
    assert json.loads(rows[3].result) == {"by": "a", "n": 3} and rows[4].failed
    assert rows[1].claimed_by == "b" and rows[1].result == ""  # b's, untouched
    assert rows[5].claimed_by == "" and rows[5].lease_until is None
    answers = [LineAnswer(batch.id, line.id, "{}", False) for line in taken]
    assert lines_finish(runner="b", answers=answers, released=[]) == []


def test_a_claim_from_a_number_takes_pending_lines_from_there_and_lapsed_ones_anywhere() -> None:
    """A runner claims from past the lines it claimed last (their entries stay in the index
    range until PostgreSQL vacuums them); lines whose lease lapsed are taken wherever."""
    batch = _batch(6)
    past = timezone.now() - timedelta(minutes=5)
    dead = lines_claim(batch_id=batch.id, model="fast", runner="dead", limit=1, now=past)
    assert [line.number for line in dead] == [1]
    later = lines_claim(batch_id=batch.id, model="fast", runner="a", limit=3, from_number=4)
    assert [line.number for line in later] == [1, 4, 5]
    rest = lines_claim(batch_id=batch.id, model="fast", runner="a", limit=5)
    assert [line.number for line in rest] == [2, 3, 6]


async def test_the_runner_claims_past_its_last_line_and_again_from_a_line_it_gave_back() -> None:
    runner = Runner()
    asked: list[int] = []
    answers = [[1, 2, 3], [4, 5], [2], []]

    async def claim_read(fn, **kwargs):  # the database's answers, in turn
        asked.append(kwargs["from_number"])
        numbers = answers.pop(0)
        return [(ClaimedLine(n, "b", n, f"c{n}", "m", 0, 1), b"{}") for n in numbers], []

    runner._db = claim_read
    batch = SimpleNamespace(id="b", storage_name="x")
    first = await runner._claim(batch, "m", 3, lapsed=False)
    await runner._claim(batch, "m", 3, lapsed=False)
    runner._release(first[1][0])  # line 2 goes back to pending: claimable first
    await runner._claim(batch, "m", 3, lapsed=False)
    await runner._claim(batch, "m", 3, lapsed=False)
    assert asked == [0, 4, 2, 3]


def _recount(batch_ids: list[str]) -> dict[str, dict[str, int]]:
    """The counts as the lines say them (what line_counts read before the counts)."""
    counts = {}
    for batch_id in batch_ids:
        done = BatchLine.objects.filter(batch_id=batch_id, state="done")
        failed = done.filter(failed=True).count()
        counts[batch_id] = {"completed": done.count() - failed, "failed": failed}
    return counts


def test_the_counts_follow_the_lines_made_done_and_only_those() -> None:
    """Answers of two batches in one write, answers that no longer count (another runner
    took their lines), lines given back, failed answers: the batches' counts are what
    their lines say, summed over the runners."""
    one, two = _batch(5), _batch(3)
    past = timezone.now() - timedelta(minutes=5)
    stalled = lines_claim(batch_id=one.id, model="fast", runner="a", limit=2, now=past)
    taken = lines_claim(batch_id=one.id, model="fast", runner="b", limit=2)  # a's, lapsed
    fresh = lines_claim(batch_id=one.id, model="fast", runner="a", limit=3, lapsed=False)
    other = lines_claim(batch_id=two.id, model="fast", runner="a", limit=3)
    answers = [LineAnswer(one.id, line.id, "{}", False) for line in stalled + fresh[:2]]
    answers += [LineAnswer(two.id, line.id, "{}", line.number != 1) for line in other]
    lost = lines_finish(runner="a", answers=answers, released=[fresh[2].id])
    assert sorted(lost) == sorted(line.id for line in stalled)
    assert line_counts([one.id, two.id]) == {
        one.id: {"completed": 2, "failed": 0},
        two.id: {"completed": 1, "failed": 2},
    }
    assert (
        lines_finish(
            runner="b",
            answers=[LineAnswer(one.id, line.id, "{}", True) for line in taken],
            released=[],
        )
        == []
    )
    again = lines_claim(batch_id=one.id, model="fast", runner="a", limit=5)
    assert line_finish(line=again[0], runner="a", result={}, failed=False)
    counts = line_counts([one.id, two.id])
    assert counts == _recount([one.id, two.id])
    assert counts[one.id] == {"completed": 3, "failed": 2}
    assert BatchCount.objects.filter(batch=one).count() == 2  # one row a runner


def test_runners_finishing_at_once_count_every_line_once() -> None:
    batch = _batch(300)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def runner(name: str, seed: int) -> None:
        rng = random.Random(seed)
        try:
            start.wait()
            while claimed := lines_claim(batch_id=batch.id, model="fast", runner=name, limit=9):
                back = [line.id for line in claimed if rng.random() < 0.2]
                answers = [
                    LineAnswer(batch.id, line.id, "{}", rng.random() < 0.3)
                    for line in claimed
                    if line.id not in back
                ]
                assert lines_finish(runner=name, answers=answers, released=back) == []
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=runner, args=(f"r{i}", i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    counts = line_counts([batch.id])[batch.id]
    assert counts == _recount([batch.id])[batch.id]
    assert counts["completed"] + counts["failed"] == 300
    assert 0 < counts["failed"] < 300


def test_the_migration_counts_the_lines_of_batches_made_before() -> None:
    migration = importlib.import_module("batches.migrations.0004_batch_counts")
    batch = _batch(4)
    claimed = lines_claim(batch_id=batch.id, model="fast", runner="a", limit=3)
    answers = [LineAnswer(batch.id, line.id, "{}", line.number == 2) for line in claimed]
    lines_finish(runner="a", answers=answers, released=[])
    BatchCount.objects.all().delete()  # as before the counts
    migration.count_done_lines(django_apps, None)
    assert line_counts([batch.id]) == {batch.id: {"completed": 2, "failed": 1}}


def test_a_claim_reads_the_claim_index_in_order_whatever_the_statistics_say() -> None:
    """A batch's lines inserted since the table was analyzed look like a handful to
    PostgreSQL's planner, which then reads every pending line of the batch and sorts them:
    a claim costs what is left of the batch. The claim forbids the sort in its transaction,
    so the plan is a range of the claim index, in order, however big the batch."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's planner")
    batch = _batch(3000)
    with CaptureQueriesContext(connection) as queries:
        claimed = lines_claim(
            batch_id=batch.id, model="fast", runner="a", limit=64, lapsed=False, from_number=1001
        )
    assert [line.number for line in claimed] == list(range(1001, 1065))
    sent = [q["sql"] for q in queries.captured_queries]
    read = next(i for i, sql in enumerate(sent) if "SKIP LOCKED" in sql)
    assert "SET LOCAL enable_sort = off" in sent[:read]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute(f"EXPLAIN {sent[read]}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "batch_line_claim" in plan and "Sort" not in plan, plan
