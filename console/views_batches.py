"""Batches (the Batch API, docs/batch.md): the batches in the viewer's scope with their progress
and window, one batch's lines, cancel; and the capacity-weather suggestion applied as an
application's batch windows. Reads are batches/selectors.py, writes the services the /v1
endpoints and the rest of the console use."""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.models import Application
from accounts.selectors import Viewer, applications_visible_to
from accounts.services import AccountError, application_batch_windows_set
from batches.selectors import batch_rows, batches_visible_to, line_outcomes
from batches.services import batch_cancel
from console.access import actor_of, console_view, redirect_back, viewer_of
from console.tables import Column, table
from core.errors import GatewayError

BATCH_COLUMNS = [
    Column("id", "Batch", "id"),
    Column("application", "Application", "application__slug"),
    Column("status", "Status", "status"),
    Column("progress", "Progress (lines)", "total"),
    Column("window", "Window"),
    Column("created", "Created", "created_at"),
    Column("files", "Files"),
    Column("actions", ""),
]
STATUSES = ("all", "active", "done")


@console_view()
def batch_list(request: HttpRequest) -> HttpResponse:
    viewer = viewer_of(request)
    qs = batches_visible_to(viewer)
    show = request.GET.get("show", "all")
    show = show if show in STATUSES else "all"
    active = ("validating", "in_progress", "cancelling", "finalizing")
    if show == "active":
        qs = qs.filter(status__in=active)
    elif show == "done":
        qs = qs.exclude(status__in=active)
    t = table(request, qs, BATCH_COLUMNS, default_sort="-created", tiebreak="id")
    now = timezone.now()
    context = {
        "table": t,
        "rows": batch_rows(t.rows, now),
        "show": show,
        "statuses": STATUSES,
        "base_url": f"{request.scheme}://{request.get_host()}/v1",
    }
    return render(request, "console/batches/list.html", context)


@console_view()
def batch_detail(request: HttpRequest, batch_id: str) -> HttpResponse:
    batch = get_object_or_404(batches_visible_to(viewer_of(request)), id=batch_id)
    (row,) = batch_rows([batch], timezone.now())
    ended = [
        (label, at)
        for label, at in (
            ("Finalizing", batch.finalizing_at),
            ("Completed", batch.completed_at),
            ("Failed", batch.failed_at),
            ("Expired", batch.expired_at),
            ("Cancelled", batch.cancelled_at),
        )
        if at is not None
    ]
    context = {"row": row, "batch": batch, "outcomes": line_outcomes(batch.id), "ended": ended}
    return render(request, "console/batches/detail.html", context)


@require_POST
@console_view()
def batch_cancel_view(request: HttpRequest, batch_id: str) -> HttpResponse:
    """Whoever sees a batch may cancel it: staff any, a team admin their team's, a member
    the batches of their own keys (batches_visible_to); others get 404."""
    batch = get_object_or_404(batches_visible_to(viewer_of(request)), id=batch_id)
    try:
        batch_cancel(batch=batch, actor=actor_of(request))
    except GatewayError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request, f"Batch {batch.id} is cancelling: no new lines start; it ends within seconds."
        )
    return redirect_back(request, "console:batches")


def window_in_zone(
    *, start_hour: int, hours: int, zone: ZoneInfo, to: ZoneInfo, now: datetime
) -> str:
    """A daily window read in `zone` ("01:00-06:00 Europe/Berlin"), written in the team's
    time zone `to` as batch windows are, at today's offsets (a DST change moves it by an
    hour until it is set again)."""
    local = now.astimezone(zone).replace(hour=start_hour, minute=0, second=0, microsecond=0)
    start = local.astimezone(to)
    end = start + timedelta(hours=hours)
    return f"{start:%H:%M}-{end:%H:%M}"


def window_applications(viewer: Viewer) -> QuerySet[Application]:
    """The applications whose batch windows the viewer may set: staff any, a team admin
    their team's."""
    qs = applications_visible_to(viewer)
    if not viewer.is_staff:
        qs = qs.filter(team_id=viewer.team_admin_of) if viewer.team_admin_of else qs.none()
    return qs.order_by("slug")


@require_POST
@console_view(manage=True)
def weather_window_use(request: HttpRequest) -> HttpResponse:
    """The capacity-weather page's "Use for <application>": the suggested quiet window
    becomes the application's batch windows (staff: any application, a team admin their
    team's; another's answers 404)."""
    qs = window_applications(viewer_of(request)).select_related("team")
    application = request.POST.get("application", "")
    app = get_object_or_404(qs, pk=int(application) if application.isdigit() else 0)
    back = "/reports/weather/?" + request.POST.get("query", "")
    try:
        start_hour = int(request.POST.get("start_hour", ""))
        hours = int(request.POST.get("hours", ""))
        zone = ZoneInfo(request.POST.get("zone", ""))
        if not (0 <= start_hour <= 23 and 1 <= hours <= 23):
            raise ValueError
    except (ValueError, KeyError):
        messages.error(request, "That batch window suggestion is not valid any more: reload.")
        return redirect(back)
    team_zone = ZoneInfo(app.team.time_zone)
    windows = window_in_zone(
        start_hour=start_hour, hours=hours, zone=zone, to=team_zone, now=timezone.now()
    )
    try:
        application_batch_windows_set(actor=actor_of(request), application=app, windows=windows)
    except AccountError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"Batches of {app.slug} now run {windows} ({app.team.time_zone}, its team's "
            "time zone).",
        )
    return redirect(back)
