"""A runner leaves the host's CPU idle as it is told: it paces the lines it starts when the
host is busier than its headroom, never below a floor, and stops pacing once the host is
idle enough again (batches/headroom.py)."""

import argparse
import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from batches.headroom import CUT, FLOOR, GROWTH, WINDOW, Headroom, host_cpu
from batches.management.commands.run_batches import _share
from batches.runner import PREFETCH, Runner

from .test_runner_wakes import _looking_runner


class Host:
    """A host whose CPU is `idle` idle from now on, on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.idle_ticks = self.total_ticks = 0
        self.idle = 1.0
        self.reads = 0

    def read(self) -> tuple[int, int]:
        self.reads += 1
        return self.idle_ticks, self.total_ticks

    def advance(self, seconds: float) -> None:
        ticks = round(seconds * 1000)
        self.now += seconds
        self.total_ticks += ticks
        self.idle_ticks += round(ticks * self.idle)


def _headroom(keep: float) -> tuple[Headroom, Host]:
    host = Host()
    return Headroom(keep, read=host.read, clock=lambda: host.now), host


def _window(headroom: Headroom, host: Host, want: int) -> int:
    """Lines started over one window of the host's CPU, asking for `want` every 10 ms."""
    started = 0
    for _ in range(round(WINDOW / 0.01)):
        host.advance(0.01)
        started += headroom.take(want)
    return started


def test_no_headroom_starts_every_line_and_never_reads_the_host():
    headroom, host = _headroom(0.0)
    assert _window(headroom, host, 50) == 50 * 20
    assert host.reads == 0 and headroom.pace is None


def test_a_host_busier_than_the_headroom_paces_the_lines_then_lets_them_go_again():
    headroom, host = _headroom(0.5)
    _window(headroom, host, 10)
    assert headroom.pace is None  # idle: as the slots allow, 1,000 lines a second
    host.idle = 0.3
    _window(headroom, host, 10)
    _window(headroom, host, 10)
    assert headroom.idle == pytest.approx(0.3, abs=0.01)
    assert headroom.pace == pytest.approx(CUT * 1000, rel=0.05)
    paced = _window(headroom, host, 10)
    assert paced < 1000 * WINDOW * CUT * 1.1  # fewer started: the pace holds
    before = headroom.pace
    _window(headroom, host, 10)
    assert headroom.pace == pytest.approx(before * CUT, rel=0.01)  # still busy: cut again

    host.idle = 0.8
    _window(headroom, host, 10)  # the look at its start sees the window before: busy
    low = headroom.pace
    _window(headroom, host, 10)
    assert headroom.pace == pytest.approx(low * GROWTH, rel=0.01)  # grows back
    for _ in range(30):
        _window(headroom, host, 10)
    assert headroom.pace is None  # well above the 1,000 a second the slots let start
    assert _window(headroom, host, 10) == 10 * 20


def test_a_host_that_stays_busy_still_runs_lines_at_the_floor():
    headroom, host = _headroom(0.5)
    host.idle = 0.0
    for _ in range(25):  # 5 s: cut and cut again, down to the floor
        _window(headroom, host, 10)
    assert headroom.pace == FLOOR
    started = sum(_window(headroom, host, 10) for _ in range(25))  # 5 s more
    assert FLOOR * 5 * 0.9 <= started <= FLOOR * 5 * 1.1


def test_a_gap_between_looks_leaves_the_pace_as_it_was():
    headroom, host = _headroom(0.5)
    host.idle = 0.2
    for _ in range(3):
        _window(headroom, host, 10)
    paced = headroom.pace
    assert paced is not None
    host.idle = 1.0
    host.advance(4.0)  # stopped: a host all idle meanwhile, and no look
    headroom.take(0)
    assert headroom.pace == paced


def test_an_unreadable_host_leaves_the_lines_unpaced():
    clock = SimpleNamespace(now=0.0)
    headroom = Headroom(0.5, read=lambda: None, clock=lambda: clock.now)
    for _ in range(10):
        clock.now += WINDOW
        assert headroom.take(7) == 7
    assert headroom.pace is None


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="Linux's /proc/stat")
def test_the_hosts_cpu_is_read_from_proc_stat():
    idle, total = host_cpu()
    assert 0 < idle <= total


def _runner_at_the_floor(monkeypatch, *, spare: int) -> tuple[Runner, Host]:
    """A runner with `spare` slots on route `m` whose host has been full for a window with
    no line started: paced at the floor."""
    runner = _looking_runner(monkeypatch, spare=spare, taken=0)
    runner.headroom, host = _headroom(0.5)
    host.idle = 0.0
    runner.headroom.take(0)
    host.advance(WINDOW)
    runner.headroom.take(0)
    assert runner.headroom.pace == FLOOR
    return runner, host


async def _cancel_lines(runner: Runner) -> None:
    for running in runner.lines.values():
        running.task.cancel()
    await asyncio.sleep(0)


async def test_a_runner_with_no_pace_left_starts_nothing_and_looks_again_soon(monkeypatch):
    runner, _ = _runner_at_the_floor(monkeypatch, spare=8)
    batch = SimpleNamespace(id="batch_a")
    started = await runner._start_lines(batch, lapsed=False)  # type: ignore[arg-type]
    assert started == 2  # the burst the floor allows at once
    assert runner._starved  # the rest: looked at again soon, as the pace refills
    assert await runner._start_lines(batch, lapsed=False) == 0  # type: ignore[arg-type]
    await _cancel_lines(runner)


async def test_a_paced_runner_claims_lines_for_its_pace_in_chunks_not_for_every_slot(
    monkeypatch,
):
    """Slots for 60 more, a pace of 20 lines a second: claims of PREFETCH lines, as the
    queue runs out, not a claim topping the queue up to the slots at every start (one per
    line or two), and no more lines held than it starts soon (other runners may run them)."""
    runner, host = _runner_at_the_floor(monkeypatch, spare=60)
    asked: list[int] = []
    claim = Runner._claim

    async def counted(self, batch, model, limit, *, lapsed):
        asked.append(limit)
        return await claim(self, batch, model, limit, lapsed=lapsed)

    monkeypatch.setattr(Runner, "_claim", counted)
    batch = SimpleNamespace(id="batch_a")
    queued, started = [], 0
    for _ in range(50):  # a second of looks, 20 ms apart
        host.advance(0.02)
        started += await runner._start_lines(batch, lapsed=False)  # type: ignore[arg-type]
        queued.append(len(runner._queued[("batch_a", "m")]))
    assert FLOOR * 0.9 <= started <= FLOOR * 1.2
    assert asked and all(limit == PREFETCH for limit in asked), asked
    assert len(asked) <= started / PREFETCH + 1
    assert max(queued) < PREFETCH
    await _cancel_lines(runner)


@pytest.mark.parametrize("text", ["-0.1", "0.95", "x", "nan"])
def test_a_headroom_out_of_range_is_a_clear_error(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"a share of the CPU from 0 to 0\.9"):
        _share(text)


def test_a_setting_out_of_range_stops_the_runner_before_it_starts(settings):
    settings.SLUICE_BATCH_CPU_HEADROOM = 3
    with pytest.raises(CommandError, match=r"SLUICE_BATCH_CPU_HEADROOM: a share of the CPU"):
        call_command("run_batches")
