"""How many more batch lines a runner may start toward a route now: the spare slots.

A deployment's spare for batch work is what batch may hold there (its effective limit minus
the reserve kept for interactive calls, routing/deployment_state/slot_policy.py `batch_cap`) minus
every call in flight there, interactive or batch, from any worker or runner (the shared snapshot),
and nothing at all while an interactive call waits for it. A route's spare is the sum over its
chain, since a line may be served by any deployment its fallback policy allows.

The reserve absorbs small interactive bursts; a bigger one does not wait for the lines in
flight: their calls are preemptible, and the deployment state asks the youngest back for a
waiting interactive call (routing/deployment_state/slot_policy.py rule 5, batches/runner.py).
"""

import math
from dataclasses import dataclass

from routing.catalog.specs import RouteSpec
from routing.deployment_state import Snapshot, deployment_state
from routing.deployment_state.slot_policy import batch_cap


def deployment_spare(snapshot: Snapshot, reserve: float) -> int:
    if snapshot.mode == "open" or snapshot.waiting_interactive:
        return 0
    allowed = math.floor(snapshot.limit)
    return max(0, batch_cap(allowed, reserve) - snapshot.in_flight - snapshot.waiting_batch)


@dataclass(frozen=True)
class Room:
    """A route's room for batch lines now, summed over its chain."""

    spare: int  # lines that may start now
    taken: int  # calls holding or waiting for a slot there: anyone's, the runner's own too


async def route_room(route: RouteSpec) -> Room:
    state = deployment_state()
    spare = taken = 0
    for deployment in route.chain:
        snapshot = await state.snapshot(deployment.name, deployment.limits)
        spare += deployment_spare(snapshot, deployment.limits.reserve)
        taken += snapshot.in_flight + snapshot.waiting_interactive + snapshot.waiting_batch
    return Room(spare, taken)


def others_hold(room: Room, own: int) -> bool:
    """Whether calls other than the runner's `own` lines on the route hold or wait for its
    slots: only then can room appear that no line of the runner's ending tells it of."""
    return room.taken > own
