"""Reserving a call's quotas (`reserve_quota`) before any upstream is called, and settling.

Requests per minute go through django-ratelimit (fixed one-minute windows, staggered per
key; its counter is Django's cache: Redis with REDIS_URL). Tokens, concurrency and budgets
are reserved on quotas.counters: the estimate of the prompt plus `max_tokens` (or the
application's default) times `n`, settled against the usage the upstream reports.

Interactive reserve: a batch call passes a scope's requests per minute, tokens per minute
and concurrency only while the scope's use (every class) stays within its batch share,
the limit less `SLUICE_QUOTA_INTERACTIVE_RESERVE` (20 %, rounded up; batch keeps at least
one), so a member's or an application's batch never takes the last of it. A batch call
refused there is not counted against requests per minute. A batch call waiting in a deployment's
queue keeps its concurrency lease (batch's own count includes it), but an interactive
call's count leaves it out (`park`): an interactive call is never refused by its own
member's queued batch, and what is sent upstream stays within the limit.
"""

import asyncio
import functools
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django_ratelimit.core import get_usage
from redis.exceptions import RedisError

from accounts.authentication import Principal
from accounts.models import PriorityClass
from core.background import spawn
from core.errors import GatewayError
from core.leases import LeaseKeeper
from core.outcomes import Outcome
from quotas.counters import (
    Check,
    LeaseLength,
    QuotaCounters,
    QuotaStoreDown,
    quota_counters,
    redis_down,
)
from quotas.limits import ScopeLimits, limits_for, period_starts

CONCURRENCY_LEASE = LeaseLength(120.0)
# django-ratelimit is synchronous: on Redis its counting runs on these threads, off the
# event loop (a pool of its own, so it never queues behind other blocking work).
_rpm_threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sluice-rpm")
_lease_keeper: LeaseKeeper | None = None


@dataclass
class Ticket:
    """What a call reserved, to settle when it ends."""

    counters: QuotaCounters
    slot: str
    tokens: float = 0.0
    cost: float = 0.0
    token_keys: list[str] = field(default_factory=list)
    cost_keys: list[str] = field(default_factory=list)
    lease_keys: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    ledger: str | None = None  # where the reservation waits to be settled (Redis)


@dataclass(frozen=True)
class _Counter:
    scope: ScopeLimits
    kind: str  # tpm | day | month | cost | concurrency
    check: Check
    resets_at: float


def _keeper(counters: QuotaCounters) -> LeaseKeeper:
    global _lease_keeper
    if _lease_keeper is None:
        _lease_keeper = LeaseKeeper(counters)
    return _lease_keeper


def batch_share(limit: float, reserve: float) -> float:
    """What batch calls may use of a limit: all but `reserve` of it (rounded up), and at
    least one, so a limit of 1 still serves batch when nobody else asks."""
    kept = min(limit - 1, math.ceil(limit * reserve - 1e-9)) if limit > 0 else 0
    return max(0, limit - max(0, kept))


async def reserve_quota(
    principal: Principal,
    *,
    tokens: int,
    cost_ceiling: float,
    slot: str,
    priority: str = PriorityClass.INTERACTIVE,
) -> Ticket | None:
    """Reserve `tokens` (the most the call may take) and `cost_ceiling` (the most it may
    cost) on every limit of the principal's scopes, and one concurrency lease under `slot`.
    Raise 429 when a limit says no; else the reservation to settle later (None when no limit
    applies). Batch calls get their share of each rate and concurrency limit."""
    batch = priority == PriorityClass.BATCH and settings.SLUICE_QUOTA_INTERACTIVE_RESERVE > 0
    try:
        return await _reserve(principal, tokens, cost_ceiling, slot, batch)
    except QuotaStoreDown:
        raise _limits_unavailable() from None


def _limits_unavailable() -> GatewayError:
    return GatewayError(
        503,
        "Limits cannot be checked right now; retry shortly.",
        type="server_error",
        code="limits_unavailable",
        headers={"Retry-After": "5"},
    )


