"""Reads of the Batch API: always within one application (a key sees only its own)."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from accounts.models import ApiKey, Application
from accounts.selectors import Viewer
from accounts.windows import ANY, effective_windows, normalize_windows, parse_windows, window_open
from batches.models import Batch, BatchCount, BatchFile, BatchLine
from core.prepared import Prepared

ACTIVE = (
    Batch.Status.VALIDATING,
    Batch.Status.IN_PROGRESS,
    Batch.Status.CANCELLING,
    Batch.Status.FINALIZING,
)


def _live_files(application_id: int) -> QuerySet[BatchFile]:
    """The application's files not past their `expires_at` (an expired one is gone to the
    client at once; its storage is freed at the application's next upload)."""
    return BatchFile.objects.filter(application_id=application_id).exclude(
        expires_at__lte=timezone.now()
    )


def file_get(*, application_id: int, file_id: str) -> BatchFile | None:
    return _live_files(application_id).filter(id=file_id).first()


def files_list(
    *, application_id: int, purpose: str | None, after: str | None, limit: int
) -> tuple[list[BatchFile], bool]:
    files = _live_files(application_id)
    if purpose:
        files = files.filter(purpose=purpose)
    return _page(files, after, limit)


def batch_get(*, application_id: int, batch_id: str) -> Batch | None:
    return Batch.objects.filter(application_id=application_id, id=batch_id).first()


def batches_list(
    *, application_id: int | None, after: str | None, limit: int
) -> tuple[list[Batch], bool]:
    batches = Batch.objects.all()
    if application_id is not None:
        batches = batches.filter(application_id=application_id)
    return _page(batches, after, limit)


def _page(queryset, after: str | None, limit: int) -> tuple[list, bool]:  # type: ignore[no-untyped-def]
    """Newest first; `after` is the id of the last item of the previous page."""
    queryset = queryset.order_by("-created_at", "-id")
    if after:
        anchor = queryset.filter(id=after).values_list("created_at", flat=True).first()
        if anchor is not None:
            queryset = queryset.filter(
                Q(created_at__lt=anchor) | Q(created_at=anchor, id__lt=after)
            )
    items = list(queryset[: limit + 1])
    return items[:limit], len(items) > limit


def line_counts(batch_ids: list[str]) -> dict[str, dict[str, int]]:
    """Finished lines per batch: completed (answered 200) and failed. Summed over the
    runners' counts (BatchCount), a few rows a batch however many lines it has."""
    rows = (
        BatchCount.objects.filter(batch_id__in=batch_ids)
        .values("batch_id")
        .annotate(completed=Sum("completed"), failed=Sum("failed"))
    )
    return {r["batch_id"]: {"completed": r["completed"], "failed": r["failed"]} for r in rows}


@dataclass(frozen=True)
class ActiveBatch:
    """What the runner needs of a batch it may work on."""

    id: str
    status: str
    endpoint: str
    application_id: int
    key_prefix: str
    expires_at: datetime
    windows: str  # the application's, else its team's
    time_zone: str
    storage_name: str  # of its input file ("" when the file is gone)


def _active() -> QuerySet[Batch]:
    return (
        Batch.objects.filter(status__in=ACTIVE)
        .order_by("created_at", "id")
        .values_list(
            "id",
            "status",
            "endpoint",
            "application_id",
            "key_prefix",
            "expires_at",
            "application__batch_windows",
            "application__team__batch_windows",
            "application__team__time_zone",
            "input_file__storage_name",
        )
    )


_active_rows = Prepared(_active)


def active_batches() -> list[ActiveBatch]:
    """Read every tick by every runner: one query of plain values, built once."""
    return [
        ActiveBatch(
            id=batch_id,
            status=status,
            endpoint=endpoint,
            application_id=application_id,
            key_prefix=key_prefix,
            expires_at=expires_at,
            windows=effective_windows(app_windows, team_windows),
            time_zone=time_zone,
            storage_name=storage or "",
        )
        for (
            batch_id,
            status,
            endpoint,
            application_id,
            key_prefix,
            expires_at,
            app_windows,
            team_windows,
            time_zone,
            storage,
        ) in _active_rows.rows()
    ]


def batch_progress() -> list[dict[str, object]]:
    """Every batch with its counts, newest first (manage.py batch_status)."""
    batches, _ = batches_list(application_id=None, after=None, limit=200)
    counts = line_counts([b.id for b in batches])
    running = dict(
        BatchLine.objects.filter(
            batch_id__in=[b.id for b in batches], state=BatchLine.State.RUNNING
        )
        .values("batch_id")
        .annotate(n=Count("id"))
        .values_list("batch_id", "n")
    )
    rows = []
    for b in batches:
        c = counts.get(b.id, {})
        app = Application.objects.select_related("team").get(pk=b.application_id)
        rows.append(
            {
                "id": b.id,
                "application": app.slug,
                "status": b.status,
                "total": b.total,
                "completed": c.get("completed", 0),
                "failed": c.get("failed", 0),
                "running": running.get(b.id, 0),
                "windows": effective_windows(app.batch_windows, app.team.batch_windows) or "any",
                "created_at": b.created_at,
                "expires_at": b.expires_at,
            }
        )
    return rows


