"""What every worker must agree on about a deployment: its circuit breaker, its adaptive
concurrency limit, the requests in flight to it (leases) and its retry budget.

One interface (`interface.py`), two backends: `local.LocalDeploymentState` keeps it in this
process (the embedded default, one worker); `redis.RedisDeploymentState` keeps it in Redis
with atomic Lua scripts (the `.lua` files here), shared by every worker and host; `factory`
picks one by REDIS_URL. The arithmetic of the rules is written once in `rules.py`, whose
constants the Lua receives from one table; the same test suites run against both backends.

The rules (docs/admission.md tells them for users):
- adaptive limit: starts at max concurrency; a capacity error (or upstream rate limit) cuts
  it to 70 % (rounded, by at least one, never below the floor, 1), at most once per round
  trip as TCP does: only a call sent after the last cut can cut again; the errors of calls
  that were already in flight belong to the same congestion. A limit's worth of successes
  raises it by 1, up to max concurrency; an error that meets such a raise steps back to
  where it began instead (rules.after_capacity_error).
- own concurrency is not a breaker signal: a capacity error while the limit is above its
  floor, or of a call sent before the last cut, is "congested" (`release` says so: the call
  queues again for a slot at the lower limit) and leaves the breaker alone.
- breaker: `threshold` consecutive failures (no success between) open it, counting server
  errors, resets and the upstream's own timeouts, an attempt cut by the call's deadline
  only if it hung (rules.cut_was_a_hang), and capacity errors only once the limit is at its
  floor (the deployment fails even at the concurrency of one script). Each call counts
  once per deployment (`repeat`: its retries there do not count again), so no single call
  opens it. It stays open 10 s at first, twice as long after each failed probe, up to
  `cooldown` (rules.open_time). Then it half-opens and lets 1 + (successes so far) probes
  in flight; `close_after` successes close it, one failure re-opens it. A misconfigured
  deployment (auth/config error) opens at once. A threshold of 0 switches it off.
- deadlines: a slot goes only to a call whose deadline covers the deployment's latency
  (rules.need, learnt from `took` at each success); see routing/deployment_state/slot_policy.py rule
  6.
- leases: a request holds a slot for `lease` seconds, renewed while it runs, so slots held
  by a worker that died come free on their own.
- retry budget: retries may be at most `ratio` times the first attempts over the last minute
  (plus a small floor so a quiet deployment can still retry at all).
- queue: a request that finds no slot may wait for one; who gets a slot that frees up is
  routing/deployment_state/slot_policy.py's rule (interactive first, a reserve kept from batch,
  members served fairly). A grant takes the slot on the waiter's behalf before it wakes.
"""

from routing.deployment_state.factory import (
    deployment_state,
    listen_for_changes,
    state_from_settings,
)
from routing.deployment_state.interface import (
    Admission,
    Departure,
    DeploymentState,
    Limits,
    Refusal,
    Result,
    Snapshot,
    granted_within,
)
from routing.deployment_state.local import LocalDeploymentState
from routing.deployment_state.rules import BUDGET_BUCKET, BUDGET_BUCKETS, CUT, FLOOR

__all__ = [
    "BUDGET_BUCKET",
    "BUDGET_BUCKETS",
    "CUT",
    "FLOOR",
    "Admission",
    "Departure",
    "DeploymentState",
    "Limits",
    "LocalDeploymentState",
    "Refusal",
    "Result",
    "Snapshot",
    "deployment_state",
    "granted_within",
    "listen_for_changes",
    "state_from_settings",
]
