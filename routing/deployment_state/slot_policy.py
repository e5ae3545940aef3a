"""Who gets a deployment's next free slot (docs/routing.md, priority admission).

1. interactive before batch: batch is admitted only while no interactive request waits
   for the deployment, and only while batch holds fewer than `batch_cap` slots (the
   rest is a reserve kept for interactive traffic);
2. within a class, the member who has received the least recent weighted service goes
   first (tokens in + 2 x tokens out, as the Virtual Token Counter of "Fairness in
   Serving Large Language Models", OSDI 2024, counts them; each member's sum halves
   every rules.SERVICE_HALF_LIFE seconds), ties to the member with the fewest calls
   waiting (nobody is put behind a backlog it did not make), then to the longest wait;
3. within a member, first come, first served;
4. work conserving: while a slot is free and an eligible request waits (rule 7), it is
   granted;
5. preemption: while an interactive request waits for a full deployment, the youngest
   batch calls there that may be preempted (the batch runner's lines) are asked to give
   their slots back, one per waiting interactive request not yet covered: the holder
   cancels its upstream request and frees the slot, which goes to the interactive
   request; the line runs again later. The youngest has done the least work;
6. deadlines decide admission: a slot goes only to a call whose deadline still covers
   the deployment's recent latency (rules.need: mean + 3 deviations of the time to an
   answer's head); one that can no longer finish leaves the queue unserved (503 with
   Retry-After), and one whose wait ends before the calls fair share serves ahead of
   it would be (`expected_wait`) is refused when it arrives instead of queueing in vain;
7. headroom for the others: the last free slots (rules.headroom) go not to the loudest
   member (asking for LOUD_FACTOR times the average calls of the members active there,
   rules.loudest), and then to no batch call while its interactive call waits: a quiet
   member's call finds a slot free instead of waiting for a loud member's to end.
"""

import math
from dataclasses import dataclass

from django.conf import settings

from accounts.models import PriorityClass

INTERACTIVE, BATCH = str(PriorityClass.INTERACTIVE), str(PriorityClass.BATCH)
OUTPUT_WEIGHT = 2.0  # an output token costs the upstream about twice an input token
DEFAULT_HOLD = 1.0  # seconds a call holds a slot, until the deployment has measured it
MIN_HOLD = 0.05  # the least hold a queue's wait is reckoned with (a burst of instant errors)
RESERVE_EPSILON = 1e-9  # so float error never rounds a whole number of reserved slots up


@dataclass(frozen=True)
class Claim:
    """Who asks for a deployment's slot, and how long it may queue for one."""

    priority: str  # interactive | batch
    member: str
    estimate: float  # weighted tokens the call will probably cost
    wait: float  # seconds it may queue at each full deployment; 0: never queues
    preemptible: bool = False  # batch only: may be asked to give its slot back (rule 5)


ANYONE = Claim(INTERACTIVE, member="", estimate=0.0, wait=0.0)  # no class, no member


@dataclass
class Waiter:
    slot: str
    priority: str  # interactive | batch
    member: str
    since: float  # epoch seconds it started waiting here
    until: float  # epoch seconds it gives up
    estimate: float  # weighted tokens charged when granted
    retry: bool = False  # a second attempt at this deployment (counts to its retry budget)
    preemptible: bool = False
    deadline: float = math.inf  # epoch seconds the call's answer is due by


def claim_for(*, priority: str, member: str, raw_size: int, preemptible: bool = False) -> Claim:
    """The call's claim on slots; with priority admission off, every call is alike and
    none queues (first come, first served). Only a batch call may be preemptible."""
    if not settings.SLUICE_PRIORITY_ADMISSION:
        return Claim(INTERACTIVE, member, 0.0, 0.0)
    wait = settings.SLUICE_WAIT_BATCH if priority == BATCH else settings.SLUICE_WAIT_INTERACTIVE
    estimate = estimated_weighted_tokens(raw_size)
    return Claim(priority, member, estimate, wait, preemptible and priority == BATCH)


def batch_cap(allowed: int, reserve: float) -> int:
    """Slots batch may hold: all but `reserve` (a share, rounded up) of them, and always at
    least one, so a deployment of capacity 1 still serves batch when nobody else asks."""
    kept = min(allowed - 1, math.ceil(allowed * reserve - RESERVE_EPSILON)) if allowed > 0 else 0
    return max(0, allowed - max(0, kept))


def weighted_tokens(tokens_in: int, tokens_out: int) -> float:
    """A call's service in the Virtual Token Counter's sense: what fair sharing counts."""
    return tokens_in + OUTPUT_WEIGHT * tokens_out


def estimated_weighted_tokens(raw_size: int) -> float:
    """Charged when a call is granted a slot: its prompt (about 4 bytes a token). The
    answer is charged when it is known; a guess at it here would inflate the counters of
    members with calls in flight, and with them the level newcomers are lifted to."""
    return float(raw_size // 4 + 1)


def expected_wait(ahead: int, allowed: int, hold: float) -> float:
    """Seconds until a request behind `ahead` others would probably get a slot: the queue
    drains `allowed` calls every `hold` seconds."""
    return (ahead + 1) / max(1, allowed) * max(hold, MIN_HOLD)


def queue_retry_after(ahead: int, allowed: int, hold: float) -> int:
    """`expected_wait` in whole seconds, at least one: a Retry-After."""
    return max(1, math.ceil(expected_wait(ahead, allowed, hold)))
