"""What a runner reads every tick (selectors.active_batches) is what the ORM reads, from
SQL built once (core/prepared.py): the same rows, converted the same way (a datetime read
back from SQLite is a datetime, aware, not text)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import Application, Team
from batches.models import Batch, BatchFile
from batches.selectors import ACTIVE, _active, active_batches
from core.prepared import Prepared

pytestmark = pytest.mark.django_db


def _batch(n: int, status: str) -> Batch:
    team = Team.objects.create(slug=f"t{n}", name="t", batch_windows="00:00-06:00")
    app = Application.objects.create(team=team, slug=f"a{n}", name="a")
    now = timezone.now()
    source = BatchFile.objects.create(
        id=f"file-{n}",
        application=app,
        purpose="batch",
        filename="in.jsonl",
        bytes=0,
        storage_name=f"files/{n}",
        created_at=now,
    )
    return Batch.objects.create(
        id=f"batch_{n}",
        application=app,
        key_prefix="sk-sluice-x",
        endpoint="/v1/chat/completions",
        input_file=source,
        completion_window="24h",
        status=status,
        created_at=now + timedelta(seconds=n),
        expires_at=now + timedelta(hours=n),
    )


def test_the_runners_read_gives_what_the_orm_gives() -> None:
    for n, status in enumerate(["in_progress", "completed", "validating", "cancelling"]):
        _batch(n, status)
    read = active_batches()
    assert [b.id for b in read] == ["batch_0", "batch_2", "batch_3"]
    assert [b.status for b in read] == ["in_progress", "validating", "cancelling"]
    expected = list(_active())
    assert [(b.id, b.expires_at, b.storage_name) for b in read] == [
        (row[0], row[5], row[9]) for row in expected
    ]
    assert all(b.expires_at.tzinfo is not None for b in read)
    assert read[0].windows == "00:00-06:00" and read[0].storage_name == "files/0"
    assert set(ACTIVE) >= {b.status for b in read}


def test_the_query_is_built_once_and_run_every_time() -> None:
    built = []

    def build():  # type: ignore[no-untyped-def]
        built.append(1)
        return _active()

    prepared = Prepared(build)
    _batch(1, "in_progress")
    assert len(prepared.rows()) == 1
    _batch(2, "in_progress")
    assert len(prepared.rows()) == 2  # run again: the new row is there
    assert len(built) == 1
