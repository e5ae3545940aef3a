"""The deployment state in this process (the embedded default, one worker)."""

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from routing.deployment_state.interface import (
    Admission,
    Departure,
    Limits,
    Refusal,
    Result,
    Snapshot,
    granted_within,
)
from routing.deployment_state.rules import (
    ACTIVE_WITHIN,
    BUDGET_BUCKET,
    BUDGET_BUCKETS,
    FLOOR,
    after_capacity_error,
    allowed_slots,
    cut_was_a_hang,
    headroom,
    loudest,
    need,
    next_hold,
    next_latency,
    open_time,
    raised,
    recent,
    retry_allowed,
)
from routing.deployment_state.slot_policy import (
    ANYONE,
    BATCH,
    DEFAULT_HOLD,
    INTERACTIVE,
    Claim,
    Waiter,
    batch_cap,
    expected_wait,
    queue_retry_after,
)


@dataclass(slots=True)  # not frozen: one a call, and a frozen one costs 4x to make
class _Held:
    priority: str
    member: str
    estimate: float
    since: float
    preemptible: bool = False
    handed: bool = False  # its slot was given back by a preempted call a moment before


@dataclass
class _Deployment:
    mode: str = "closed"
    failures: int = 0
    open_until: float = 0.0
    half_successes: int = 0
    limit: float | None = None
    cut_at: float = 0.0  # when the limit was last cut
    raised_from: float = 0.0  # the limit before its last raise (0: cut since)
    streak: int = 0
    reason: str = ""
    slots: dict[str, float] = field(default_factory=dict)  # slot -> lease expiry
    budget: dict[int, list[int]] = field(default_factory=dict)  # bucket -> [firsts, retries]
    held: dict[str, _Held] = field(default_factory=dict)  # slot -> who holds it
    preempting: set[str] = field(default_factory=set)  # slots asked back, not yet released
    waiting: dict[str, Waiter] = field(default_factory=dict)  # slot -> waiter
    # priority -> member -> that member's waiters, oldest first
    queues: dict[str, dict[str, dict[str, Waiter]]] = field(
        default_factory=lambda: {INTERACTIVE: {}, BATCH: {}}
    )
    # member -> (weighted service, when it was last charged): decays (rules.recent)
    service: dict[str, tuple[float, float]] = field(default_factory=dict)
    # member -> (calls it asked a slot for here, when it last asked): decays (rules.recent)
    demand: dict[str, tuple[float, float]] = field(default_factory=dict)
    hold: float = DEFAULT_HOLD  # seconds a call holds a slot (moving average)
    latency: float = 0.0  # seconds to an answer's head (moving average; 0: none yet)
    deviation: float = 0.0  # of that latency (moving average)
    opens: int = 0  # times the breaker opened since it last closed

    def need(self) -> float:
        return need(self.latency, self.deviation)

    def recent(self, member: str, now: float) -> float:
        value, at = self.service.get(member, (0.0, now))
        return recent(value, at, now)

    def charge(self, member: str, amount: float, now: float) -> None:
        self.service[member] = (self.recent(member, now) + amount, now)

    def ask(self, member: str, now: float) -> None:
        value, at = self.demand.get(member, (0.0, now))
        self.demand[member] = (recent(value, at, now) + 1, now)


def _before(service: float, waiting: int, mine: float, mine_waiting: int) -> bool:
    """Whether a member with `service` and `waiting` calls is served before one with
    `mine` and `mine_waiting` (slot_policy rule 2)."""
    return (service, waiting) < (mine, mine_waiting)


