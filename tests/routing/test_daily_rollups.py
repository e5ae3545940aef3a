"""The daily usage rollup: the audit writer adds every call to its UTC day in the same
transaction as its hour, so a day is always exactly the sum of its hours; a rebuild makes the
days again from the hours. On PostgreSQL, writers in parallel lose no update."""

import os
import threading
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from quotas.models import ROLLUP_COUNTS, DailyUsageRollup, UsageRollup
from quotas.rollups import daily_rollups_rebuild
from routing.models import Outcome
from routing.observability.audit import _write
from tests.console.people import make_people
from tests.console.report_data import call

START = datetime(2026, 11, 10, 21, 5, tzinfo=UTC)  # calls run across three UTC midnights


def _traffic(people: Any, count: int = 90) -> list:
    keys = [people.keys[k] for k in ("member", "member_peer", "rival_member")]
    calls = []
    for i in range(count):
        at = START + timedelta(minutes=47 * i)
        key = keys[i % 3]
        if i % 5 == 0:
            calls.append(
                call(key, at, route="smart", served="small", failed_on=(("big", "capacity"),))
            )
        elif i % 7 == 0:
            calls.append(call(key, at, served="", outcome=Outcome.RATE_LIMITED))
        else:
            calls.append(
                call(
                    key,
                    at,
                    route=("smart", "fast")[i % 2],
                    cost="0.10000003",
                    latency_ms=60 + 97 * (i % 11),
                    tokens=(i, 2 * i),
                )
            )
    return calls


def _hours_by_day() -> dict[tuple, dict[str, Any]]:
    days: dict[tuple, dict[str, Any]] = defaultdict(lambda: dict.fromkeys(ROLLUP_COUNTS, 0))
    for row in UsageRollup.objects.values():
        key = (
            row["hour"].astimezone(UTC).date(),
            row["key_prefix"],
            row["route"],
            row["deployment"],
        )
        for name in ROLLUP_COUNTS:
            days[key][name] += row[name]
        for name in ("member_id", "application_id", "team_id"):
            days[key][name] = row[name]
    return dict(days)


def _days() -> dict[tuple, dict[str, Any]]:
    return {
        (r["day"], r["key_prefix"], r["route"], r["deployment"]): {
            name: r[name] for name in (*ROLLUP_COUNTS, "member_id", "application_id", "team_id")
        }
        for r in DailyUsageRollup.objects.values()
    }


@pytest.mark.django_db
def test_each_day_is_the_sum_of_its_hours_after_calls_through_the_audit_writer():
    people = make_people(tag="daily")
    calls = _traffic(people)
    for start in range(0, len(calls), 13):  # several batches: the upserts add up
        _write(calls[start : start + 13])
    hours = _hours_by_day()
    assert len({day for day, *_ in hours}) == 4  # the 10th to the 13th
    assert len(hours) > 20  # keys x routes x deployments x days
    assert _days() == hours
    assert sum(r.requests for r in DailyUsageRollup.objects.all()) == len(calls)
    assert sum(r.cost for r in DailyUsageRollup.objects.all()) == sum(c.cost for c in calls)


@pytest.mark.django_db
def test_a_rebuild_makes_the_days_again_from_the_hours():
    people = make_people(tag="rebuild")
    _write(_traffic(people))
    expected = _days()
    DailyUsageRollup.objects.filter(day=date(2026, 11, 11)).update(requests=0)
    DailyUsageRollup.objects.filter(day=date(2026, 11, 12)).delete()
    UsageRollup.objects.filter(hour__lt=datetime(2026, 11, 11, tzinfo=UTC)).delete()
    # From a day on: earlier days are left as they are (the 10th keeps its daily rows).
    assert daily_rollups_rebuild(since=date(2026, 11, 11)) == len(
        [k for k in expected if k[0] >= date(2026, 11, 11)]
    )
    assert _days() == expected
    # All days: the hours are the truth (the 10th had none left).
    daily_rollups_rebuild()
    assert _days() == {k: v for k, v in expected.items() if k[0] >= date(2026, 11, 11)}


@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith(("postgres", "pgsql")),
    reason="parallel writers need PostgreSQL (SQLite takes one writer at a time)",
)
@pytest.mark.django_db(transaction=True)
def test_parallel_writers_lose_no_update_in_hours_or_days():
    """Four audit writers (as four workers) upsert the same hourly and daily rows at once."""
    people = make_people(tag="parallel")
    batches = [_traffic(people, count=60) for _ in range(8)]
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def writer(mine: list[list]) -> None:
        try:
            start.wait()
            for batch in mine:
                for i in range(0, len(batch), 6):
                    _write(batch[i : i + 6])
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(batches[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    everything = [c for batch in batches for c in batch]
    assert sum(r.requests for r in UsageRollup.objects.all()) == len(everything)
    assert sum(r.requests for r in DailyUsageRollup.objects.all()) == len(everything)
    assert sum(r.cost for r in DailyUsageRollup.objects.all()) == sum(
        (c.cost for c in everything), Decimal(0)
    )
    assert _days() == _hours_by_day()


@pytest.mark.django_db
def test_the_rebuild_command_takes_a_first_day_and_refuses_a_bad_one():
    people = make_people(tag="command")
    _write(_traffic(people, count=30))
    expected = _days()
    DailyUsageRollup.objects.all().delete()
    out = StringIO()
    call_command("rebuild_daily_rollups", "--since", "2026-11-11", stdout=out)
    assert "from 2026-11-11" in out.getvalue()
    assert _days() == {k: v for k, v in expected.items() if k[0] >= date(2026, 11, 11)}
    call_command("rebuild_daily_rollups", stdout=out)
    assert _days() == expected
    with pytest.raises(CommandError, match="not a day"):
        call_command("rebuild_daily_rollups", "--since", "2026-13-01")
