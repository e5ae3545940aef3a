"""Usage reports (reports/usage.py; JSON or CSV by content negotiation), calls
(cursor-paginated, newest first; one call with its attempts) in the caller's scope."""

import csv
import io
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import viewsets
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.selectors import (
    Viewer,
    applications_visible_to,
    members_visible_to,
    teams_visible_to,
)
from api import serializers as s
from api.base import NoOptions
from api.permissions import viewer_of
from core.csv_cells import neutralise
from reports.call_explorer import (
    CallFilter,
    ExplorerError,
    agents_calling,
    call_find,
    call_page,
    call_timeline,
)
from reports.usage import COLUMNS, ReportError, period_for, team_zone, usage_report


class CSVRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None):
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow([data["group_by"], *(header for _, header in COLUMNS)])
        for row in [*data["rows"], data["totals"]]:
            # Labels are key names, emails, slugs: formula-like text is made text.
            writer.writerow(
                [neutralise(row["label"]), *(neutralise(row[attr]) for attr, _ in COLUMNS)]
            )
        return out.getvalue().encode()


def _scope_ids(viewer: Viewer, q: dict[str, Any]) -> dict[str, int]:
    """`team`, `application` and `member` filters (slug, slug, email) as ids within what the
    viewer may see; one they may not see is unknown to them (400, like a typo)."""
    ids: dict[str, int] = {}
    for name, qs, field in (
        ("team", teams_visible_to(viewer), "slug"),
        ("application", applications_visible_to(viewer), "slug"),
        ("member", members_visible_to(viewer), "user__email"),
    ):
        if name in q:
            pk = qs.filter(**{field: q[name]}).values_list("pk", flat=True).first()
            if pk is None:
                raise ValidationError({name: f"No {name} {q[name]!r}."})
            ids[f"{name}_id"] = pk
    return ids


def _row(row: Any) -> dict[str, Any]:
    return {
        "key": None if row.key is None else str(row.key),
        "label": row.label,
        **{attr: getattr(row, attr) for attr, _ in COLUMNS},
        "errors": row.errors,
        "cost": str(row.cost),  # a decimal string, exact
    }


class UsageReportView(NoOptions, APIView):
    renderer_classes = [JSONRenderer, CSVRenderer]

    @extend_schema(
        parameters=[s.UsageQuery],
        responses={
            (200, "application/json"): s.UsageReportOut,
            (200, "text/csv"): OpenApiResponse(response=str, description="the same rows as CSV"),
        },
    )
    def get(self, request: Request) -> Response:
        """Usage in the caller's scope grouped by team, application, member, key, route or
        deployment, over a day, week, month (in the team's time zone) or custom days.
        `Accept: text/csv` (or `?format=csv`) gives CSV."""
        query = s.UsageQuery(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        q = query.validated_data
        viewer = viewer_of(request)
        filters = _scope_ids(viewer, q)
        zone = team_zone(filters.get("team_id") or viewer.team_id)
        try:
            period = period_for(
                period=q["period"],
                zone=zone,
                now=timezone.now(),
                since=q.get("since"),
                until=q.get("until"),
            )
            report = usage_report(viewer=viewer, group_by=q["group_by"], period=period, **filters)
        except ReportError as exc:
            raise ValidationError(str(exc)) from None
        return Response(
            {
                "group_by": report.group_by,
                "period": period.label,
                "start": period.start,
                "end": period.end,
                "rows": [_row(r) for r in report.rows],
                "totals": _row(report.totals),
            }
        )


class CallAgents(NoOptions, APIView):
    @extend_schema(
        operation_id="calls_agents",
        parameters=[s.CallQuery],
        responses={200: s.AgentRowOut(many=True)},
    )
    def get(self, request: Request) -> Response:
        """Which agents call what: the matching calls (the call explorer's filters) grouped
        by user agent, route and client and upstream protocol."""
        query = s.CallQuery(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        q = dict(query.validated_data)
        viewer = viewer_of(request)
        filters = _call_filter(q, _scope_ids(viewer, q))
        rows = agents_calling(viewer=viewer, filters=filters)
        return Response([s.AgentRowOut(r).data for r in rows])


def _call_filter(q: dict[str, Any], ids: dict[str, Any]) -> CallFilter:
    return CallFilter(
        since=q.get("since"),
        until=q.get("until"),
        key_prefix=q.get("key", ""),
        route=q.get("model", ""),
        deployment=q.get("deployment", ""),
        outcome=q.get("outcome", ""),
        priority=q.get("priority", ""),
        stream=q.get("stream"),
        fell_back=q.get("fell_back"),
        min_latency_ms=q.get("min_latency_ms"),
        client_protocol=q.get("client_protocol", ""),
        upstream_protocol=q.get("upstream_protocol", ""),
        user_agent=q.get("user_agent", ""),
        **ids,
    )


class CallList(NoOptions, APIView):
    """Calls in the caller's scope through the call explorer (reports/call_explorer.py):
    its filters, newest first, a keyset cursor (`next`)."""

    @extend_schema(
        operation_id="calls_list", parameters=[s.CallQuery], responses={200: s.CallPageOut}
    )
    def get(self, request: Request) -> Response:
        query = s.CallQuery(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        q = dict(query.validated_data)
        viewer = viewer_of(request)
        ids = _scope_ids(viewer, q)
        filters = _call_filter(q, ids)
        try:
            page = call_page(
                viewer=viewer, filters=filters, cursor=q.get("cursor"), size=q["limit"]
            )
        except ExplorerError as exc:
            param = "cursor" if q.get("cursor") else "outcome"
            raise ValidationError({param: str(exc)}) from None
        next_url = None
        if page.next_cursor:
            params = request.query_params.copy()
            params["cursor"] = page.next_cursor
            next_url = request.build_absolute_uri(f"{request.path}?{params.urlencode()}")
        return Response({"next": next_url, "results": s.CallOut(page.calls, many=True).data})


class CallViewSet(NoOptions, viewsets.ViewSet):
    """One call in the caller's scope with its attempts, placed in time."""

    lookup_field = "request_id"
    lookup_value_regex = r"[^/]+"

    @extend_schema(responses={200: s.CallDetailOut})
    def retrieve(self, request: Request, request_id: str) -> Response:
        call = call_find(viewer=viewer_of(request), request_id=request_id)
        if call is None:
            raise NotFound(f"No call {request_id!r}.")
        steps = [step.__dict__ for step in call_timeline(call)]
        return Response({**s.CallOut(call).data, "attempts": s.AttemptOut(steps, many=True).data})
