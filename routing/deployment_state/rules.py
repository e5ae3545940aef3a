"""The deployment rules that are plain arithmetic, written once. The local backend calls
these functions; the Redis backend's Lua (the `.lua` files here) does the same sums with
the constants of `LUA_CONSTANTS`, which the script loader puts at the top of every script,
so a number changed here changes in both (tests/routing/test_lua_constants.py checks that
the Lua spells no number of its own)."""

import math

from routing.deployment_state.slot_policy import DEFAULT_HOLD, MIN_HOLD, RESERVE_EPSILON

FLOOR = 1.0  # the adaptive limit never goes below this
CUT = 0.7  # a capacity error's multiplicative cut
BUDGET_BUCKET = 10.0  # seconds
BUDGET_BUCKETS = 6  # one minute
HOLD_WEIGHT = 0.2  # weight of the latest call in the moving average of the hold time
STATE_TTL = 86_400  # an idle deployment's state is forgotten after a day (Redis)
KEEP_EVERY = 5.0  # seconds: how often a deployment's keys are given STATE_TTL again (Redis)
WAITER_SILENCE = 5.0  # seconds without its worker's sweep after which a waiter is passed over
LATENCY_WEIGHT = 0.125  # weights of the latest answer in the latency estimate (as TCP's RTT)
DEVIATION_WEIGHT = 0.25
NEED_DEVIATIONS = 3.0  # a call needs mean + 3 deviations of its deadline left to be sent
HANG_FACTOR = 3.0  # an attempt cut by the call's deadline after this many times `need` hung
FIRST_OPEN = 10.0  # seconds a breaker first stays open; doubled per failed probe, to the cap
SERVICE_HALF_LIFE = 2.0  # seconds: fair share weighs a member's service by how recent it is
FAIR_HEADROOM = 3  # the last free slots the loudest member may not take (loudest)
HEADROOM_SHARE = 0.375  # and at most this share of the limit
HEADROOM_FROM = 4  # slots: a smaller deployment keeps none (the loud member would starve)
LOUD_FACTOR = 1.5  # times the average recent demand that makes a member the loud one
ACTIVE_WITHIN = 4.0  # seconds: a member that asked this recently counts as active
DOUBLINGS = 30  # past this many the doubling stops (the cap has long won): no float overflow

# Every constant the Lua scripts use, by the name they use it under.
LUA_CONSTANTS: dict[str, float | int] = {
    "FLOOR": FLOOR,
    "CUT": CUT,
    "BUDGET_WIDTH": BUDGET_BUCKET,
    "BUDGET_BUCKETS": BUDGET_BUCKETS,
    "HOLD_WEIGHT": HOLD_WEIGHT,
    "DEFAULT_HOLD": DEFAULT_HOLD,
    "MIN_HOLD": MIN_HOLD,
    "STATE_TTL": STATE_TTL,
    "KEEP_EVERY": KEEP_EVERY,
    "SILENCE": WAITER_SILENCE,
    "RESERVE_EPSILON": RESERVE_EPSILON,
    "LATENCY_WEIGHT": LATENCY_WEIGHT,
    "DEVIATION_WEIGHT": DEVIATION_WEIGHT,
    "NEED_DEVIATIONS": NEED_DEVIATIONS,
    "HANG_FACTOR": HANG_FACTOR,
    "FIRST_OPEN": FIRST_OPEN,
    "DOUBLINGS": DOUBLINGS,
    "SERVICE_HALF_LIFE": SERVICE_HALF_LIFE,
    "FAIR_HEADROOM": FAIR_HEADROOM,
    "LOUD_FACTOR": LOUD_FACTOR,
    "HEADROOM_SHARE": HEADROOM_SHARE,
    "HEADROOM_FROM": HEADROOM_FROM,
    "ACTIVE_WITHIN": ACTIVE_WITHIN,
}


def cut(limit: float) -> float:
    """The limit after a capacity error: 70 %, rounded, by at least one, never below 1."""
    return max(FLOOR, min(limit - 1, math.floor(limit * CUT + 0.5)))


