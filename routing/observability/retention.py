"""How long the audit trail keeps calls: `audit_prune` deletes calls (and their attempts)
older than a number of days, in small batches, each its own short transaction, so the
audit writer and the console never wait long behind it. The usage rollups (hourly and
daily) are kept, so reports over old periods still answer."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from accounts.services import Actor, admin_action_record
from routing.models import Attempt, CallRecord


@dataclass(frozen=True)
class Pruned:
    calls: int
    attempts: int
    cutoff: datetime


def audit_prune(
    *,
    older_than_days: float,
    actor: Actor,
    batch_size: int = 5000,
    pause_seconds: float = 0.0,
    now: datetime | None = None,
    progress: Callable[[int], None] | None = None,
) -> Pruned:
    """Delete calls created before now - `older_than_days`, oldest first, `batch_size` at a
    time (attempts first, then their calls), pausing between batches if asked."""
    if older_than_days < 1:
        raise ValueError("Keep at least one day of calls (--older-than must be 1 or more).")
    if batch_size < 1:
        raise ValueError("The batch size must be positive.")
    cutoff = (now or timezone.now()) - timedelta(days=older_than_days)
    calls = attempts = 0
    while True:
        with transaction.atomic():
            # The created_at index gives the oldest ids without scanning the table.
            ids = list(
                CallRecord.objects.filter(created_at__lt=cutoff)
                .order_by("created_at")
                .values_list("pk", flat=True)[:batch_size]
            )
            if not ids:
                break
            # One DELETE of the attempts by call id, then one of the calls.
            _, deleted = CallRecord.objects.filter(pk__in=ids).delete()
            calls += deleted.get(CallRecord._meta.label, 0)
            attempts += deleted.get(Attempt._meta.label, 0)
        if progress:
            progress(calls)
        if len(ids) < batch_size:
            break
        if pause_seconds:
            time.sleep(pause_seconds)
    if calls:
        admin_action_record(
            actor=actor,
            action="prune_audit",
            obj=f"calls before {cutoff:%Y-%m-%d %H:%M} UTC",
            object_type="audit",
            after={"calls": calls, "attempts": attempts, "older_than_days": older_than_days},
        )
    return Pruned(calls, attempts, cutoff)
