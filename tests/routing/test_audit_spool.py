"""The audit spool's lines: a call written and read back is the same call, whatever its
strings hold (a lone surrogate is valid in JSON's escapes but not in UTF-8)."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from routing.observability.audit import AttemptLog, CallLog
from routing.observability.audit_spool import decode_call, encode_call


def _call(user_agent: str) -> CallLog:
    call = CallLog(request_id="req_1", endpoint="chat/completions", client_ip="10.0.0.1")
    call.user_agent, call.requested_model, call.cost = user_agent, "fast", Decimal("0.000125")
    call.degraded = ["tools dropped"]
    call.attempts.append(
        AttemptLog(number=1, deployment="small", started_at=datetime(2026, 1, 2, tzinfo=UTC))
    )
    return call


@pytest.mark.parametrize("text", ["curl/8", "caf\u00e9 \u6f22\u5b57", "bad \ud800 half", "\x00"])
def test_a_spooled_call_reads_back_as_it_was_written(text):
    call = _call(text)
    line = encode_call(call)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = decode_call(line, CallLog, AttemptLog)
    assert back.user_agent == text
    assert (back.cost, back.created_at, back.degraded) == (
        call.cost,
        call.created_at,
        ["tools dropped"],
    )
    assert back.attempts == call.attempts
