"""The one Redis-down policy every Redis backend uses: open or closed, logged at most every
10 seconds while it lasts, and once when Redis is back."""

import logging

import pytest

import core.redis_down as redis_down
from core.redis_down import RedisDown, RedisDownPolicy

log = logging.getLogger("sluice.test")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(redis_down.time, "monotonic", clock)
    return clock


def unreachable_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "Redis unreachable" in r.getMessage()]


def test_open_goes_on_and_logs_at_most_every_ten_seconds(caplog, clock):
    policy = RedisDownPolicy(log, open_means="counting per worker")
    for step in range(25):  # 25 failures over 12 seconds
        clock.now += 0.5 if step else 0
        policy.failed(ConnectionError("refused"))
    lines = unreachable_lines(caplog)
    assert lines == ["Redis unreachable (refused): counting per worker until it is back"] * 2
    assert policy.down


def test_back_again_is_said_once_and_the_next_outage_is_logged_at_once(caplog, clock):
    policy = RedisDownPolicy(log, open_means="counting per worker")
    policy.failed(ConnectionError("refused"))
    policy.recovered()
    policy.recovered()
    assert not policy.down
    assert [r.getMessage() for r in caplog.records].count(
        "Redis reachable again: no longer counting per worker"
    ) == 1
    clock.now += 1  # well within 10 s of the last line
    policy.failed(ConnectionError("refused"))
    assert len(unreachable_lines(caplog)) == 2


class StoreDown(RedisDown):
    pass


def test_closed_raises_the_backends_error_and_says_it_refuses(caplog, clock):
    policy = RedisDownPolicy(
        log, open_means="counting per worker", fail_open=lambda: False, error=StoreDown
    )
    with pytest.raises(StoreDown):
        policy.failed(ConnectionError("refused"))
    assert unreachable_lines(caplog) == [
        "Redis unreachable (refused): refusing calls until it is back"
    ]


def test_closed_never_refuses_a_read_for_a_page(clock):
    policy = RedisDownPolicy(log, open_means="counting per worker", fail_open=lambda: False)
    policy.failed(ConnectionError("refused"), refuse=False)
    assert policy.down
