"""Spare slots for batch lines (batches/pacing.py)."""

import pytest

from batches.pacing import deployment_spare
from routing.deployment_state import Snapshot


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
