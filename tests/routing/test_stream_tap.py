"""StreamTap: relays an OpenAI SSE stream byte for byte, whatever the network chunking, while
learning the model and usage, dropping the usage chunk the client did not ask for."""

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from routing.request_path.stream_tap import StreamTap

USAGE = {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}
MODEL = "big-2025-01-01"
WORDS = ["Hello", ", ", "wörld", " 你好", "!"]


def _chunk(choices: list[dict[str, Any]], usage: Any = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "choices": choices,
        "usage": usage,
    }


def _event(payload: Any, *, compact: bool) -> bytes:
    separators = (",", ":") if compact else (", ", ": ")
    return (
        b"data: "
        + json.dumps(payload, separators=separators, ensure_ascii=False).encode()
        + (b"\n\n")
    )


def sse_stream(*, compact: bool = True, keepalive: bool = True) -> tuple[bytes, bytes, int]:
    """(whole stream, the usage-only event, number of events that carry choices)."""
    events = [
        _event(
            _chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}}]), compact=compact
        )
    ]
    for word in WORDS:
        events.append(_event(_chunk([{"index": 0, "delta": {"content": word}}]), compact=compact))
    if keepalive:
        events.append(b": keep-alive\n\n")
    events.append(
        _event(_chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]), compact=compact)
    )
    usage_event = _event(_chunk([], USAGE), compact=compact)
    events.append(usage_event)
    events.append(b"data: [DONE]\n\n")
    return b"".join(events), usage_event, len(WORDS) + 2


def relay(tap: StreamTap, pieces: list[bytes]) -> bytes:
    out = b"".join(tap.feed(piece) for piece in pieces)
    return out + tap.flush()


def two_way_splits(data: bytes) -> Iterator[list[bytes]]:
    for i in range(len(data) + 1):
        yield [data[:i], data[i:]]


def random_chunkings(data: bytes, count: int, seed: int) -> Iterator[list[bytes]]:
    rng = random.Random(seed)
    for _ in range(count):
        pieces, i = [], 0
        while i < len(data):
            size = rng.choice([1, 2, 3, 7, 16, 50, 200, 1000])
            pieces.append(data[i : i + size])
            i += size
        yield pieces


@pytest.fixture(params=[True, False], ids=["compact-json", "spaced-json"])
def stream(request: pytest.FixtureRequest) -> tuple[bytes, bytes, int]:
    return sse_stream(compact=request.param)


def _check_tap(tap: StreamTap, choice_events: int) -> None:
    assert tap.model == MODEL
    assert tap.usage == USAGE
    assert tap.error is None
    assert len(WORDS) <= tap.chunks <= choice_events


def test_stream_fixture_has_usage_null_on_every_chunk_and_one_usage_event() -> None:
    data, usage_event, _ = sse_stream()
    assert data.count(b'"usage":null') == len(WORDS) + 2
    assert data.count(usage_event) == 1
    assert data.endswith(b"data: [DONE]\n\n")


def test_whole_stream_in_one_piece_passes_unchanged_with_usage(
    stream: tuple[bytes, bytes, int],
) -> None:
    data, _, choice_events = stream
    tap = StreamTap(forward_usage=True)
    assert relay(tap, [data]) == data
    _check_tap(tap, choice_events)


def test_every_two_way_split_passes_the_stream_unchanged_when_forwarding_usage(
    stream: tuple[bytes, bytes, int],
) -> None:
    data, _, choice_events = stream
    for pieces in two_way_splits(data):
        tap = StreamTap(forward_usage=True)
        assert relay(tap, pieces) == data, f"split at {len(pieces[0])}"
        _check_tap(tap, choice_events)


def test_every_two_way_split_drops_exactly_the_usage_event_when_not_forwarding(
    stream: tuple[bytes, bytes, int],
) -> None:
    data, usage_event, choice_events = stream
    expected = data.replace(usage_event, b"")
    for pieces in two_way_splits(data):
        tap = StreamTap(forward_usage=False)
        assert relay(tap, pieces) == expected, f"split at {len(pieces[0])}"
        _check_tap(tap, choice_events)


