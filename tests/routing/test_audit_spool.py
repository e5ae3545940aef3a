"""The audit spool's lines: a call written and read back is the same call, whatever its
strings hold (a lone surrogate is valid in JSON's escapes but not in UTF-8)."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from routing.observability.audit import AttemptLog, CallLog
from routing.observability.audit_spool import Spool, decode_call, encode_call


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


def test_lines_in_a_file_whose_worker_died_mapped_are_read_without_the_zeros_after(tmp_path):
    spool = Spool(tmp_path)
    lines = [encode_call(_call(f"agent {n}")) for n in range(3)]
    for line in lines:
        spool.append(line)
    (path,) = tmp_path.glob("*.jsonl")  # not sealed: as a worker killed now leaves it
    assert path.stat().st_size >= Spool.SEGMENT  # mapped, not written
    assert Spool.read(path) == [line.rstrip(b"\n") for line in lines]


def test_a_sealed_file_ends_at_its_last_line_and_a_full_segment_grows(tmp_path):
    spool = Spool(tmp_path)
    big = b'{"pad": "' + b"x" * (Spool.SEGMENT // 3) + b'"}\n'
    for _ in range(4):  # past the first segment
        spool.append(big)
    path = spool.seal()
    spool.tidy()  # the writer's thread closes it
    assert path is not None and path.stat().st_size == 4 * len(big)
    assert Spool.read(path) == [big.rstrip(b"\n")] * 4


def test_the_file_after_a_sealed_one_is_opened_ahead_and_removed_at_the_stop(tmp_path):
    """The loop's next call copies its line into a file the writer's thread opened, not
    one it opens itself; a file opened ahead and never used is not left behind."""
    spool = Spool(tmp_path)
    spool.append(encode_call(_call("first")))
    sealed = spool.seal()
    assert sealed is not None
    spool.tidy()
    Spool.discard([sealed])  # its calls are written
    (ahead,) = tmp_path.glob("*.jsonl")
    assert Spool.read(ahead) == []  # nothing in it yet: a worker killed now loses nothing
    line = encode_call(_call("second"))
    spool.append(line)
    assert list(tmp_path.glob("*.jsonl")) == [ahead]
    assert Spool.read(ahead) == [line.rstrip(b"\n")]
    assert spool.seal() == ahead
    spool.tidy()  # the next one opened ahead, then the worker stops
    spool.close()
    assert list(tmp_path.glob("*.jsonl")) == [ahead]


def test_a_line_torn_by_the_kill_is_left_out(tmp_path):
    path = tmp_path / "spool-1-x.jsonl"
    whole = encode_call(_call("whole"))
    torn = whole[:10] + b"\0" * (len(whole) - 11) + b"\n"  # its newline stored, not all of it
    path.write_bytes(whole + torn + whole[:20] + b"\0" * 100)
    assert Spool.read(path) == [whole.rstrip(b"\n")]


def test_a_line_spooled_by_the_earlier_format_reads_back():
    """A worker of the previous release wrote datetimes and Decimals wrapped in objects."""
    line = (
        b'{"request_id":"req_old","endpoint":"chat/completions","client_ip":null,'
        b'"created_at":{"$dt":"2026-12-01T10:00:00+00:00"},"cost":{"$dec":"0.5"},'
        b'"attempts":[{"number":1,"deployment":"small",'
        b'"started_at":{"$dt":"2026-12-01T10:00:01+00:00"}}]}'
    )
    call = decode_call(line, CallLog, AttemptLog)
    assert call.created_at == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert call.cost == Decimal("0.5")
    assert call.attempts[0].started_at == datetime(2026, 12, 1, 10, 0, 1, tzinfo=UTC)


def test_the_file_opened_ahead_has_room_for_twice_what_the_last_one_held(tmp_path):
    """A second of calls at a worker's ceiling fills more than one segment: the loop then
    copies lines into a file the writer's thread sized, rather than grow it itself."""
    spool = Spool(tmp_path)
    line = b'{"pad": "' + b"x" * 1000 + b'"}\n'
    for _ in range(Spool.SEGMENT * 3 // 2 // len(line)):  # a segment and a half
        spool.append(line)
    sealed = spool.seal()
    spool.tidy()
    assert sealed is not None
    Spool.discard([sealed])
    (ahead,) = tmp_path.glob("*.jsonl")
    assert ahead.stat().st_size == 3 * Spool.SEGMENT
