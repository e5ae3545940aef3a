"""The call explorer: filter calls, look one up by X-Sluice-Request-Id, open a call with the
timeline of its attempts, download any filter as CSV (streamed). Reads go through
reports/call_explorer.py in the viewer's scope; a call out of scope is 404."""

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.models import PriorityClass
from accounts.selectors import (
    Viewer,
    applications_visible_to,
    members_visible_to,
    teams_visible_to,
)
from console.access import console_view, viewer_of
from console.csv_export import csv_stream
from console.tables import Column, table
from reports.call_explorer import (
    CSV_COLUMNS,
    CallFilter,
    ExplorerError,
    agents_calling,
    call_find,
    call_page,
    call_rows,
    call_timeline,
)
from reports.usage import team_zone
from routing.models import Outcome, Upstream

# Which agents call what: grouped in Python (by the user agent's product), sorted and paged
# like every console table.
AGENT_COLUMNS = [
    Column("agent", "Agent", "agent"),
    Column("route", "Route", "route"),
    Column("client_protocol", "Client → upstream protocol", "client_protocol"),
    Column("calls", "Calls", "calls"),
    Column("failed", "Failed", "failed"),
    Column("degraded", "Degraded", "degraded"),
]

FILTER_PARAMS = (
    "since",
    "until",
    "team",
    "application",
    "member",
    "key",
    "route",
    "deployment",
    "outcome",
    "priority",
    "stream",
    "fell_back",
    "min_latency",
    "client_protocol",
    "upstream_protocol",
    "user_agent",
)


def _moment(value: str, zone: ZoneInfo, name: str) -> datetime:
    try:
        moment = parse_datetime(value)
    except ValueError:
        moment = None
    if moment is None:
        raise ExplorerError(f"{name}: {value!r} is not a date and time (YYYY-MM-DDTHH:MM).")
    return timezone.make_aware(moment, zone) if timezone.is_naive(moment) else moment


def _yes_no(value: str, name: str) -> bool | None:
    if value in ("", "any"):
        return None
    if value in ("yes", "no"):
        return value == "yes"
    raise ExplorerError(f"{name}: use yes or no.")


def _pk(qs: Any, field: str, value: str, what: str) -> int:
    pk = qs.filter(**{field: value}).values_list("pk", flat=True).first()
    if pk is None:
        raise ExplorerError(f"No {what} {value!r} that you can see.")
    return pk


def parse_filters(params: Any, viewer: Viewer, zone: ZoneInfo) -> CallFilter:
    """The query string as a CallFilter; names (team, application, member) are looked up in
    the viewer's scope, so naming someone out of scope is an error, not a leak."""
    p = {k: (params.get(k) or "").strip() for k in FILTER_PARAMS}
    min_latency = None
    if p["min_latency"]:
        try:
            min_latency = float(p["min_latency"])
        except ValueError:
            raise ExplorerError("min latency: a number of milliseconds.") from None
    if p["outcome"] and p["outcome"] not in Outcome.values:
        raise ExplorerError(f"Unknown outcome {p['outcome']!r}.")
    if p["priority"] and p["priority"] not in PriorityClass.values:
        raise ExplorerError(f"Unknown priority class {p['priority']!r}.")
    return CallFilter(
        since=_moment(p["since"], zone, "from") if p["since"] else None,
        until=_moment(p["until"], zone, "to") if p["until"] else None,
        team_id=_pk(teams_visible_to(viewer), "slug", p["team"], "team") if p["team"] else None,
        application_id=_pk(applications_visible_to(viewer), "slug", p["application"], "application")
        if p["application"]
        else None,
        member_id=_pk(members_visible_to(viewer), "user__email", p["member"], "member")
        if p["member"]
        else None,
        key_prefix=p["key"],
        route=p["route"],
        deployment=p["deployment"],
        outcome=p["outcome"],
        priority=p["priority"],
        stream=_yes_no(p["stream"], "streaming"),
        fell_back=_yes_no(p["fell_back"], "fell back"),
        min_latency_ms=min_latency,
        client_protocol=p["client_protocol"],
        upstream_protocol=p["upstream_protocol"],
        user_agent=p["user_agent"],
    )


@console_view()
def call_list(request: HttpRequest) -> HttpResponse:
    viewer = viewer_of(request)
    wanted = (request.GET.get("request_id") or "").strip()
    if wanted:
        found = call_find(viewer=viewer, request_id=wanted)
        if found is not None:
            return redirect("console:call_detail", request_id=found.request_id)
    zone = team_zone(viewer.team_id)
    params = request.GET
    if not params:
        # A first visit shows the last 24 hours (in the form, editable): a filter that
        # matches nothing then scans a day of calls, not the whole trail.
        params = QueryDict(mutable=True)
        params["since"] = f"{timezone.now().astimezone(zone) - timedelta(days=1):%Y-%m-%dT%H:%M}"
    context: dict[str, Any] = {
        "q": params,
        "zone": zone,
        "outcomes": Outcome.values,
        "priorities": PriorityClass.values,
        "protocols": Upstream.Kind.values,
        "may_pick_member": viewer.can_manage,
        "teams": list(teams_visible_to(viewer).values_list("slug", flat=True))
        if viewer.is_staff
        else [],
        "not_found": wanted,
    }
    try:
        filters = parse_filters(params, viewer, zone)
        if params.get("view") == "agents":  # which agents call what, for the same filters
            query = {k: params[k] for k in FILTER_PARAMS if params.get(k)}
            agents = agents_calling(viewer=viewer, filters=filters)
            agents_table = table(
                request, agents, AGENT_COLUMNS, default_sort="-calls", tiebreak="agent"
            )
            context |= {"agents": agents, "table": agents_table, "filter_query": query}
            return render(request, "console/calls/list.html", context)
        page = call_page(viewer=viewer, filters=filters, cursor=params.get("cursor") or None)
    except ExplorerError as exc:
        return render(request, "console/calls/list.html", context | {"error": str(exc)}, status=400)
    query = {k: params[k] for k in FILTER_PARAMS if params.get(k)}
    context |= {
        "page": page,
        "filter_query": query,
        "next_query": {**query, "cursor": page.next_cursor} if page.next_cursor else None,
        "csv_query": query,
        "first_page": not params.get("cursor"),
    }
    return render(request, "console/calls/list.html", context)


@console_view()
def call_export(request: HttpRequest) -> HttpResponse:
    """Every call of the filter as CSV, streamed in keyset batches."""
    viewer = viewer_of(request)
    try:
        filters = parse_filters(request.GET, viewer, team_zone(viewer.team_id))
    except ExplorerError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    name = f"sluice-calls-{timezone.now():%Y%m%d-%H%M%S}.csv"
    return csv_stream(name, list(CSV_COLUMNS), call_rows(viewer=viewer, filters=filters))


@console_view()
def call_detail(request: HttpRequest, request_id: str) -> HttpResponse:
    viewer = viewer_of(request)
    call = call_find(viewer=viewer, request_id=request_id)
    if call is None:
        raise Http404("No such call in your scope.")
    steps = call_timeline(call)
    total = max([call.latency_ms, *(s.offset_ms + s.duration_ms for s in steps)], default=0) or 1
    bars = [
        {
            "step": s,
            "left": 100 * s.offset_ms / total,
            "width": max(0.5, 100 * s.duration_ms / total) if s.sent else 0.5,
        }
        for s in steps
    ]
    return render(
        request,
        "console/calls/detail.html",
        {"call": call, "steps": steps, "bars": bars, "zone": team_zone(viewer.team_id)},
    )
