"""Checking a batch file line by line (batches/validation.py)."""

import json

import pytest

from batches.validation import check_lines, read_lines


def _line(custom_id: str = "a", **over: object) -> bytes:
    item = {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "fast", "messages": [{"role": "user", "content": "hi"}]},
    }
    item.update(over)
    return json.dumps(item).encode() + b"\n"


def _check(*lines: bytes, max_lines: int = 100):
    return check_lines(
        read_lines(lines),
        endpoint="/v1/chat/completions",
        routes={"fast", "smart", "secret"},
        allowed={"fast", "smart"},
        max_lines=max_lines,
    )


def test_a_good_file_gives_each_line_its_place_in_the_file() -> None:
    first, second = (
        _line("a"),
        _line("b", body={"model": "smart", "prompt": "x", "messages": [{"role": "user"}]}),
    )
    specs, errors = _check(first, b"\n", second)
    assert errors == []
    assert [(s.number, s.custom_id, s.model) for s in specs] == [
        (1, "a", "fast"),
        (3, "b", "smart"),
    ]
    assert specs[1].offset == len(first) + 1 and specs[1].length == len(second)


@pytest.mark.parametrize(
    ("line", "code", "param"),
    [
        (b"{oops\n", "invalid_json_line", None),
        (b"[1, 2]\n", "invalid_json_line", None),
        (_line(""), "missing_custom_id", "custom_id"),
        (_line("x", method="GET"), "invalid_method", "method"),
        (_line("x", url="/v1/embeddings"), "mismatched_endpoint", "url"),
        (_line("x", body="text"), "invalid_request", "body"),
        (_line("x", body={"model": "fast"}), "invalid_request", "messages"),
        (
            _line("x", body={"model": "fast", "stream": True, "messages": [{"role": "user"}]}),
            "invalid_request",
            "stream",
        ),
        (
            _line("x", body={"model": "nope", "messages": [{"role": "user"}]}),
            "model_not_found",
            "model",
        ),
        (
            _line("x", body={"model": "secret", "messages": [{"role": "user"}]}),
            "model_not_allowed",
            "model",
        ),
    ],
)
def test_a_bad_line_is_named_with_its_number(line: bytes, code: str, param: str | None) -> None:
    specs, errors = _check(_line("a"), line)
    assert [s.number for s in specs] == [1]
    assert [(e.line, e.code, e.param) for e in errors] == [(2, code, param)]
    assert errors[0].message.startswith("Line 2")


def test_duplicate_custom_ids_and_limits() -> None:
    _, errors = _check(_line("a"), _line("a"))
    assert [(e.line, e.code) for e in errors] == [(2, "duplicate_custom_id")]
    _, errors = _check(_line("a"), _line("b"), _line("c"), max_lines=2)
    assert [e.code for e in errors] == ["too_many_lines"]
    _, errors = _check(b"\n")
    assert [e.code for e in errors] == ["empty_file"]


_DEEP = b"[" * 100_000 + b"]" * 100_000
_HUGE = b"9" * 5_000


@pytest.mark.parametrize(
    "poison",
    [
        b'{"custom_id": "p", "body": ' + _DEEP + b"}\n",  # the line itself nested too deep
        _DEEP + b"\n",
        b'{"custom_id": "p", "n": ' + _HUGE + b"}\n",  # an integer Python will not read
        b'{"custom_id": "p", "method": "POST", "url": "/v1/chat/completions", "body": '
        b'{"model": "fast", "messages": [{"role": "user"}], "seed": ' + _HUGE + b"}}\n",
        b'{"custom_id": "p", "method": "POST", "url": "/v1/chat/completions", "body": '
        b'{"model": "fast", "messages": [{"role": "user"}], "temperature": NaN}}\n',
    ],
    ids=["nested-line", "nested-array", "huge-int", "huge-int-in-body", "nan-in-body"],
)
def test_a_poison_line_fails_its_own_line_and_the_rest_is_still_checked(poison: bytes) -> None:
    specs, errors = _check(_line("a"), poison, _line("b"), _line("b"))
    assert [s.number for s in specs] == [1, 3]
    assert [(e.line, e.code) for e in errors] == [
        (2, "invalid_json_line"),
        (4, "duplicate_custom_id"),
    ]
    assert errors[0].message.startswith("Line 2")
    assert len(errors[0].message) < 300  # says what is wrong, without echoing the line
