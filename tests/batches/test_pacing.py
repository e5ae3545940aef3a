"""Spare slots for batch lines (batches/pacing.py)."""

from types import SimpleNamespace

import pytest

from batches import pacing
from batches.pacing import deployment_spare
from routing.catalog.specs import RouteSpec
from routing.deployment_state import Limits, Snapshot


def _snap(limit=8, in_flight=0, batch=0, wait_i=0, wait_b=0, mode="closed") -> Snapshot:
    return Snapshot(mode, limit, in_flight, 0, 0.0, "", batch, wait_i, wait_b)


@pytest.mark.parametrize(
    ("snapshot", "reserve", "spare"),
    [
        (_snap(), 0.2, 6),  # 8 slots, 2 kept for interactive calls
        (_snap(in_flight=4, batch=0), 0.2, 2),  # 4 interactive in flight
        (_snap(in_flight=6, batch=6), 0.2, 0),  # batch holds all it may
        (_snap(in_flight=3, batch=3, wait_b=2), 0.2, 1),  # others' lines already queued
        (_snap(in_flight=1, wait_i=1), 0.2, 0),  # an interactive call waits: back off
        (_snap(mode="open"), 0.2, 0),  # breaker open
        (_snap(limit=5.6), 0.2, 4),  # the adaptive limit was cut
        (_snap(), 0.0, 8),
        (_snap(limit=1), 0.2, 1),  # batch always keeps one slot
        (_snap(in_flight=9), 0.2, 0),
    ],
)
def test_spare_is_what_batch_may_hold_minus_everything_in_flight(snapshot, reserve, spare):
    assert deployment_spare(snapshot, reserve) == spare


class _State:
    def __init__(self, snapshots: dict[str, Snapshot]) -> None:
        self.snapshots = snapshots

    async def snapshot(self, name, limits):
        return self.snapshots[name]


def _route(*names: str) -> RouteSpec:
    limits = Limits(max_concurrency=8, reserve=0.2)
    chain = tuple(SimpleNamespace(name=n, limits=limits) for n in names)
    return RouteSpec(name="r", chain=chain, policy=None)  # type: ignore[arg-type]


async def test_a_routes_room_counts_every_call_holding_or_waiting_for_its_slots(monkeypatch):
    state = _State(
        {
            "a": _snap(in_flight=3, batch=3, wait_b=1),  # 6 batch at most: 2 spare
            "b": _snap(in_flight=7, wait_i=2),  # interactive waits: none spare
        }
    )
    monkeypatch.setattr(pacing, "deployment_state", lambda: state)
    assert await pacing.route_room(_route("a", "b")) == pacing.Room(spare=2, taken=13)


@pytest.mark.parametrize(
    ("taken", "own", "others"),
    [
        (6, 6, False),  # the runner's own lines fill it: their ends wake the runner
        (6, 7, False),  # one of its lines has not asked for its slot yet
        (7, 6, True),  # an interactive call (or another runner's line) holds one
        (0, 0, False),  # nobody: the breaker, say; the next tick looks again
    ],
)
def test_only_room_others_free_is_polled_for(taken, own, others):
    assert pacing.others_hold(pacing.Room(spare=0, taken=taken), own) is others
