"""The deployment rules that are plain arithmetic, written once. The local backend calls
these functions; the Redis backend's Lua (the `.lua` files here) does the same sums with
the constants of `LUA_CONSTANTS`, which the script loader puts at the top of every script,
so a number changed here changes in both (tests/routing/test_lua_constants.py checks that
the Lua spells no number of its own)."""

import math

from routing.slot_policy import DEFAULT_HOLD, RESERVE_EPSILON

FLOOR = 1.0  # the adaptive limit never goes below this
CUT = 0.7  # a capacity error's multiplicative cut
BUDGET_BUCKET = 10.0  # seconds
BUDGET_BUCKETS = 6  # one minute
HOLD_WEIGHT = 0.2  # weight of the latest call in the moving average of the hold time
STATE_TTL = 86_400  # an idle deployment's state is forgotten after a day (Redis)
WAITER_SILENCE = 5.0  # seconds without its worker's sweep after which a waiter is passed over

# Every constant the Lua scripts use, by the name they use it under.
LUA_CONSTANTS: dict[str, float | int] = {
    "FLOOR": FLOOR,
    "CUT": CUT,
    "BUDGET_WIDTH": BUDGET_BUCKET,
    "BUDGET_BUCKETS": BUDGET_BUCKETS,
    "HOLD_WEIGHT": HOLD_WEIGHT,
    "DEFAULT_HOLD": DEFAULT_HOLD,
    "STATE_TTL": STATE_TTL,
    "SILENCE": WAITER_SILENCE,
    "RESERVE_EPSILON": RESERVE_EPSILON,
}


def cut(limit: float) -> float:
    """The limit after a capacity error: 70 %, rounded, by at least one, never below 1."""
    return max(FLOOR, min(limit - 1, math.floor(limit * CUT + 0.5)))


def raised(limit: float, max_concurrency: int) -> float:
    """The limit after a limit's worth of successes in a row."""
    return min(float(max_concurrency), limit + 1)


def allowed_slots(mode: str, limit: float, half_successes: int) -> int:
    """Slots the deployment may have in flight: none while open, 1 + the successes so far
    while half-open (recovering step by step), the adaptive limit otherwise."""
    if mode == "open":
        return 0
    allowed = math.floor(limit)
    return min(allowed, 1 + half_successes) if mode == "half_open" else allowed


def next_hold(hold: float, took: float) -> float:
    """The moving average of how long a successful call holds a slot (for Retry-After)."""
    return (1 - HOLD_WEIGHT) * hold + HOLD_WEIGHT * max(0.0, took)


def retry_allowed(firsts: int, retries: int, *, ratio: float, floor: int) -> bool:
    """The retry budget: retries at most `ratio` times the first attempts (over the last
    minute), plus a floor so a quiet deployment may still retry."""
    return retries < max(floor, ratio * firsts)