async def count_refused_request(
    principal: Principal, *, priority: str = PriorityClass.INTERACTIVE
) -> dict[str, str]:
    """Count a call refused before its quotas are reserved (a model that names no route, or
    one the application may not use) against the principal's requests per minute: refused
    calls are not free, so a key's limit stops a flood of them too. Raise 429 when a scope
    is over; else the x-ratelimit-*-requests headers to send with the refusal."""
    limits = await limits_for(principal)
    rpm = [s for s in limits if s.requests_per_minute]
    if not rpm:
        return {}
    batch = priority == PriorityClass.BATCH and settings.SLUICE_QUOTA_INTERACTIVE_RESERVE > 0
    ticket = Ticket(counters=quota_counters(), slot="")
    try:
        if _counted_in_memory():
            _check_requests(_rpm_usage(rpm, batch), ticket)
        else:
            await _count_request(rpm, ticket, batch)
    except QuotaStoreDown:  # Redis is away and quotas fail closed
        raise _limits_unavailable() from None
    return ticket.headers


async def _reserve(
    principal: Principal, tokens: int, cost: float, request_id: str, batch: bool
) -> Ticket | None:
    limits = await limits_for(principal)
    if not limits:
        return None
    counters = quota_counters()
    ticket = Ticket(counters=counters, slot=request_id)
    now = time.time()
    rpm = [s for s in limits if s.requests_per_minute]
    counting = None
    if rpm and _counted_in_memory():
        _check_requests(_rpm_usage(rpm, batch), ticket)
    elif rpm:
        # The request count (django-ratelimit, in a thread) and the reservation run side
        # by side; a request refused per minute gives its reservation straight back.
        counting = asyncio.ensure_future(_count_request(rpm, ticket, batch))

    planned = _counters(limits, principal.team_time_zone, tokens, cost, now, batch=batch)
    try:
        checks = [p.check for p in planned]
        verdict = await counters.reserve(checks, request_id, now=now) if planned else None
    except BaseException:
        if counting is not None:
            counting.cancel()
        raise
    if counting is not None:
        try:
            await counting
        except GatewayError:
            if verdict is not None and verdict.failed is None:
                refund = [(c.key, -c.amount) for c in checks if not c.lease]
                leases = [c.key for c in checks if c.lease]
                given = [c.amount for c in checks if not c.lease]
                spawn(counters.settle(refund, leases, request_id, reserved=given))
            raise
    if verdict is None:
        return ticket
    if verdict.failed is not None:
        raise _refusal(planned[verdict.failed], verdict.values[0], tokens, now)
    ticket.tokens, ticket.cost = tokens, cost
    if verdict.pending is not None:
        ticket.ledger, length = verdict.pending
        _keeper(counters).hold(ticket.ledger, length, request_id)
    for p, value in zip(planned, verdict.values, strict=True):
        if p.kind in ("tpm", "day", "month"):
            ticket.token_keys.append(p.check.key)
        elif p.kind == "cost":
            ticket.cost_keys.append(p.check.key)
        else:
            ticket.lease_keys.append(p.check.key)
            _keeper(counters).hold(p.check.key, CONCURRENCY_LEASE, request_id)
        if p.kind == "tpm":
            _tightest(
                ticket.headers, "tokens", p.check.limit, p.check.limit - value, p.resets_at - now
            )
    return ticket


async def settle(ticket: Ticket, *, tokens: int, cost: float) -> None:
    """Charge what was used instead of what was reserved, and free the call's slots."""
    deltas = [(key, tokens - ticket.tokens) for key in ticket.token_keys]
    deltas += [(key, cost - ticket.cost) for key in ticket.cost_keys]
    reserved = [ticket.tokens] * len(ticket.token_keys) + [ticket.cost] * len(ticket.cost_keys)
    keeper = _keeper(ticket.counters)
    for key in ticket.lease_keys:
        keeper.drop(key, ticket.slot)
    if ticket.ledger is not None:
        keeper.drop(ticket.ledger, ticket.slot)
    await ticket.counters.settle(
        deltas,
        ticket.lease_keys,
        ticket.slot,
        reserved=reserved if ticket.ledger is not None else None,
    )


async def park(ticket: Ticket | None, *, parked: bool) -> None:
    """A batch call starts (or stops) waiting in a deployment's queue: while it waits, its
    concurrency leases do not count against interactive calls of the same scopes."""
    if ticket is not None and ticket.lease_keys:
        await ticket.counters.park(ticket.lease_keys, ticket.slot, parked=parked)


def settle_later(ticket: Ticket, *, tokens: int, cost: float) -> None:
    spawn(settle(ticket, tokens=tokens, cost=cost))


