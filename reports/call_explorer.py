"""The call explorer: calls in the viewer's scope by any filter, newest first, paged by a
keyset cursor (created_at, request_id) so page 1,000 costs what page 1 does; one call with
the timeline of its attempts; and every matching call as CSV rows, read in keyset batches
(constant memory, no connection held between batches).

Each filter that narrows much has an index with created_at behind it (routing/models.py),
so "the newest 50 calls served by `small`" reads about 50 index entries.
"""

import base64
from collections.abc import Iterator
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime

from accounts.models import Member
from accounts.selectors import Viewer
from routing.catalog.selectors import calls_visible_to
from routing.models import Attempt, CallRecord, Outcome


class ExplorerError(ValueError):
    """A filter or cursor that makes no sense (shown to the user)."""


@dataclass(frozen=True)
class CallFilter:
    since: datetime | None = None
    until: datetime | None = None
    team_id: int | None = None
    application_id: int | None = None
    member_id: int | None = None
    key_prefix: str = ""
    route: str = ""
    deployment: str = ""
    outcome: str = ""
    priority: str = ""
    stream: bool | None = None
    fell_back: bool | None = None
    min_latency_ms: float | None = None
    client_protocol: str = ""
    upstream_protocol: str = ""
    user_agent: str = ""  # the start of it: `codex_cli_rs`, `claude-cli`

    def is_empty(self) -> bool:
        return all(getattr(self, f.name) in (None, "") for f in fields(self))


def calls_matching(*, viewer: Viewer, filters: CallFilter) -> QuerySet[CallRecord]:
    """Calls in scope that pass every filter given."""
    f = filters
    qs = calls_visible_to(viewer)
    if f.since is not None:
        qs = qs.filter(created_at__gte=f.since)
    if f.until is not None:
        qs = qs.filter(created_at__lt=f.until)
    if f.team_id is not None:
        qs = qs.filter(member_id__in=Member.objects.filter(team_id=f.team_id).values("pk"))
    if f.application_id is not None:
        qs = qs.filter(application_id=f.application_id)
    if f.member_id is not None:
        qs = qs.filter(member_id=f.member_id)
    if f.key_prefix:
        # Keys are named by prefix; a shorter start finds every key that begins with it.
        qs = qs.filter(key_prefix__startswith=f.key_prefix)
    if f.route:
        qs = qs.filter(requested_model=f.route)
    if f.deployment:
        qs = qs.filter(served_deployment=f.deployment)
    if f.outcome:
        if f.outcome not in Outcome.values:
            raise ExplorerError(f"Unknown outcome {f.outcome!r}.")
        qs = qs.filter(outcome=f.outcome)
    if f.priority:
        qs = qs.filter(priority=f.priority)
    if f.stream is not None:
        qs = qs.filter(stream=f.stream)
    if f.fell_back is not None:
        qs = qs.filter(fell_back=f.fell_back)
    if f.min_latency_ms is not None:
        qs = qs.filter(latency_ms__gte=f.min_latency_ms)
    if f.client_protocol:
        qs = qs.filter(client_protocol=f.client_protocol)
    if f.upstream_protocol:
        qs = qs.filter(upstream_protocol=f.upstream_protocol)
    if f.user_agent:
        qs = qs.filter(user_agent__startswith=f.user_agent)
    return qs


# --- Keyset paging ---------------------------------------------------------------------------


def encode_cursor(created_at: datetime, request_id: str) -> str:
    raw = f"{created_at.isoformat()}|{request_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment, request_id = raw.split("|", 1)
        at = parse_datetime(moment)
    except (ValueError, UnicodeDecodeError):
        at = None
    if at is None or not request_id:
        raise ExplorerError("That page link is not valid any more: start from the first page.")
    return at, request_id


def _after(qs: QuerySet[CallRecord], at: datetime, request_id: str) -> QuerySet[CallRecord]:
    """Calls older than the cursor's, in (created_at, request_id) descending order."""
    # The plain bound lets the database walk the time index from the cursor on.
    return qs.filter(created_at__lte=at).filter(Q(created_at__lt=at) | Q(request_id__lt=request_id))


@dataclass
class CallPage:
    calls: list[CallRecord]
    next_cursor: str | None


def call_page(
    *, viewer: Viewer, filters: CallFilter, cursor: str | None = None, size: int = 50
) -> CallPage:
    """One page of matching calls, newest first, and the cursor of the next one."""
    qs = calls_matching(viewer=viewer, filters=filters)
    if cursor:
        qs = _after(qs, *decode_cursor(cursor))
    rows = list(
        qs.order_by("-created_at", "-request_id").defer("error_message", "client_ip")[: size + 1]
    )
    more = len(rows) > size
    rows = rows[:size]
    last = rows[-1] if rows and more else None
    return CallPage(rows, encode_cursor(last.created_at, last.request_id) if last else None)


