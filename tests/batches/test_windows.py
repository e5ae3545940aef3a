"""Batch windows: parsing, midnight, time zones (accounts/windows.py)."""

from datetime import UTC, datetime

import pytest

from accounts.windows import effective_windows, normalize_windows, parse_windows, window_open


def _at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, 30, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize(
    ("windows", "hour", "minute", "open_"),
    [
        ("", 12, 0, True),
        ("any", 3, 0, True),
        ("00:00-06:00", 0, 0, True),
        ("00:00-06:00", 5, 59, True),
        ("00:00-06:00", 6, 0, False),
        ("00:00-06:00", 23, 59, False),
        ("22:00-06:00", 23, 0, True),  # across midnight
        ("22:00-06:00", 3, 0, True),
        ("22:00-06:00", 12, 0, False),
        ("01:00-02:00, 13:00-14:30", 14, 15, True),
        ("01:00-02:00, 13:00-14:30", 14, 30, False),
        ("18:00-24:00", 23, 59, True),
        ("18:00-24:00", 0, 0, False),
    ],
)
def test_window_open(windows: str, hour: int, minute: int, open_: bool) -> None:
    assert window_open(parse_windows(windows), "UTC", _at(hour, minute)) is open_


def test_windows_are_read_in_the_teams_time_zone() -> None:
    night = parse_windows("00:00-06:00")
    # 22:00 UTC is 07:00 in Tokyo (closed) and 17:00 in New York (closed); 16:00 UTC is
    # 01:00 in Tokyo (open).
    assert not window_open(night, "Asia/Tokyo", _at(22))
    assert window_open(night, "Asia/Tokyo", _at(16))
    assert window_open(night, "America/New_York", _at(6))  # 01:00 EST


@pytest.mark.parametrize("bad", ["0-6", "25:00-06:00", "00:00-06:60", "nightly", "00:00"])
def test_bad_windows_are_refused_with_their_text(bad: str) -> None:
    with pytest.raises(ValueError, match=bad.split(",")[0][:4]):
        parse_windows(bad)


def test_normal_form_and_inheritance() -> None:
    assert normalize_windows(["0:00-6:00", "22:00-23:30"]) == "00:00-06:00, 22:00-23:30"
    assert normalize_windows("any") == "any"
    assert normalize_windows([]) == ""
    assert effective_windows("", "00:00-06:00") == "00:00-06:00"
    assert effective_windows("any", "00:00-06:00") == "any"
