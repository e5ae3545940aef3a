"""How hard a call tries: its deadline, its fallback policy, and the waits between tries."""

import random
import time

from accounts.models import Fallback
from core.errors import bad_request
from routing.catalog.specs import DeploymentSpec, RetryPolicy, RouteSpec


def fallback_for(*, application_default: str, requested: str | None) -> Fallback:
    """`X-Sluice-Fallback` chooses per request; the application's setting is the default."""
    if not requested:
        return Fallback(application_default)
    try:
        return Fallback(requested.strip().lower())
    except ValueError:
        raise bad_request(
            "X-Sluice-Fallback must be 'any', 'same-tier' or 'none'.", param="X-Sluice-Fallback"
        ) from None


def eligible_chain(route: RouteSpec, fallback: Fallback) -> tuple[DeploymentSpec, ...]:
    """`any`: the whole chain; `same-tier`: only the first deployment's tier (the same class
    of model elsewhere); `none`: the first deployment alone, never downgraded."""
    if not route.chain or fallback is Fallback.ANY:
        return route.chain
    if fallback is Fallback.NONE:
        return route.chain[:1]
    tier = route.chain[0].tier
    return tuple(d for d in route.chain if d.tier == tier)


MIN_MAX_WAIT = 0.1  # seconds: less leaves no time to call any upstream at all


def deadline_for(policy: RetryPolicy, max_wait: str | None, *, now: float | None = None) -> float:
    """A monotonic deadline: the route's timeout, shortened by `X-Sluice-Max-Wait`."""
    budget = policy.timeout
    if max_wait is not None:
        try:
            wait = float(max_wait)
        except ValueError:
            wait = -1.0
        if not MIN_MAX_WAIT <= wait <= 86_400:  # NaN fails every comparison
            raise bad_request(
                f"X-Sluice-Max-Wait must be a number of seconds from {MIN_MAX_WAIT} to 86400.",
                param="X-Sluice-Max-Wait",
            )
        budget = min(budget, wait)
    return (time.monotonic() if now is None else now) + budget


def backoff(retry: int, policy: RetryPolicy, rng: random.Random | None = None) -> float:
    """Full jitter: uniform over [0, min(cap, base * 2**retry)], so clients
    that failed together do not come back together."""
    ceiling = min(policy.backoff_cap, policy.backoff_base * 2 ** min(retry, 30))
    return (rng or random).uniform(0, ceiling)


def retry_wait(
    retry: int, retry_after: float | None, policy: RetryPolicy, rng: random.Random | None = None
) -> tuple[float, str]:
    """The wait before retrying and why: the upstream's Retry-After when it is within the
    cap (it knows best), else the computed backoff."""
    if retry_after is not None and retry_after <= policy.retry_after_cap:
        return retry_after, "retry_after"
    return backoff(retry, policy, rng), "backoff"
