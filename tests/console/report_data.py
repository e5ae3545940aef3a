"""Calls for the report tests, written through the audit writer's own path (call rows,
attempt rows, rollup upserts), so the reports read what production writes."""

import itertools
from datetime import datetime, timedelta
from decimal import Decimal

from accounts.models import ApiKey
from routing.models import Outcome
from routing.observability.audit import AttemptLog, CallLog, _write

_ids = itertools.count(1)


def call(
    key: ApiKey,
    at: datetime,
    *,
    route: str = "smart",
    served: str = "big",
    failed_on: tuple[tuple[str, str], ...] = (),
    outcome: str = Outcome.SUCCESS,
    tokens: tuple[int, int] = (10, 20),
    cost: str = "0.00012345",
    latency_ms: float = 400.0,
    priority: str = "interactive",
    stream: bool = False,
) -> CallLog:
    """One call by `key` at `at`: attempts that failed (deployment, error class), then the
    deployment that served (none when `served` is empty)."""
    log = CallLog(
        request_id=f"req_test{next(_ids):012d}", endpoint="chat/completions", client_ip=None
    )
    log.created_at = at
    log.member_id = key.member_id
    log.member_email = key.member.user.email
    log.application_id = key.application_id
    log.application_slug = key.application.slug
    log.team_id = key.member.team_id
    log.key_prefix = key.prefix
    log.priority = priority
    log.requested_model = log.route = route
    log.stream = stream
    log.outcome = outcome
    log.status_code = 200 if outcome == Outcome.SUCCESS else 503
    log.latency_ms = latency_ms
    number = 0
    offset = timedelta()
    for deployment, error_class in failed_on:
        number += 1
        log.attempts.append(
            AttemptLog(
                number=number,
                deployment=deployment,
                started_at=at + offset,
                duration_ms=50,
                status_code=503,
                error_class=error_class,
            )
        )
        offset += timedelta(milliseconds=50)
    if served:
        number += 1
        log.attempts.append(
            AttemptLog(
                number=number,
                deployment=served,
                started_at=at + offset,
                duration_ms=latency_ms - 50 * (number - 1),
                status_code=200,
            )
        )
        log.served_deployment = served
        log.upstream_model = served
        log.tokens_in, log.tokens_out = tokens
        log.cost = Decimal(cost)
        log.fell_back = bool(failed_on) and served != failed_on[0][0]
    return log


def write(calls: list[CallLog]) -> None:
    _write(calls)
