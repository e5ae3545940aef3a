"""Fast JSON reads exactly what json reads: the same value (of the same types), or the same
refusal, also for the texts orjson reads differently or not at all; and writes what json
reads back as the value written."""

import json

import pytest

from core.fast_json import dumps, loads

TEXTS = [
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7}',
    b'{"a": 1e400}',  # infinity for json
    b'{"a": NaN, "b": -Infinity}',
    b'{"seed": 123456789012345678901234567890}',  # past 64 bits: json keeps the integer
    b'{"seed": -9223372036854775809}',
    b"[18446744073709551616]",  # 2**64, at the end of the text
    b'{"n": 9999999999999999999, "m": 999999999999999999}',  # 19 digits, then 18
    b'{"a": "\\ud800 lone"}',
    b"\xef\xbb\xbf{}",  # a byte order mark
    b'{"a": 1, "a": 2}',
    b'{"a": -0.0, "b": 1E5, "c": 1e-400, "d": 0.1}',
    b'{"caf\xc3\xa9": "\\u00e9\\u0000"}',
    b"[" * 1100 + b"]" * 1100,  # deeper than orjson goes
    b"not json",
    b'{"a": 1',
    b"\xff\xfe",
]


def _read(reader, text):
    try:
        value = reader(text)
    except (ValueError, RecursionError) as exc:
        return "refused", type(exc).__name__
    return "read", repr(value)  # repr: 1 and 1.0 differ, as do NaN's placements


@pytest.mark.parametrize("text", TEXTS)
def test_reads_what_json_reads(text):
    assert _read(loads, text) == _read(json.loads, text)


VALUES = [
    {"model": "m", "messages": [{"role": "user", "content": "caf\u00e9 \u6f22"}], "n": 1},
    {"seed": 2**70, "t": 0.1, "big": 1e300, "neg": -(2**63)},
    {"text": "lone \ud800 half", "nul": "\x00"},
    [True, False, None, -0.0, 1e-7],
]


@pytest.mark.parametrize("value", VALUES)
def test_writes_what_json_reads_back_as_the_value(value):
    assert repr(json.loads(dumps(value))) == repr(value)
