"""Reports: usage (with CSV and time-series charts), requested vs served, capacity weather.
Every number comes from the rollups in the viewer's scope (reports/usage.py,
reports/capacity_weather.py); these views only read the query string and render."""

from dataclasses import dataclass
from datetime import date
from typing import Any
from zoneinfo import ZoneInfo

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.dateparse import parse_date

from accounts.selectors import Viewer, applications_visible_to, teams_visible_to
from console.access import console_view, viewer_of
from console.charts import heat_colour
from console.csv_export import csv_response
from console.series_charts import series_charts
from console.views_batches import window_applications
from reports.capacity_weather import DAYS, capacity_weather
from reports.requested_vs_served import downgrades_by_application, requested_vs_served
from reports.usage import (
    COLUMNS,
    GROUPS,
    PERIODS,
    Period,
    ReportError,
    period_for,
    team_zone,
    usage_report,
    usage_series,
)


@dataclass
class Scope:
    """What the query string asked for, checked against the viewer's scope."""

    period: Period
    team_id: int | None
    application_id: int | None
    params: dict[str, str]


def _scope(request: HttpRequest, viewer: Viewer) -> Scope:
    q = request.GET
    team_id = application_id = None
    if q.get("team"):
        team_id = (
            teams_visible_to(viewer).filter(slug=q["team"]).values_list("pk", flat=True).first()
        )
        if team_id is None:
            raise ReportError(f"No team {q['team']!r} that you can see.")
    if q.get("application"):
        application_id = (
            applications_visible_to(viewer)
            .filter(slug=q["application"])
            .values_list("pk", flat=True)
            .first()
        )
        if application_id is None:
            raise ReportError(f"No application {q['application']!r} that you can see.")
    zone = team_zone(team_id or viewer.team_id)
    since, until = _day(q.get("since")), _day(q.get("until"))
    period_name = q.get("period") or "week"
    if period_name == "custom" and (since is None or until is None):
        raise ReportError("Give a first and a last day (YYYY-MM-DD) for a custom period.")
    period = period_for(period=period_name, zone=zone, now=timezone.now(), since=since, until=until)
    params = {
        k: v for k, v in q.items() if k in ("period", "since", "until", "team", "application")
    }
    return Scope(period, team_id, application_id, params)


def _day(value: str | None) -> date | None:
    if not value:
        return None
    try:
        day = parse_date(value)
    except ValueError:
        day = None
    if day is None:
        raise ReportError(f"{value!r} is not a day: use YYYY-MM-DD.")
    return day


def _common(request: HttpRequest, viewer: Viewer) -> dict[str, Any]:
    return {
        "periods": PERIODS,
        "teams": list(teams_visible_to(viewer).values_list("slug", flat=True))
        if viewer.is_staff
        else [],
        "applications": list(applications_visible_to(viewer).values_list("slug", flat=True)),
        "q": request.GET,
    }


def _error(request: HttpRequest, template: str, viewer: Viewer, exc: ReportError) -> HttpResponse:
    context = _common(request, viewer) | {"error": str(exc)}
    return render(request, template, context, status=400)


@console_view()
def usage_report_view(request: HttpRequest) -> HttpResponse:
    viewer = viewer_of(request)
    group_by = request.GET.get("group_by") or ("member" if viewer.can_manage else "route")
    try:
        scope = _scope(request, viewer)
        report = usage_report(
            viewer=viewer,
            group_by=group_by,
            period=scope.period,
            team_id=scope.team_id,
            application_id=scope.application_id,
        )
    except ReportError as exc:
        return _error(request, "console/reports/usage.html", viewer, exc)
    if request.GET.get("format") == "csv":
        rows = [[r.label, *r.cells()] for r in [*report.rows, report.totals]]
        name = f"sluice-usage-{group_by}-{scope.period.start:%Y%m%d}-{scope.period.end:%Y%m%d}.csv"
        return csv_response(name, [group_by, *(h for _, h in COLUMNS)], rows)
    series = usage_series(viewer=viewer, period=scope.period, team_id=scope.team_id)
    charts = series_charts(series)
    context = _common(request, viewer) | {
        "report": report,
        "group_by": group_by,
        "groups": list(GROUPS),
        "columns": COLUMNS,
        "period": scope.period,
        "csv_query": {**scope.params, "group_by": group_by, "format": "csv"},
        "charts": charts,
        "series": series,
    }
    return render(request, "console/reports/usage.html", context)


@console_view()
def served_view(request: HttpRequest) -> HttpResponse:
    """Requested vs served: the route x deployment matrix and downgrade rates."""
    viewer = viewer_of(request)
    try:
        scope = _scope(request, viewer)
        matrix = requested_vs_served(
            viewer=viewer,
            period=scope.period,
            application_id=scope.application_id,
            team_id=scope.team_id,
        )
    except ReportError as exc:
        return _error(request, "console/reports/served.html", viewer, exc)
    rows = [
        {
            "route": route,
            "total": matrix.route_totals[route],
            "cells": [
                (matrix.counts.get((route, d), 0), matrix.share(route, d))
                for d in matrix.deployments
            ],
            "downgrade": matrix.downgrade_rate(route),
        }
        for route in matrix.routes
    ]
    by_app = []
    if scope.application_id is None:
        by_app = downgrades_by_application(viewer=viewer, period=scope.period)
    if request.GET.get("format") == "csv":
        header = ["route", "calls served", *matrix.deployments, "downgrade rate"]
        body = [
            [r["route"], r["total"], *(n for n, _ in r["cells"]), f"{r['downgrade']:.4f}"]
            for r in rows
        ]
        return csv_response(f"sluice-served-{scope.period.start:%Y%m%d}.csv", header, body)
    context = _common(request, viewer) | {
        "matrix": matrix,
        "rows": rows,
        "by_app": by_app,
        "period": scope.period,
        "csv_query": {**scope.params, "format": "csv"},
    }
    return render(request, "console/reports/served.html", context)


@console_view(manage=True)
def weather_view(request: HttpRequest) -> HttpResponse:
    """Capacity weather: who may see team-wide traffic (staff, team admins) only."""
    viewer = viewer_of(request)
    try:
        hours = int(request.GET.get("hours") or 5)
        if not 1 <= hours <= 23:
            raise ValueError
    except ValueError:
        hours = 5
    zone_name = request.GET.get("zone", "")
    try:
        zone = ZoneInfo(zone_name) if zone_name else team_zone(viewer.team_id)
    except (KeyError, ValueError):
        zone = team_zone(viewer.team_id)
    weather = capacity_weather(viewer=viewer, zone=zone, now=timezone.now(), window_hours=hours)
    maps = []
    for w in weather:
        quiet = set()
        if w.quietest:
            quiet = {(w.quietest.start_hour + k) % 24 for k in range(w.quietest.hours)}
        maps.append(
            {
                "weather": w,
                "rows": [
                    (
                        DAYS[day],
                        [
                            (cell, heat_colour(cell.share), hour in quiet)
                            for hour, cell in enumerate(w.grid[day])
                        ],
                    )
                    for day in range(7)
                ],
            }
        )
    context = {
        "maps": maps,
        "hours": hours,
        "zone": zone,
        "hour_labels": [f"{h:02d}" for h in range(24)],
        "window_apps": list(window_applications(viewer)[:200]),  # "Use for <application>"
    }
    return render(request, "console/reports/weather.html", context)