def call_find(*, viewer: Viewer, request_id: str) -> CallRecord | None:
    """One call in scope by its X-Sluice-Request-Id (None: not there, or not yours)."""
    return calls_visible_to(viewer).filter(request_id=request_id.strip()).first()


# --- One call's timeline ---------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    number: int
    deployment: str
    offset_ms: float  # from the call's arrival
    duration_ms: float
    status_code: int | None
    error_class: str
    wait_ms: float | None  # the wait chosen before this attempt
    wait_reason: str  # backoff | retry_after | wait
    skipped: str  # not sent: breaker, concurrency, budget or drain

    @property
    def sent(self) -> bool:
        return not self.skipped


def call_timeline(call: CallRecord) -> list[Step]:
    """The call's attempts in order, each placed in time from the call's arrival."""
    attempts = Attempt.objects.filter(call_id=call.request_id).order_by("number")
    return [
        Step(
            number=a.number,
            deployment=a.deployment,
            offset_ms=max(0.0, (a.started_at - call.created_at) / timedelta(milliseconds=1)),
            duration_ms=a.duration_ms,
            status_code=a.status_code,
            error_class=a.error_class,
            wait_ms=a.retry_delay_ms,
            wait_reason=a.retry_reason,
            skipped=a.skipped,
        )
        for a in attempts
    ]


# --- CSV ---------------------------------------------------------------------------------------

CSV_COLUMNS = (
    "request_id",
    "created_at",
    "member_email",
    "application_slug",
    "key_prefix",
    "priority",
    "endpoint",
    "requested_model",
    "served_deployment",
    "upstream_model",
    "stream",
    "outcome",
    "status_code",
    "attempt_count",
    "retries",
    "fell_back",
    "tokens_in",
    "tokens_out",
    "cost",
    "latency_ms",
    "ttfb_ms",
    "queue_ms",
    "error_message",
    "client_protocol",
    "upstream_protocol",
    "degraded",
    "user_agent",
)


def call_rows(
    *, viewer: Viewer, filters: CallFilter, batch: int = 5000
) -> Iterator[list[tuple[Any, ...]]]:
    """Every matching call as value tuples (CSV_COLUMNS), newest first, in batches read by
    keyset: each batch is one short indexed query, so memory stays flat and no cursor or
    connection is held while the client reads."""
    qs = calls_matching(viewer=viewer, filters=filters).order_by("-created_at", "-request_id")
    position: tuple[datetime, str] | None = None
    while True:
        page = _after(qs, *position) if position else qs
        rows = list(page.values_list(*CSV_COLUMNS)[:batch])
        if not rows:
            return
        yield rows
        if len(rows) < batch:
            return
        position = (rows[-1][1], rows[-1][0])


# --- Which agents call what --------------------------------------------------------------


@dataclass
class AgentRow:
    agent: str  # the user agent's product: `claude-cli`, `codex_exec`, `OpenAI/Python`, …
    route: str
    client_protocol: str
    upstream_protocol: str
    calls: int
    failed: int
    degraded: int  # calls translated with something left out or changed


def agent_product(user_agent: str) -> str:
    """`claude-cli/2.1.332 (external, sdk-cli)` → `claude-cli`; no user agent → `-`."""
    return user_agent.split("/", 1)[0].split(" ", 1)[0][:60] or "-"


def agents_calling(*, viewer: Viewer, filters: CallFilter) -> list[AgentRow]:
    """Matching calls grouped by agent, route and the two protocols, most calls first."""
    from django.db.models import Count

    grouped = (
        calls_matching(viewer=viewer, filters=filters)
        .order_by()
        .values("user_agent", "requested_model", "client_protocol", "upstream_protocol")
        .annotate(
            calls=Count("pk"),
            failed=Count("pk", filter=~Q(outcome=Outcome.SUCCESS)),
            degraded=Count("pk", filter=~Q(degraded="")),
        )
    )
    rows: dict[tuple[str, str, str, str], AgentRow] = {}
    for g in grouped[:10_000]:
        key = (
            agent_product(g["user_agent"]),
            g["requested_model"],
            g["client_protocol"],
            g["upstream_protocol"],
        )
        row = rows.setdefault(key, AgentRow(*key, calls=0, failed=0, degraded=0))
        row.calls += g["calls"]
        row.failed += g["failed"]
        row.degraded += g["degraded"]
    return sorted(rows.values(), key=lambda r: (-r.calls, r.agent, r.route))