class LocalDeploymentState:
    """In-process backend. Plain Python under the event loop: each method runs without an
    await inside, so it is atomic with respect to other requests of this worker."""

    def __init__(self, workers: Callable[[], int] = lambda: 1) -> None:
        # How many workers share each deployment's limit (the Redis backend's fallback:
        # each takes its share while Redis is away); 1 for the embedded default.
        self._workers = workers
        self._deployments: dict[str, _Deployment] = {}
        self._grants: dict[str, asyncio.Future[None]] = {}  # queued slot -> woken when granted
        self._preempts: dict[str, asyncio.Future[None]] = {}  # held slot -> resolved if asked back

    def _get(self, name: str, limits: Limits) -> _Deployment:
        d = self._deployments.get(name)
        if d is None:
            d = self._deployments[name] = _Deployment()
        ceiling = self._ceiling(limits)
        if d.limit is None or d.limit > ceiling:
            d.limit = float(ceiling)
        return d

    def _ceiling(self, limits: Limits) -> int:
        """This worker's share of the deployment's max concurrency (at least one)."""
        return max(1, limits.max_concurrency // max(1, self._workers()))

    async def acquire_slot(
        self,
        name: str,
        limits: Limits,
        slot: str,
        *,
        retry: bool,
        claim: Claim = ANYONE,
        wait_until: float | None = None,
        deadline: float | None = None,
        now: float | None = None,
    ) -> Admission:
        now = time.time() if now is None else now
        d = self._get(name, limits)
        if d.mode == "open":
            if now < d.open_until:
                return Admission(False, Refusal.BREAKER, d.open_until - now, reason=d.reason)
            d.mode, d.half_successes = "half_open", 0
        due = math.inf if deadline is None else deadline
        # Only while the deadline covers the deployment's latency: a call cut mid-way is
        # the provider's work thrown away.
        latest = due - d.need()
        if latest < now:
            return Admission(False, Refusal.DEADLINE, self._drain(d, claim.priority))
        if retry and not self._budget_allows_retry(d, limits, now):
            return Admission(False, Refusal.BUDGET)
        position = self._waiting_count(d, claim.priority)
        until = min(wait_until or now, latest)
        who = (claim.priority, claim.member)
        waiter = Waiter(slot, *who, now, until, claim.estimate, retry, claim.preemptible, due)
        d.ask(claim.member, now)
        if self._free_for(d, limits, waiter, now):
            self._grant(d, limits, waiter, now, handed=False)
            return Admission(True)
        self._join(d, waiter)
        self._dispatch(d, limits, now)
        if slot in d.slots:
            return Admission(True)
        if until > now:
            # Fair share serves at most everyone waiting first (_ahead): when even that wait
            # fits the room, the exact count (the loud member, every member's service) is
            # not needed. Not itself, in both.
            allowed = self._allowed(d)
            wait = expected_wait(self._ahead(d, claim.priority) - 1, allowed, d.hold)
            if wait > until - now:
                ahead = self._served_before(d, claim.priority, claim.member, now) - 1
                wait = expected_wait(ahead, allowed, d.hold)
            if wait <= until - now:
                self._grants[slot] = asyncio.get_running_loop().create_future()
                return Admission(
                    False, Refusal.CONCURRENCY, queued=True, position=position, until=until
                )
            # Refused at arrival: the queue would not reach it in time. Retry-After: when
            # the calls now ahead of it, beyond what it could wait, are served.
            self._remove(d, slot)
            return Admission(False, Refusal.DEADLINE, max(1, math.ceil(wait - (until - now))))
        self._remove(d, slot)
        if d.mode == "half_open":
            return Admission(False, Refusal.BREAKER, reason=d.reason)
        return Admission(False, Refusal.CONCURRENCY)

    async def wait(self, name: str, slot: str, within: float) -> bool:
        # The future stays until the wait sees it: a grant made before the wait began
        # (while the caller awaited something else) is not missed.
        if await granted_within(self._grants.get(slot), within):
            self._grants.pop(slot, None)
            return True
        return False

    async def leave(
        self, name: str, limits: Limits, slot: str, *, now: float | None = None
    ) -> Departure:
        now = time.time() if now is None else now
        self._grants.pop(slot, None)
        d = self._get(name, limits)
        waiter = self._remove(d, slot)
        if waiter is None and slot in d.slots:
            return Departure(granted=True)
        return Departure(False, self._drain(d, waiter.priority if waiter else BATCH))

    async def release(
        self,
        name: str,
        limits: Limits,
        slot: str,
        result: Result,
        *,
        service: float | None = None,
        repeat: bool = False,
        took: float | None = None,
        now: float | None = None,
    ) -> bool:
        now = time.time() if now is None else now
        d = self._get(name, limits)
        if result is Result.DEADLINE:
            hung = took is not None and cut_was_a_hang(took, d.need())
            result = Result.FAILURE if hung else Result.NEUTRAL
        d.slots.pop(slot, None)
        handing = slot in d.preempting  # a preempted call gives its slot back
        d.preempting.discard(slot)
        held = d.held.pop(slot, None)
        congested = False
        if result is Result.CAPACITY and held is not None and held.handed:
            # The upstream had not yet seen the preempted call's cancel: not congestion.
            result, congested = Result.NEUTRAL, True
        if held is not None:
            if result is Result.SUCCESS:  # how long an answer takes, for Retry-After
                d.hold = next_hold(d.hold, now - held.since)
                if took is not None:
                    d.latency, d.deviation = next_latency(d.latency, d.deviation, took)
            if service is not None:
                d.charge(held.member, service - held.estimate, now)
        if result is Result.SUCCESS:
            d.failures = 0
            if d.mode == "half_open":
                d.half_successes += 1
                if d.half_successes >= limits.close_after:
                    d.mode, d.reason, d.opens = "closed", "", 0
            d.streak += 1
            if d.streak >= math.floor(d.limit or 1):
                d.raised_from = d.limit or 1
                d.limit = raised(d.raised_from, self._ceiling(limits))
                d.streak = 0
        elif result is not Result.NEUTRAL:
            counts = not repeat
            if result is Result.CAPACITY and d.mode == "closed":
                since = held.since if held is not None else now
                limit = d.limit or FLOOR
                if since < d.cut_at:
                    congested = True  # sent before the last cut: that cut answered it
                elif limit > FLOOR:
                    d.limit, d.cut_at, d.streak = after_capacity_error(limit, d.raised_from), now, 0
                    d.raised_from = 0.0
                    congested = True
                counts = counts and not congested
            if counts:
                d.failures += 1
            if limits.threshold and (
                result is Result.MISCONFIGURED
                or d.mode == "half_open"  # a probe failed
                or (counts and d.failures >= limits.threshold)
            ):
                d.mode, d.open_until = "open", now + open_time(limits.cooldown, d.opens)
                d.opens += 1
                d.failures = d.half_successes = 0
                d.reason = result.value
        self._dispatch(d, limits, now, handed=handing)
        return congested

    async def renew(self, held: dict[str, tuple[Limits, list[str]]]) -> None:
        now = time.time()
        for name, (limits, slots) in held.items():
            d = self._get(name, limits)
            for slot in slots:
                if slot in d.slots:
                    d.slots[slot] = now + limits.lease

    def occupy(self, name: str, limits: Limits, slots: Sequence[str]) -> None:
        """Count `slots` as taken here (the Redis backend's: slots Redis granted to this
        worker and still in use), so that while Redis is away this state grants only
        slots that are really free; each is freed by its `release` or `vacate`."""
        d = self._get(name, limits)
        expiry = time.time() + limits.lease
        for slot in slots:
            d.slots.setdefault(slot, expiry)

    def vacate(self, name: str, limits: Limits, slot: str) -> None:
        """Forget an occupied slot released elsewhere (in Redis, once it answered again)."""
        d = self._get(name, limits)
        if d.slots.pop(slot, None) is not None and slot not in d.held:
            self._dispatch(d, limits, time.time())

    async def watch_preemption(self, name: str, slot: str) -> asyncio.Future[None]:
        return self.track_preemption(slot, asyncio.get_running_loop().create_future())

    def track_preemption(self, slot: str, future: asyncio.Future[None]) -> asyncio.Future[None]:
        """Resolve `future` when `slot` is asked back here (the Redis backend passes its own
        future, for slots granted while Redis was away)."""
        self._preempts[slot] = future
        if any(slot in d.preempting for d in self._deployments.values()) and not future.done():
            future.set_result(None)
        return future

    def forget_preemption(self, slot: str) -> None:
        self._preempts.pop(slot, None)

    async def sweep(
        self, name: str, limits: Limits, slots: Sequence[str] = (), *, now: float | None = None
    ) -> list[str]:
        """Hand out slots whose leases ran out (a worker died holding them); which of
        `slots` are granted."""
        d = self._get(name, limits)
        self._dispatch(d, limits, time.time() if now is None else now)
        return [s for s in slots if s in d.slots]

    async def snapshot(self, name: str, limits: Limits, *, now: float | None = None) -> Snapshot:
        now = time.time() if now is None else now
        d = self._get(name, limits)
        live = [s for s, exp in d.slots.items() if exp > now]
        open_for = max(0.0, d.open_until - now) if d.mode == "open" else 0.0
        waiting = [w for w in d.waiting.values() if w.until > now]
        return Snapshot(
            d.mode,
            d.limit or 0,
            len(live),
            d.failures,
            open_for,
            d.reason,
            batch_in_flight=sum(1 for s in live if self._is_batch(d, s)),
            waiting_interactive=sum(1 for w in waiting if w.priority == INTERACTIVE),
            waiting_batch=sum(1 for w in waiting if w.priority == BATCH),
            oldest_wait=max((now - w.since for w in waiting), default=0.0),
        )

    async def reset(self, name: str) -> None:
        self._deployments.pop(name, None)

    # --- the queue ---------------------------------------------------------------------

    @staticmethod
    def _allowed(d: _Deployment) -> int:
        return allowed_slots(d.mode, d.limit or 1, d.half_successes)

    @staticmethod
    def _is_batch(d: _Deployment, slot: str) -> bool:
        held = d.held.get(slot)
        return held is not None and held.priority == BATCH

    @staticmethod
    def _waiting_count(d: _Deployment, priority: str) -> int:
        return sum(len(q) for q in d.queues[priority].values())

    def _ahead(self, d: _Deployment, priority: str) -> int:
        """Waiters served before a newcomer of `priority`, about: its class, and for batch
        every interactive one too."""
        ahead = self._waiting_count(d, priority)
        return ahead + (self._waiting_count(d, INTERACTIVE) if priority == BATCH else 0)

    def _served_before(self, d: _Deployment, priority: str, member: str, now: float) -> int:
        """Waiters fair share serves before the next call of `member` (its own included):
        of its class, those of members with less service (or as much, and fewer calls
        waiting); for batch every interactive one too. Not the whole queue: a quiet
        member is not behind a loud one's backlog."""
        mine = d.recent(member, now)
        queues = d.queues[priority]
        mine_waiting = len(queues.get(member, ()))
        loud = self._loud(d, self._allowed(d), now)  # waits for more than the headroom
        ahead = sum(
            len(q)
            for m, q in queues.items()
            if m == member or (m != loud and _before(d.recent(m, now), len(q), mine, mine_waiting))
        )
        return ahead + (self._waiting_count(d, INTERACTIVE) if priority == BATCH else 0)

    def _drain(self, d: _Deployment, priority: str) -> int:
        """A Retry-After for a call of `priority` that found no place: the queue's wait."""
        return queue_retry_after(self._ahead(d, priority), self._allowed(d), d.hold)

    @staticmethod
    def _join(d: _Deployment, waiter: Waiter) -> None:
        d.waiting[waiter.slot] = waiter
        d.queues[waiter.priority].setdefault(waiter.member, {})[waiter.slot] = waiter

    @staticmethod
    def _remove(d: _Deployment, slot: str) -> Waiter | None:
        waiter = d.waiting.pop(slot, None)
        if waiter is not None:
            members = d.queues[waiter.priority]
            del members[waiter.member][slot]
            if not members[waiter.member]:
                del members[waiter.member]
        return waiter

    def _dispatch(
        self, d: _Deployment, limits: Limits, now: float, *, handed: bool = False
    ) -> None:
        """Grant free slots to waiters, in slot_policy's order, while any is eligible;
        `handed`: the first slot is one a preempted call just gave back."""
        if d.mode == "open" and now >= d.open_until:
            d.mode, d.half_successes = "half_open", 0
        allowed = self._allowed(d)
        if len(d.slots) >= allowed:
            # Expired leases only matter when the deployment looks full.
            for slot in [s for s, exp in d.slots.items() if exp <= now]:
                del d.slots[slot]
                d.held.pop(slot, None)
                d.preempting.discard(slot)
        while len(d.slots) < allowed:
            waiter = self._next(d, limits, allowed, now)
            if waiter is None:
                break
            self._remove(d, waiter.slot)
            self._grant(d, limits, waiter, now, handed=handed)
            handed = False
            granted = self._grants.get(waiter.slot)
            if granted is not None and not granted.done():
                granted.set_result(None)
        if 0 < allowed <= len(d.slots):  # full (and not open: a slot could go to nobody)
            self._preempt(d, now)

    def _free_for(self, d: _Deployment, limits: Limits, waiter: Waiter, now: float) -> bool:
        """Whether `waiter` would be granted at once with nothing to weigh: nobody waits,
        more slots are free than the headroom kept from the loudest member, batch is under
        its cap, and the waiter's time is not up. The fair-share pass (`_dispatch`) would
        grant it the same slot; most calls find a deployment like this."""
        allowed = self._allowed(d)
        if d.waiting or allowed - len(d.slots) <= headroom(allowed) or waiter.until < now:
            return False
        return waiter.priority != BATCH or not self._batch_full(d, limits, allowed)

    def _batch_full(self, d: _Deployment, limits: Limits, allowed: int) -> bool:
        """Batch holds every slot it may: the rest are kept for interactive calls."""
        batch = sum(1 for s in d.slots if self._is_batch(d, s))
        return batch >= batch_cap(allowed, limits.reserve)

    def _grant(
        self, d: _Deployment, limits: Limits, waiter: Waiter, now: float, *, handed: bool
    ) -> None:
        d.slots[waiter.slot] = now + limits.lease
        d.held[waiter.slot] = _Held(
            waiter.priority, waiter.member, waiter.estimate, now, waiter.preemptible, handed
        )
        d.charge(waiter.member, waiter.estimate, now)
        self._count_attempt(d, now, retry=waiter.retry)

    def _preempt(self, d: _Deployment, now: float) -> None:
        """The deployment is full: ask back the youngest preemptible batch slots, one for
        each waiting interactive request that no slot asked back yet covers (not for one
        that only asked for a free slot and waits nowhere: its `until` is now)."""
        waiting = sum(
            1 for q in d.queues[INTERACTIVE].values() for w in q.values() if w.until > now
        )
        wanted = waiting - len(d.preempting)
        if wanted <= 0:
            return
        youngest = sorted(
            (h.since, s)
            for s, h in d.held.items()
            if h.preemptible and s in d.slots and s not in d.preempting
        )
        for _, slot in youngest[::-1][:wanted]:
            d.preempting.add(slot)
            asked = self._preempts.get(slot)
            if asked is not None and not asked.done():
                asked.set_result(None)

    def _loudest(self, d: _Deployment, allowed: int, now: float) -> str | None:
        """The member kept off the last free slots (slot_policy rule 7)."""
        if allowed - len(d.slots) > headroom(allowed):
            return None
        return self._loud(d, allowed, now)

    @staticmethod
    def _loud(d: _Deployment, allowed: int, now: float) -> str | None:
        active = {m for m, (_, at) in d.demand.items() if at >= now - ACTIVE_WITHIN}
        active.update(h.member for h in d.held.values())
        active.update(d.queues[INTERACTIVE], d.queues[BATCH])
        demand = {m: recent(*d.demand.get(m, (0.0, now)), now) for m in active}
        return loudest(demand, allowed, d.hold)

    def _next(self, d: _Deployment, limits: Limits, allowed: int, now: float) -> Waiter | None:
        if not d.waiting:  # every release and grant asks: most find nobody waiting
            return None
        latest = now + d.need()  # a waiter whose deadline is sooner could not finish
        kept_off = self._loudest(d, allowed, now)
        for priority in (INTERACTIVE, BATCH):
            members = d.queues[priority]
            if not members:
                continue
            if priority == BATCH and self._batch_full(d, limits, allowed):
                return None
            heads = []
            for queue in list(members.values()):
                head = next(iter(queue.values()))
                # Gave up waiting without leaving (a dead worker), or too late to finish.
                while head.until < now or head.deadline < latest:
                    self._remove(d, head.slot)
                    if not queue:
                        break
                    head = next(iter(queue.values()))
                else:
                    heads.append(head)
            if heads and kept_off:
                heads = [w for w in heads if w.member != kept_off]
                if not heads:
                    return None  # batch neither: it would pass a waiting interactive call
            if heads:
                # Least recent service first; ties to the member with the fewest calls
                # waiting, so nobody queues behind a backlog someone else made; then the
                # longest wait.
                return min(
                    heads, key=lambda w: (d.recent(w.member, now), len(members[w.member]), w.since)
                )
        return None

    @staticmethod
    def _budget_allows_retry(d: _Deployment, limits: Limits, now: float) -> bool:
        recent = [c for b, c in d.budget.items() if b > int(now // BUDGET_BUCKET) - BUDGET_BUCKETS]
        firsts, retries = sum(c[0] for c in recent), sum(c[1] for c in recent)
        return retry_allowed(firsts, retries, ratio=limits.retry_ratio, floor=limits.retry_floor)

    @staticmethod
    def _count_attempt(d: _Deployment, now: float, *, retry: bool) -> None:
        bucket = int(now // BUDGET_BUCKET)
        counts = d.budget.get(bucket)
        if counts is None:
            d.budget = {b: c for b, c in d.budget.items() if b > bucket - BUDGET_BUCKETS}
            counts = d.budget[bucket] = [0, 0]
        counts[1 if retry else 0] += 1
