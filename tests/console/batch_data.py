"""Batches for the console tests, written straight to the database (the Batch API's own
tests run real batches end to end; here only what the pages show matters)."""

from datetime import timedelta

from django.utils import timezone

from accounts.models import ApiKey
from batches.models import Batch, BatchCount, BatchLine


def make_batch(
    key: ApiKey,
    batch_id: str,
    *,
    status: str = Batch.Status.IN_PROGRESS,
    completed: int = 0,
    failed: int = 0,
    running: int = 0,
    pending: int = 0,
    model: str = "smart",
) -> Batch:
    """A batch of `key` whose lines are in the states asked for (lines numbered in that
    order: completed, failed, running, pending)."""
    now = timezone.now()
    total = completed + failed + running + pending
    batch = Batch.objects.create(
        id=batch_id,
        application_id=key.application_id,
        member_id=key.member_id,
        key_prefix=key.prefix,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        status=status,
        total=total,
        created_at=now - timedelta(minutes=10),
        expires_at=now + timedelta(hours=23),
        in_progress_at=now - timedelta(minutes=9),
    )
    states = (
        [(BatchLine.State.DONE, False)] * completed
        + [(BatchLine.State.DONE, True)] * failed
        + [(BatchLine.State.RUNNING, False)] * running
        + [(BatchLine.State.PENDING, False)] * pending
    )
    BatchLine.objects.bulk_create(
        BatchLine(
            batch=batch,
            number=n,
            custom_id=f"req-{n}",
            model=model,
            offset=0,
            length=1,
            state=state,
            failed=is_failed,
        )
        for n, (state, is_failed) in enumerate(states, start=1)
    )
    # As the runner that made them done counts them (batches/services.py lines_finish).
    BatchCount.objects.create(batch=batch, runner="r", completed=completed, failed=failed)
    return batch
