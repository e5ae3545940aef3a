"""Reads for routing: calls in scope, the live capacity board, capacity-error shares,
overview totals and recent calls. Pages, reports, alerts and the management API share them.

Everything reads indexed ranges (calls by member and time, attempts by start time) or the
hourly rollups; nothing scans the whole audit trail.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from accounts.models import Member
from accounts.selectors import Viewer
from quotas.selectors import rollups_visible_to
from routing.deployment_state import Limits, Snapshot, deployment_state
from routing.models import Attempt, CallRecord, Deployment, Route
from routing.request_path.classify import ErrorClass

CAPACITY_WINDOWS = (timedelta(minutes=5), timedelta(hours=1))


def _alert_settings() -> tuple[float, int, timedelta]:
    """The alert line (share, minimum attempts, window): the settings the capacity alert uses."""
    return (
        getattr(settings, "SLUICE_CAPACITY_ALERT_SHARE", 0.2),
        getattr(settings, "SLUICE_CAPACITY_ALERT_MIN_ATTEMPTS", 20),
        timedelta(seconds=getattr(settings, "SLUICE_CAPACITY_ALERT_WINDOW_SECONDS", 300)),
    )


def calls_visible_to(viewer: Viewer) -> QuerySet[CallRecord]:
    """Staff: every call; team admin: their team's members' calls; member: their own."""
    if viewer.is_staff:
        return CallRecord.objects.all()
    if viewer.team_admin_of is not None:
        # Calls carry member ids, not team ids: an IN over the team's members, indexed.
        member_ids = Member.objects.filter(team_id=viewer.team_admin_of).values("pk")
        return CallRecord.objects.filter(member_id__in=member_ids)
    if viewer.member_id is not None:
        return CallRecord.objects.filter(member_id=viewer.member_id)
    return CallRecord.objects.none()


@dataclass(frozen=True)
class CapacityShare:
    attempts: int  # attempts sent to the deployment in the window (skipped ones not counted)
    capacity_errors: int

    @property
    def share(self) -> float:
        return self.capacity_errors / self.attempts if self.attempts else 0.0


def capacity_error_share(
    *, window: timedelta, now: datetime | None = None
) -> dict[str, CapacityShare]:
    """Per deployment: the share of its attempts in the last `window` that failed with a
    capacity error (the capacity alert's measure). One indexed range over Attempt.started_at."""
    now = now or timezone.now()
    rows = (
        Attempt.objects.filter(started_at__gte=now - window, started_at__lte=now, skipped="")
        .values("deployment")
        .annotate(
            attempts=Count("id"),
            capacity=Count("id", filter=Q(error_class=ErrorClass.CAPACITY)),
        )
    )
    return {r["deployment"]: CapacityShare(r["attempts"], r["capacity"]) for r in rows}


def capacity_alerts(*, now: datetime | None = None) -> list[tuple[str, CapacityShare]]:
    """Deployments whose capacity-error share over the alert window (5 minutes) is above
    SLUICE_CAPACITY_ALERT_SHARE (20 % by default) with at least
    SLUICE_CAPACITY_ALERT_MIN_ATTEMPTS attempts, worst first."""
    threshold, minimum, window = _alert_settings()
    shares = capacity_error_share(window=window, now=now)
    over = [
        (name, s) for name, s in shares.items() if s.attempts >= minimum and s.share > threshold
    ]
    return sorted(over, key=lambda item: -item[1].share)


@dataclass
class BoardRow:
    name: str
    model: str
    tier: str
    enabled: bool
    configured_limit: int
    drained_until: datetime | None
    drain_reason: str
    breaker: str  # closed | open | half-open
    open_until: datetime | None
    effective_limit: float
    in_flight: int
    batch_in_flight: int
    waiting_interactive: int
    waiting_batch: int
    oldest_wait: float
    share_5m: CapacityShare
    share_1h: CapacityShare
    config_error: str

    @property
    def drained(self) -> bool:
        return self.drained_until is not None and self.drained_until > timezone.now()

    @property
    def alert(self) -> bool:
        threshold, minimum, _ = _alert_settings()
        return self.share_5m.attempts >= minimum and self.share_5m.share > threshold


def limits_of(d: Deployment) -> Limits:
    """The deployment's state knobs, as routing/catalog/specs.py builds them."""
    return Limits(
        max_concurrency=d.max_concurrency,
        threshold=d.breaker_threshold,
        cooldown=d.breaker_cooldown,
        retry_ratio=d.retry_budget,
        reserve=d.interactive_reserve,
    )


async def _snapshots(items: list[tuple[str, Limits]]) -> list[Snapshot]:
    state = deployment_state()
    return [await state.snapshot(name, limits) for name, limits in items]


def deployment_snapshots(deployments: list[Deployment]) -> list[Snapshot]:
    """Live state (breaker, limit, slots, queues) from the shared state backend (Redis with
    REDIS_URL, else this process). Safe from a sync view: runs on the server's loop."""
    return async_to_sync(_snapshots)([(d.name, limits_of(d)) for d in deployments])


def deployment_board(
    *, now: datetime | None = None, names: list[str] | None = None
) -> list[BoardRow]:
    """One row per deployment for the live capacity board, by name (only `names` if given:
    the API's state of one deployment)."""
    now = now or timezone.now()
    query = Deployment.objects.order_by("name")
    if names is not None:
        query = query.filter(name__in=names)
    deployments = list(query)
    snaps = deployment_snapshots(deployments)
    shares = [capacity_error_share(window=w, now=now) for w in CAPACITY_WINDOWS]
    none = CapacityShare(0, 0)
    rows = []
    for d, snap in zip(deployments, snaps, strict=True):
        mode = snap.mode.replace("_", "-")
        rows.append(
            BoardRow(
                name=d.name,
                model=d.model,
                tier=d.tier,
                enabled=d.enabled,
                configured_limit=d.max_concurrency,
                drained_until=d.drained_until,
                drain_reason=d.drain_reason,
                breaker=mode,
                open_until=now + timedelta(seconds=snap.open_for) if snap.open_for else None,
                effective_limit=snap.limit,
                in_flight=snap.in_flight,
                batch_in_flight=snap.batch_in_flight,
                waiting_interactive=snap.waiting_interactive,
                waiting_batch=snap.waiting_batch,
                oldest_wait=snap.oldest_wait,
                share_5m=shares[0].get(d.name, none),
                share_1h=shares[1].get(d.name, none),
                config_error=d.config_error,
            )
        )
    return rows


@dataclass(frozen=True)
class Totals:
    calls: int
    errors: int
    tokens: int
    cost: Decimal

    @property
    def success_rate(self) -> float | None:
        return (self.calls - self.errors) / self.calls if self.calls else None


def usage_totals(*, viewer: Viewer, since: datetime) -> Totals:
    """Calls, errors, tokens and cost in scope from the hourly rollups whose hour starts at
    or after `since` floored to the hour (so "last hour" covers up to two rollup hours)."""
    hour = since.replace(minute=0, second=0, microsecond=0)
    row = (
        rollups_visible_to(viewer)
        .filter(hour__gte=hour)
        .aggregate(
            calls=Sum("requests"),
            errors=Sum("errors"),
            tokens=Sum("tokens_in") + Sum("tokens_out"),
            cost=Sum("cost"),
        )
    )
    return Totals(
        calls=row["calls"] or 0,
        errors=row["errors"] or 0,
        tokens=row["tokens"] or 0,
        cost=row["cost"] or Decimal(0),
    )


def recent_calls(*, viewer: Viewer, member_id: int | None = None, limit: int = 50):
    """The newest calls in scope (optionally of one member), newest first."""
    qs = calls_visible_to(viewer)
    if member_id is not None:
        qs = qs.filter(member_id=member_id)
    return qs.order_by("-created_at")[:limit]


def routes_with_chains() -> list[Route]:
    return list(Route.objects.prefetch_related("chain__deployment").order_by("name"))


def deployments_with_routes() -> QuerySet[Deployment]:
    return Deployment.objects.select_related("upstream").prefetch_related("routes")
