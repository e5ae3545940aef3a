"""The latency histogram each rollup row keeps (the usage report's p50/p95 come from it)."""

from datetime import UTC, datetime

import pytest

from quotas.models import LATENCY_FIELDS, latency_field
from routing.models import Outcome
from routing.observability.audit import AttemptLog, CallLog, _rollups, _write

HOUR = datetime(2026, 11, 29, 14, 0, tzinfo=UTC)


def _call(n: int, latency_ms: float, *, attempted: bool = True) -> CallLog:
    call = CallLog(request_id=f"r-{n}", endpoint="chat/completions", client_ip=None)
    call.created_at = HOUR
    call.key_prefix, call.member_id, call.served_deployment = "k1", 1, "big"
    call.latency_ms = latency_ms
    if attempted:
        call.attempts.append(AttemptLog(number=1, deployment="big", started_at=HOUR))
    else:
        call.outcome, call.served_deployment = Outcome.RATE_LIMITED, ""
    return call


def test_latency_field_picks_the_first_bucket_that_holds_it():
    assert latency_field(0) == "latency_le_100ms"
    assert latency_field(100) == "latency_le_100ms"
    assert latency_field(100.1) == "latency_le_250ms"
    assert latency_field(59_999) == "latency_le_60000ms"
    assert latency_field(600_000) == "latency_over"


def test_rollups_count_latency_of_calls_that_reached_an_upstream_only():
    calls = [_call(1, 50), _call(2, 300), _call(3, 300), _call(4, 90_000)]
    calls.append(_call(5, 1, attempted=False))  # refused by a limit: no upstream latency
    rows = {r["deployment"]: r for r in _rollups(calls)}
    big = rows["big"]
    assert (big["latency_le_100ms"], big["latency_le_500ms"], big["latency_over"]) == (1, 2, 1)
    assert sum(big[f] for f in LATENCY_FIELDS) == 4
    assert sum(rows[""][f] for f in LATENCY_FIELDS) == 0


@pytest.mark.django_db(transaction=True)
def test_rollups_upsert_per_route_and_add_up_across_batches():
    from quotas.models import UsageRollup

    first, second = _call(1, 50), _call(2, 300)
    first.route, second.route = "smart", "fast"
    _write([first, second])
    third = _call(3, 2000)
    third.route = "smart"
    _write([third])
    rows = {r.route: r for r in UsageRollup.objects.filter(key_prefix="k1", deployment="big")}
    assert (rows["smart"].requests, rows["fast"].requests) == (2, 1)
    assert (rows["smart"].latency_le_100ms, rows["smart"].latency_le_2500ms) == (1, 1)
