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

from routing.catalog.specs import RouteSpec
from routing.deployment_state import Snapshot, deployment_state
from routing.deployment_state.slot_policy import batch_cap


def deployment_spare(snapshot: Snapshot, reserve: float) -> int:
    if snapshot.mode == "open" or snapshot.waiting_interactive:
        return 0
    allowed = math.floor(snapshot.limit)
    return max(0, batch_cap(allowed, reserve) - snapshot.in_flight - snapshot.waiting_batch)


async def route_spare(route: RouteSpec) -> int:
    state = deployment_state()
    spare = 0
    for deployment in route.chain:
        snapshot = await state.snapshot(deployment.name, deployment.limits)
        spare += deployment_spare(snapshot, deployment.limits.reserve)
    return spare