def _counters(
    limits: tuple[ScopeLimits, ...],
    time_zone: str,
    tokens: int,
    cost: float,
    now: float,
    *,
    batch: bool = False,
) -> list[_Counter]:
    """Every counter the call must pass; a batch call gets the batch share of the rate and
    concurrency limits (budgets are not reserved: they are spent, not waited for)."""
    minute = math.floor(now / 60)
    reserve = settings.SLUICE_QUOTA_INTERACTIVE_RESERVE if batch else 0.0
    day, next_day, month, next_month = period_starts(now, time_zone)
    # Each period's key and reset time once a call, not once a scope (strftime and an aware
    # datetime's timestamp cost microseconds each).
    day_key, month_key = _stamp(day), _stamp(month)
    day_resets, month_resets = next_day.timestamp(), next_month.timestamp()
    prefix = _prefix()
    planned = []
    for s in limits:
        base = f"{s.scope}:{s.target}"

        def add(
            kind: str,
            limit: float,
            amount: float,
            ttl: float,
            resets_at: float,
            *,
            lease: bool = False,
            seed: float = 0.0,
            key: str = base,
            s: ScopeLimits = s,
        ) -> None:
            name = f"{prefix}:q:{key}:{kind}"
            # An interactive call is not refused for its own batch calls queued at a
            # deployment: their leases are left out of its count (not of batch's).
            check = Check(name, limit, amount, ttl, lease, seed, skip_parked=lease and not batch)
            planned.append(_Counter(s, kind, check, resets_at))

        if s.max_concurrency:
            share = batch_share(s.max_concurrency, reserve)
            add("concurrency", share, 1, CONCURRENCY_LEASE.lease, now + 1, lease=True)
        if s.tokens_per_minute:
            share = batch_share(s.tokens_per_minute, reserve)
            add("tpm", share, tokens, 120, (minute + 1) * 60, key=f"{base}:{minute}")
        periods = (
            ("day", s.tokens_per_day, tokens, 2, day_resets, s.tokens_today, day_key),
            ("month", s.tokens_per_month, tokens, 33, month_resets, s.tokens_this_month, month_key),
            ("cost", s.cost_per_month, cost, 33, month_resets, s.cost_this_month, month_key),
        )
        for kind, limit, amount, days, resets_at, seed, stamp in periods:
            if limit:
                add(
                    kind,
                    limit,
                    amount,
                    days * 86_400,
                    resets_at,
                    seed=seed,
                    key=f"{base}:{stamp}",
                )
    return planned


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y%m%d")


def _prefix() -> str:
    return settings.SLUICE_REDIS_PREFIX


# what, error type, code, outcome. The `type` is one of OpenAI's own for a 429 ("requests",
# "tokens", "insufficient_quota"), so clients that switch on it behave; Sluice's finer
# reason is the `code`.
_KIND_TEXT = {
    "tpm": ("tokens per minute", "tokens", "rate_limit_exceeded", Outcome.RATE_LIMITED),
    "day": ("tokens per day", "insufficient_quota", "budget_exceeded", Outcome.BUDGET_EXCEEDED),
    "month": (
        "tokens per month",
        "insufficient_quota",
        "budget_exceeded",
        Outcome.BUDGET_EXCEEDED,
    ),
    "cost": ("USD per month", "insufficient_quota", "budget_exceeded", Outcome.BUDGET_EXCEEDED),
    "concurrency": (
        "requests in flight",
        "requests",
        "concurrency_exceeded",
        Outcome.CONCURRENCY_LIMITED,
    ),
}


def _refusal(counter: _Counter, used: float, tokens: int, now: float) -> GatewayError:
    what, type_, code, outcome = _KIND_TEXT[counter.kind]
    limit = counter.check.limit
    wait = max(1, math.ceil(counter.resets_at - now))
    amount = _num(limit) if counter.kind != "cost" else f"{limit:.2f}"
    message = f"{counter.scope.label()}: {amount} {what}"
    full = {"concurrency": counter.scope.max_concurrency, "tpm": counter.scope.tokens_per_minute}
    if full.get(counter.kind) not in (None, limit):
        whole = _num(full[counter.kind])
        message += f" for batch calls (of {whole}: the rest is kept for interactive)"
    if counter.kind == "concurrency":
        message += f"; {int(used)} are in flight. Retry when one finishes."
    else:
        needs = counter.check.amount
        message += (
            f"; {_num(used)} used, this request needs up to {_num(needs)}. "
            f"Resets in {_duration(wait)}."
        )
        if needs > limit:
            message += " It can never fit: ask for fewer max_tokens."
    return GatewayError(
        429, message, type=type_, code=code, outcome=outcome, headers={"Retry-After": str(wait)}
    )


