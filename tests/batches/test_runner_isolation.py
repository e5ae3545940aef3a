"""A runner tick handles each batch alone: a batch that trips the runner (here one whose
application's batch windows no code can read, as a hand edit of the row would leave them) is
logged once and retried, and every other batch of the tick still moves (batches/runner.py)."""

import logging
from datetime import timedelta

import pytest
from django.core.files.base import ContentFile
from django.db import connections
from django.utils import timezone

from accounts.models import Application, Team
from batches.models import Batch, BatchFile
from batches.runner import Runner
from batches.storage import batch_storage, storage_name
from routing.models import Route

pytestmark = pytest.mark.django_db(transaction=True)

_LINE = (
    b'{"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions", '
    b'"body": {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}}\n'
)


def _batch(slug: str, status: str, windows: str, created_offset: int) -> Batch:
    team = Team.objects.create(slug=slug, name=slug)
    app = Application.objects.create(team=team, slug=slug, name=slug, batch_windows=windows)
    app.routes.add(Route.objects.get_or_create(name="fast")[0])
    now = timezone.now()
    stored = batch_storage().save(storage_name(app.pk, f"file-{slug}"), ContentFile(_LINE))
    source = BatchFile.objects.create(
        id=f"file-{slug}",
        application=app,
        purpose="batch",
        filename="in.jsonl",
        bytes=len(_LINE),
        lines=1,
        storage_name=stored,
        created_at=now,
    )
    return Batch.objects.create(
        id=f"batch_{slug}",
        application=app,
        key_prefix="sk-sluice-x",
        endpoint="/v1/chat/completions",
        input_file=source,
        completion_window="24h",
        status=status,
        total=1,
        created_at=now - timedelta(seconds=created_offset),
        expires_at=now + timedelta(hours=1),
    )


async def test_a_batch_that_trips_the_runner_never_holds_up_the_others(caplog) -> None:
    from asgiref.sync import sync_to_async

    make = sync_to_async(_batch)
    # The broken one first (the oldest), so a tick that gives up at it never reaches the other.
    broken = await make("broken", "in_progress", "whenever", 60)
    good = await make("good", "validating", "", 0)
    runner = Runner()
    caplog.set_level(logging.INFO, logger="sluice.batches")
    for _ in range(5):
        await runner.tick()
    await good.arefresh_from_db()
    await broken.arefresh_from_db()
    assert good.status == "in_progress"
    assert broken.status == "in_progress"  # retried each tick, not lost
    failures = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failures) == 1 and broken.id in failures[0].getMessage()  # said once
    assert runner.failing == {broken.id: 5}
    async for source in BatchFile.objects.filter(id__in=["file-broken", "file-good"]):
        await sync_to_async(batch_storage().delete)(source.storage_name)
    await sync_to_async(connections.close_all)()  # the test database can be dropped at the end