def test_byte_by_byte_feeding_gives_the_same_output(stream: tuple[bytes, bytes, int]) -> None:
    data, usage_event, choice_events = stream
    pieces = [data[i : i + 1] for i in range(len(data))]
    for forward_usage, expected in ((True, data), (False, data.replace(usage_event, b""))):
        tap = StreamTap(forward_usage=forward_usage)
        assert relay(tap, pieces) == expected
        _check_tap(tap, choice_events)


@pytest.mark.parametrize("forward_usage", [True, False])
def test_random_chunkings_give_the_same_output(
    stream: tuple[bytes, bytes, int], forward_usage: bool
) -> None:
    data, usage_event, choice_events = stream
    expected = data if forward_usage else data.replace(usage_event, b"")
    for pieces in random_chunkings(data, count=300, seed=1234):
        tap = StreamTap(forward_usage=forward_usage)
        assert relay(tap, pieces) == expected
        _check_tap(tap, choice_events)


def test_output_is_only_whole_events() -> None:
    data, _, _ = sse_stream()
    tap = StreamTap(forward_usage=True)
    for pieces in random_chunkings(data, count=50, seed=7):
        tap = StreamTap(forward_usage=True)
        for piece in pieces:
            out = tap.feed(piece)
            assert out == b"" or out.endswith(b"\n\n")


def test_partial_event_is_held_back_until_complete() -> None:
    data, _, _ = sse_stream()
    first_end = data.index(b"\n\n") + 2
    tap = StreamTap(forward_usage=True)
    assert tap.feed(data[: first_end - 1]) == b""
    assert tap.model == ""
    assert tap.feed(data[first_end - 1 : first_end]) == data[:first_end]
    assert tap.model == MODEL


def test_model_is_learned_from_the_first_chunk() -> None:
    data, _, _ = sse_stream()
    first_end = data.index(b"\n\n") + 2
    tap = StreamTap(forward_usage=False)
    tap.feed(data[:first_end])
    assert tap.model == MODEL
    assert tap.usage is None
    later = _event(
        dict(_chunk([{"index": 0, "delta": {"content": "x"}}]), model="other"), compact=True
    )
    tap.feed(later)
    assert tap.model == MODEL  # the first one sticks


def test_usage_is_none_when_upstream_sends_no_usage_chunk() -> None:
    data, usage_event, _ = sse_stream()
    data = data.replace(usage_event, b"")
    for forward_usage in (True, False):
        tap = StreamTap(forward_usage=forward_usage)
        assert relay(tap, [data]) == data
        assert tap.usage is None
        assert tap.model == MODEL


def test_usage_chunk_that_also_carries_choices_is_kept() -> None:
    event = _event(_chunk([{"index": 0, "delta": {"content": "x"}}], USAGE), compact=True)
    tap = StreamTap(forward_usage=False)
    assert relay(tap, [event]) == event
    assert tap.usage == USAGE


def test_chunks_counts_content_chunks_roughly() -> None:
    n = 40
    events = b"".join(
        _event(_chunk([{"index": 0, "delta": {"content": f"t{i}"}}]), compact=True)
        for i in range(n)
    )
    for forward_usage in (True, False):
        for pieces in [[events], *random_chunkings(events, count=20, seed=3)]:
            tap = StreamTap(forward_usage=forward_usage)
            relay(tap, pieces)
            assert n - 1 <= tap.chunks <= n + 1


ERROR = {"message": "Selected model is at capacity.", "type": "server_error", "code": None}


@pytest.mark.parametrize("forward_usage", [True, False])
def test_error_event_as_first_event_sets_error_and_is_passed_on(forward_usage: bool) -> None:
    event = _event({"error": ERROR}, compact=True)
    data = event + b"data: [DONE]\n\n"
    tap = StreamTap(forward_usage=forward_usage)
    assert relay(tap, [data]) == data
    assert tap.error == ERROR
    assert tap.model == ""


def _stream_with_error_after_content() -> tuple[bytes, bytes]:
    head = b"".join(
        _event(_chunk([{"index": 0, "delta": {"content": w}}]), compact=True) for w in WORDS
    )
    return head, _event({"error": ERROR}, compact=True)


def test_error_event_mid_stream_sets_error_when_usage_is_dropped() -> None:
    head, error_event = _stream_with_error_after_content()
    tap = StreamTap(forward_usage=False)
    assert relay(tap, [head, error_event]) == head + error_event
    assert tap.error == ERROR


