"""How a batch of calls adds up into the hourly rollups (before it reaches the database)."""

from datetime import UTC, datetime
from decimal import Decimal

from routing.observability.audit import AttemptLog, CallLog, _rollups

HOUR = datetime(2026, 11, 29, 14, 0, tzinfo=UTC)


def _call(prefix: str, served: str, *, failed_on: str | None = None) -> CallLog:
    call = CallLog(request_id=f"r-{prefix}-{served}", endpoint="chat/completions", client_ip=None)
    call.created_at = HOUR.replace(minute=30)
    call.key_prefix, call.member_id, call.served_deployment = prefix, 1, served
    call.tokens_in, call.tokens_out, call.cost = 10, 20, Decimal("0.5")
    if failed_on:
        call.attempts.append(
            AttemptLog(number=1, deployment=failed_on, started_at=HOUR, error_class="capacity")
        )
        call.fell_back = True
    return call


def test_rollups_add_up_per_hour_key_and_deployment():
    rows = _rollups([_call("k1", "big"), _call("k1", "big"), _call("k1", "small", failed_on="big")])
    by_key = {(r["key_prefix"], r["deployment"]): r for r in rows}
    big, small = by_key[("k1", "big")], by_key[("k1", "small")]
    assert (big["requests"], big["tokens_out"], big["capacity_errors"]) == (2, 40, 1)
    assert (small["requests"], small["fallbacks"], small["cost"]) == (1, 1, Decimal("0.5"))
    assert big["hour"] == HOUR


def test_rollups_come_in_key_order_so_workers_lock_rows_alike():
    """Two workers upserting the same rows in different orders deadlock on PostgreSQL."""
    calls = [_call("k9", "small"), _call("k1", "small"), _call("k5", "big"), _call("k1", "big")]
    keys = [(r["key_prefix"], r["deployment"]) for r in _rollups(calls)]
    assert keys == [("k1", "big"), ("k1", "small"), ("k5", "big"), ("k9", "small")]