async def _count_request(rpm: list[ScopeLimits], ticket: Ticket, batch: bool) -> None:
    try:
        loop = asyncio.get_running_loop()
        usages = await loop.run_in_executor(_rpm_threads, _rpm_usage, rpm, batch)
    except (RedisError, OSError) as exc:
        redis_down(exc)  # raises when quotas fail closed
        return  # open: requests per minute go unchecked, the other counters fall back
    _check_requests(usages, ticket)


def _check_requests(usages: list[tuple[ScopeLimits, dict | None]], ticket: Ticket) -> None:
    """Refuse when a scope is over its requests per minute (a batch call: over its share);
    else the headers."""
    for scope, usage in usages:
        if usage is None:
            continue
        limit = usage["limit"]
        # django-ratelimit's `time_left` counts to the window's last whole second, which
        # still belongs to the window: the next one starts a second later.
        wait = max(1, math.ceil(usage["time_left"]) + 1)
        if usage["should_limit"]:
            what = f"{limit} requests per minute"
            if limit != scope.requests_per_minute:
                what += (
                    f" for batch calls (of {scope.requests_per_minute}: "
                    "the rest is kept for interactive)"
                )
            raise GatewayError(
                429,
                f"{scope.label()}: {what}. Resets in {_duration(wait)}.",
                type="requests",
                code="rate_limit_exceeded",
                outcome=Outcome.RATE_LIMITED,
                headers={"Retry-After": str(wait), **_request_headers(limit, 0, wait)},
            )
        _tightest(ticket.headers, "requests", limit, limit - usage["count"], wait)


@functools.cache
def _counted_in_memory() -> bool:
    """Without Redis the count is a dictionary update under a lock, no I/O: done in line.
    A thread hop, or even a task, waits a turn of the busy event loop, which under load adds
    tens of milliseconds (bench/overhead.py --only limits shows it)."""
    return isinstance(caches[settings.RATELIMIT_USE_CACHE], LocMemCache)


def _rpm_usage(
    rpm: list[ScopeLimits], batch: bool = False
) -> list[tuple[ScopeLimits, dict | None]]:
    """Count the request in each scope. A batch call is held to its share of the limit,
    and one over it is not counted (it would spend what is kept for interactive calls)."""
    reserve = settings.SLUICE_QUOTA_INTERACTIVE_RESERVE if batch else 0.0
    usages: list[tuple[ScopeLimits, dict | None]] = []
    for s in rpm:

        def usage(increment: bool, s: ScopeLimits = s) -> dict | None:
            return get_usage(
                None,  # the count is the scope's (the key below), not the request's
                group="sluice.rpm",
                key=lambda group, request: f"{s.scope}:{s.target}",
                rate=f"{s.requests_per_minute}/m",
                increment=increment,
            )

        share = batch_share(s.requests_per_minute or 0, reserve)
        found = usage(False) if share != s.requests_per_minute else None
        if found is not None and found["count"] >= share:
            found = found | {"should_limit": True}  # refused, not counted
        else:
            found = usage(True)
            if found is not None:
                found = found | {"should_limit": found["count"] > share}
        usages.append((s, None if found is None else found | {"limit": share}))
    return usages


def _request_headers(limit: float, remaining: float, reset: float) -> dict[str, str]:
    return {
        "x-ratelimit-limit-requests": _num(limit),
        "x-ratelimit-remaining-requests": _num(max(0, remaining)),
        "x-ratelimit-reset-requests": _duration(reset),
    }


def _tightest(
    headers: dict[str, str], kind: str, limit: float, remaining: float, reset: float
) -> None:
    """OpenAI's x-ratelimit-* trio, for the scope with the least left."""
    current = headers.get(f"x-ratelimit-remaining-{kind}")
    if current is not None and float(current) <= remaining:
        return
    headers[f"x-ratelimit-limit-{kind}"] = _num(limit)
    headers[f"x-ratelimit-remaining-{kind}"] = _num(max(0.0, remaining))
    headers[f"x-ratelimit-reset-{kind}"] = _duration(reset)


def _num(value: float) -> str:
    """Whole numbers in full (2000000, never 2e+06); fractions (dollars) as they are."""
    return str(int(value)) if float(value).is_integer() else f"{value:.6f}".rstrip("0")


def _duration(seconds: float) -> str:
    """OpenAI's format: 1s, 6m0s, 1h2m3s."""
    seconds = max(0, math.ceil(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"