@pytest.mark.parametrize("split", ["each-event-alone", "content-and-error-together"])
def test_error_event_mid_stream_sets_error_when_usage_is_forwarded(split: str) -> None:
    head, error_event = _stream_with_error_after_content()
    first_end = head.index(b"\n\n") + 2
    if split == "each-event-alone":
        pieces = [head, error_event]
    else:
        pieces = [head[:first_end], head[first_end:] + error_event]
    tap = StreamTap(forward_usage=True)
    assert relay(tap, pieces) == head + error_event
    assert tap.error == ERROR


def test_error_that_is_not_an_object_is_not_taken_for_an_error() -> None:
    event = _event({"error": "just a string", "model": MODEL, "choices": []}, compact=True)
    tap = StreamTap(forward_usage=False)
    assert relay(tap, [event]) == event
    assert tap.error is None


@pytest.mark.parametrize("ending", [b"", b"\n"], ids=["no-newline", "one-newline"])
def test_flush_returns_trailing_event_missing_its_blank_line(ending: bytes) -> None:
    data, _, _ = sse_stream()
    assert data.endswith(b"data: [DONE]\n\n")
    cut = data[: -len(b"\n\n")] + ending
    tap = StreamTap(forward_usage=True)
    out = tap.feed(cut)
    assert out == data[: -len(b"data: [DONE]\n\n")]
    assert tap.flush() == b"data: [DONE]\n\n"
    assert tap.flush() == b""


def test_flush_of_trailing_usage_event_captures_usage_and_drops_it_when_not_forwarded() -> None:
    usage_event = _event(_chunk([], USAGE), compact=True)
    first = _event(_chunk([{"index": 0, "delta": {"content": "a"}}]), compact=True)
    for forward_usage, expected in ((True, usage_event), (False, b"")):
        tap = StreamTap(forward_usage=forward_usage)
        assert tap.feed(first + usage_event.rstrip(b"\n")) == first
        assert tap.flush() == expected
        assert tap.usage == USAGE


@pytest.mark.parametrize("rest", [b"", b"  "])
def test_flush_with_nothing_left_returns_nothing(rest: bytes) -> None:
    data, _, _ = sse_stream()
    tap = StreamTap(forward_usage=True)
    assert tap.feed(data + rest) == data
    assert tap.flush() == b""


@pytest.mark.parametrize("forward_usage", [True, False])
@pytest.mark.parametrize("garbage", [b"<html>upstream proxy error</html>", b"[1, 2]", b"oops"])
def test_a_malformed_event_mid_stream_becomes_an_openai_error_event(
    forward_usage: bool, garbage: bytes
) -> None:
    """An SDK parses every data line as JSON: garbage would raise a bare decode error."""
    tap = StreamTap(forward_usage=forward_usage)
    first = _event(_chunk([{"index": 0, "delta": {"content": "Hi"}}]), compact=True)
    out = tap.feed(first) + tap.feed(first) + tap.feed(b"data: " + garbage + b"\n\n")
    events = [e for e in out.split(b"\n\n") if e]
    assert events[:2] == [first.strip(), first.strip()]
    error = json.loads(events[2].removeprefix(b"data: "))["error"]
    assert (error["type"], error["code"]) == ("server_error", "malformed_stream")
    assert tap.error is not None and garbage not in out


def test_a_traced_call_learns_the_finish_reason_however_the_stream_is_cut(
    stream: tuple[bytes, bytes, int],
) -> None:
    data, _, _ = stream
    for pieces in random_chunkings(data, 20, seed=7):
        tap = StreamTap(forward_usage=True)
        tap.finish_reasons = []  # a traced call's
        assert relay(tap, pieces) == data
        assert tap.finish_reasons == ["stop"]
    untraced = StreamTap(forward_usage=True)
    relay(untraced, [data])
    assert untraced.finish_reasons is None


def test_a_finish_reason_in_a_last_event_without_its_blank_line_is_learned() -> None:
    tap = StreamTap(forward_usage=True)
    tap.finish_reasons = []
    last = _event(_chunk([{"index": 0, "delta": {}, "finish_reason": "length"}]), compact=True)
    relay(tap, [last.rstrip(b"\n")])
    assert tap.finish_reasons == ["length"]