def batch_unfinished(batch_id: str) -> bool:
    """Whether any line is still to run (pending) or running."""
    return BatchLine.objects.filter(batch_id=batch_id, state__in=BatchLine.UNFINISHED).exists()


def batch_models(batch_id: str) -> list[str]:
    """The models the batch's lines call (fixed once the batch is validated)."""
    return sorted(
        set(BatchLine.objects.filter(batch_id=batch_id).values_list("model", flat=True).distinct())
    )


# --- the console: batches in a viewer's scope ---------------------------------------------


def batches_visible_to(viewer: Viewer) -> QuerySet[Batch]:
    """Staff: every batch; a team admin: their team's applications'; a member: the batches
    made with their own keys. Out of scope is not found (404), as everywhere."""
    qs = Batch.objects.select_related("application__team", "output_file", "error_file")
    if viewer.is_staff:
        return qs
    if viewer.team_admin_of is not None:
        return qs.filter(application__team_id=viewer.team_admin_of)
    if viewer.member_id is not None:
        own = ApiKey.objects.filter(member_id=viewer.member_id).values("prefix")
        return qs.filter(key_prefix__in=own)
    return qs.none()


@dataclass(frozen=True)
class BatchWindow:
    """The windows a batch runs in (its application's, else its team's) and whether they
    are open at the moment asked about."""

    text: str  # "any" or "HH:MM-HH:MM, ..."
    time_zone: str
    open_now: bool
    inherited: bool  # the team's windows (the application sets none)


def window_of(application: Application, now: datetime) -> BatchWindow:
    text = effective_windows(application.batch_windows, application.team.batch_windows)
    try:
        windows = parse_windows(text)
    except ValueError:  # a stored value from before validation: the runner treats it as any
        windows = ()
    return BatchWindow(
        text=normalize_windows(text) if windows else ANY,
        time_zone=application.team.time_zone,
        open_now=window_open(windows, application.team.time_zone, now),
        inherited=not application.batch_windows.strip(),
    )


@dataclass(frozen=True)
class BatchRow:
    batch: Batch
    completed: int
    failed: int
    window: BatchWindow

    @property
    def finished(self) -> int:
        return self.completed + self.failed

    @property
    def remaining(self) -> int:
        return max(0, self.batch.total - self.finished)

    @property
    def percent(self) -> int:
        """Completed + failed of total, 0-100 (rounded down, so 100 means every line)."""
        total = self.batch.total
        return min(100, self.finished * 100 // total) if total else 0

    @property
    def completed_percent(self) -> float:
        return self.completed * 100 / self.batch.total if self.batch.total else 0.0

    @property
    def failed_percent(self) -> float:
        return self.failed * 100 / self.batch.total if self.batch.total else 0.0

    @property
    def cancellable(self) -> bool:
        return self.batch.status in (Batch.Status.VALIDATING, Batch.Status.IN_PROGRESS)


def batch_rows(batches: list[Batch], now: datetime) -> list[BatchRow]:
    """The request counts and window of each batch (one count query for the page)."""
    counts = line_counts([b.id for b in batches])
    windows: dict[int, BatchWindow] = {}
    rows = []
    for b in batches:
        c = counts.get(b.id, {})
        if b.application_id not in windows:
            windows[b.application_id] = window_of(b.application, now)
        rows.append(
            BatchRow(b, c.get("completed", 0), c.get("failed", 0), windows[b.application_id])
        )
    return rows


@dataclass(frozen=True)
class LineOutcomes:
    """What became of a batch's lines: per model, how many wait, run, answered, failed."""

    model: str
    pending: int
    running: int
    completed: int
    failed: int
    retried: int  # lines a runner took more than once (a lease ran out, preempted, …)

    @property
    def total(self) -> int:
        return self.pending + self.running + self.completed + self.failed


def line_outcomes(batch_id: str) -> list[LineOutcomes]:
    State = BatchLine.State
    rows = (
        BatchLine.objects.filter(batch_id=batch_id)
        .values("model")
        .annotate(
            pending=Count("id", filter=Q(state=State.PENDING)),
            running=Count("id", filter=Q(state=State.RUNNING)),
            completed=Count("id", filter=Q(state=State.DONE, failed=False)),
            failed=Count("id", filter=Q(state=State.DONE, failed=True)),
            retried=Count("id", filter=Q(claims__gt=1)),
        )
        .order_by("model")
    )
    return [LineOutcomes(**r) for r in rows]
