"""A worker's full garbage collections run on a clock, not on Python's own schedule: none
while objects pile up, the cycles found when the clock comes, and both on /metrics."""

import asyncio
import gc
from collections.abc import Iterator

import pytest

from core import gc_schedule
from routing.observability.loop_lag import worker_label
from routing.observability.metrics import metrics_text


@pytest.fixture
def collections_seen() -> Iterator[list[int]]:
    """The generation of every collection that starts while the test runs."""
    seen: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(note)
    yield seen
    gc.callbacks.remove(note)
    gc_schedule.hand_back()
    gc.unfreeze()


def _pile_up(objects: int) -> list[list[int]]:
    """Objects that live on (as held streams do), enough to cross Python's own trigger for
    a full collection (the oldest generation grown by a quarter) many times over."""
    return [[n] for n in range(objects)]


def test_objects_piling_up_cause_no_full_collection(collections_seen: list[int]) -> None:
    gc_schedule.settle_collector(full_every=300)
    collections_seen.clear()
    held = _pile_up(300_000)
    assert 1 in collections_seen  # the young generations are still collected
    assert 2 not in collections_seen
    del held


def test_long_middle_pauses_make_the_middle_generation_collected_in_smaller_steps(
    collections_seen: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc_schedule, "MIDDLE_PAUSE", 0.0)  # every pause is too long
    gc_schedule.settle_collector(full_every=300)
    collections_seen.clear()
    held = _pile_up(600_000)
    assert gc.get_threshold()[1] == 1
    # Soon one collection in three is of the middle generation (Python's: one in eleven),
    # each holding what survived two young collections, not ten.
    assert collections_seen.count(1) >= len(collections_seen) // 4
    del held


def test_short_middle_pauses_keep_pythons_schedule(
    collections_seen: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc_schedule, "MIDDLE_PAUSE", 60.0)  # every pause is short
    gc_schedule.settle_collector(full_every=300)
    young, _, old = gc.get_threshold()
    gc.set_threshold(young, 5, old)  # as lowered by long pauses before
    held = _pile_up(600_000)
    assert gc.get_threshold()[1] == gc_schedule._python_thresholds[1]
    del held


def test_objects_made_and_freed_as_calls_end_cause_no_collection(
    collections_seen: list[int],
) -> None:
    # A worker's calls in flight: thousands of objects made, then freed as each call ends.
    gc_schedule.settle_collector(full_every=300)
    collections_seen.clear()
    for _ in range(100):
        in_flight = _pile_up(5_000)
        del in_flight
    assert collections_seen == []


def test_python_schedules_full_collections_without_it(collections_seen: list[int]) -> None:
    gc_schedule.settle_collector(full_every=0)
    collections_seen.clear()
    held = _pile_up(300_000)
    assert 2 in collections_seen
    del held


def test_handing_back_restores_pythons_thresholds(collections_seen: list[int]) -> None:
    before = gc.get_threshold()
    gc_schedule.settle_collector(full_every=300)
    assert gc.get_threshold()[2] > 10**9
    gc_schedule.hand_back()
    assert gc.get_threshold() == before
    assert gc_schedule._pacer not in gc.callbacks


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


async def test_the_clock_collects_cycles_and_counts_them(
    monkeypatch: pytest.MonkeyPatch, collections_seen: list[int]
) -> None:
    monkeypatch.setattr(gc_schedule, "full_collections", gc_schedule.FullCollections())
    gc_schedule.settle_collector(full_every=0.05)
    for _ in range(100):
        _Node()
    clock = asyncio.create_task(gc_schedule.collect_on_a_clock(every=0.05))
    await asyncio.sleep(0.2)
    clock.cancel()
    figures = gc_schedule.full_collections
    assert figures.count >= 2
    assert figures.found >= 100  # each _Node and its __dict__
    assert 0 < figures.longest <= figures.seconds


@pytest.mark.django_db
async def test_metrics_export_the_full_collections(monkeypatch: pytest.MonkeyPatch) -> None:
    figures = gc_schedule.FullCollections(count=3, seconds=0.05, longest=0.03, found=42)
    monkeypatch.setattr("routing.observability.metrics.full_collections", figures)
    text = (await metrics_text()).decode()
    worker = worker_label()
    assert f'sluice_gc_full_pause_max_seconds{{worker="{worker}"}} 0.03' in text
    assert f'sluice_gc_full_collected_objects_total{{worker="{worker}"}} 42.0' in text