def after_capacity_error(limit: float, raised_from: float) -> float:
    """The limit after a capacity error: back to the level it was last raised from when the
    error met that raise (the probe above what worked found the provider's edge), else
    `cut`. Stepping back one keeps a deployment sized too large at its provider's capacity
    where a cut to 70 % every probe would idle a sixth of it; a second error at the level
    stepped back to cuts (the provider really has less)."""
    return raised_from if 0 < raised_from < limit else cut(limit)


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


def next_latency(mean: float, deviation: float, took: float) -> tuple[float, float]:
    """The latency estimate after an answer that took `took` seconds to its head (the
    whole answer, or a stream's first event): moving averages of the time and of its
    deviation, as TCP estimates a round trip. The first answer sets the mean."""
    took = max(0.0, took)
    if mean <= 0:
        return took, took / 2
    deviation = (1 - DEVIATION_WEIGHT) * deviation + DEVIATION_WEIGHT * abs(took - mean)
    return (1 - LATENCY_WEIGHT) * mean + LATENCY_WEIGHT * took, deviation


def need(mean: float, deviation: float) -> float:
    """Seconds of deadline a call needs left to be sent: the deployment's recent latency
    and some of its spread (0 until it has answered once: then every call is sent)."""
    return mean + NEED_DEVIATIONS * deviation if mean > 0 else 0.0


def cut_was_a_hang(took: float, needed: float) -> bool:
    """An attempt cut by the call's own deadline counts against the deployment only when
    it had several times the deployment's usual latency and still had no answer: the
    provider hung. With less, the deadline (Sluice's, or the client's) was too short."""
    return needed > 0 and took >= HANG_FACTOR * needed


def open_time(cap: float, opens: int) -> float:
    """How long the breaker stays open after `opens` consecutive openings without closing
    in between: short at first, doubling per failed probe, up to `cap` (the configured
    cooldown), so a deployment that comes back serves again within seconds."""
    doubling: int = 2 ** min(opens, DOUBLINGS)  # int ** int is Any to mypy (it may be a float)
    return min(cap, FIRST_OPEN * doubling)


def recent(value: float, at: float, now: float) -> float:
    """A member's recent service, or demand: what it was at `at`, halved every
    SERVICE_HALF_LIFE seconds since. Fair share serves the least recently served member
    first, so a quiet member's call is not put behind a loud member's, and a member back
    from a long idle spell has banked no more than a few seconds' worth of credit."""
    return value * 2 ** (-max(0.0, now - at) / SERVICE_HALF_LIFE)


def headroom(allowed: int) -> int:
    """Free slots kept from the loudest member: FAIR_HEADROOM, at most HEADROOM_SHARE of
    the limit, none below HEADROOM_FROM slots (the loud member would get next to nothing).
    Three of eight: with two, a burst of three quiet calls between two slots coming free
    waits for a loud member's call (bench/fairness_sim.py: quiet p99 +6 to +25 % beside a
    loud member with two, +6 to +16 % with three, about 0 with four at the price of a
    quarter of what the loud member is served with three)."""
    if allowed < HEADROOM_FROM:
        return 0
    return min(FAIR_HEADROOM, int(allowed * HEADROOM_SHARE))


def loudest(demand: dict[str, float], allowed: int, hold: float) -> str | None:
    """The member kept off the last `headroom` free slots: of the members active at the
    deployment (their recent demand: the calls they asked it for a slot), the one asking
    most, when that is LOUD_FACTOR times the average or more and asks for more than its
    fair share of the slots (the calls it asks for a second, `hold` seconds each, against
    `allowed` shared by the active members). Calls, since each holds a slot whatever its
    size; demand, not service: a loud member kept off the last slots is served less, and
    judged by its service it would soon look quiet again and take them back. Members
    asking alike, or within their share, keep none; a member alone takes every slot."""
    if len(demand) < 2:
        return None
    member = max(demand, key=lambda m: demand[m])
    average = sum(demand.values()) / len(demand)
    # A steady rate r summed with a half-life h comes to r * h / ln 2.
    slots = demand[member] * math.log(2) / SERVICE_HALF_LIFE * hold
    loud = demand[member] >= LOUD_FACTOR * average and slots > allowed / len(demand)
    return member if loud else None
