"""manage.py prune_audit: old calls and their attempts go, in batches; rollups stay."""

from datetime import UTC, datetime, timedelta
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from accounts.models import AdminAction
from accounts.selectors import viewer_for
from accounts.services import SYSTEM
from quotas.models import DailyUsageRollup, UsageRollup
from reports.usage import period_for, usage_report
from routing.models import Attempt, CallRecord
from routing.observability.retention import audit_prune
from tests.console.people import make_people
from tests.console.report_data import call, write


@pytest.fixture
def aged(db):
    people = make_people(tag="prune")
    key = people.keys["member"]
    now = timezone.now()
    old = [
        call(key, now - timedelta(days=100, minutes=i), failed_on=(("small", "capacity"),))
        for i in range(7)
    ]
    new = [call(key, now - timedelta(days=3, minutes=i)) for i in range(3)]
    write(old + new)
    return people, old, new


def test_prune_deletes_old_calls_and_attempts_in_batches_and_keeps_rollups(aged):
    people, old, new = aged
    rollups_before = UsageRollup.objects.count()
    daily_before = DailyUsageRollup.objects.count()
    assert daily_before >= 2  # the old calls' day and the new ones'
    batches = []
    pruned = audit_prune(older_than_days=30, batch_size=3, actor=SYSTEM, progress=batches.append)
    assert (pruned.calls, pruned.attempts) == (7, 14)
    assert batches == [3, 6, 7]  # three batches of at most 3
    assert set(CallRecord.objects.values_list("pk", flat=True)) == {c.request_id for c in new}
    assert Attempt.objects.filter(call_id__in=[c.request_id for c in old]).count() == 0
    assert Attempt.objects.count() == 3
    assert UsageRollup.objects.count() == rollups_before
    assert DailyUsageRollup.objects.count() == daily_before
    # A report over the pruned period (whole UTC days: the daily rollup) still answers.
    then = old[0].created_at
    report = usage_report(
        viewer=viewer_for(people.users["staff"]),
        group_by="member",
        period=period_for(
            period="custom",
            zone=ZoneInfo("UTC"),
            now=then,
            since=(then - timedelta(days=1)).date(),
            until=then.date(),
        ),
    )
    assert report.totals.calls == 7
    action = AdminAction.objects.get(action="prune_audit")
    assert action.after["calls"] == 7


def test_prune_command_reads_the_default_from_settings(aged, settings):
    settings.SLUICE_AUDIT_RETENTION_DAYS = 2
    out = StringIO()
    call_command("prune_audit", stdout=out)
    assert "deleted 10 calls" in out.getvalue()
    assert CallRecord.objects.count() == 0


def test_prune_command_refuses_without_days_or_with_too_few(aged, settings):
    settings.SLUICE_AUDIT_RETENTION_DAYS = None
    with pytest.raises(CommandError, match="--older-than"):
        call_command("prune_audit")
    with pytest.raises(CommandError, match="at least one day"):
        call_command("prune_audit", "--older-than", "0.5")
    assert CallRecord.objects.count() == 10


def test_nothing_old_deletes_nothing_and_logs_nothing(aged):
    pruned = audit_prune(older_than_days=365, actor=SYSTEM, now=datetime.now(UTC))
    assert pruned.calls == 0
    assert not AdminAction.objects.filter(action="prune_audit").exists()
