"""Usage reports (C13's quotas/usage_report.py; JSON or CSV by content negotiation), calls
(cursor-paginated, newest first; one call with its attempts) in the caller's scope."""

import csv
import io
from datetime import UTC
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.selectors import applications_visible_to, members_visible_to, teams_visible_to
from api import serializers as s
from api.pagination import NewestFirst
from api.permissions import viewer_of
from quotas.usage_report import COLUMNS, ReportError, period_for, team_zone, usage_report
from routing.models import Outcome
from routing.selectors import calls_visible_to


class CSVRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None):
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow([data["group_by"], *(header for _, header in COLUMNS)])
        for row in [*data["rows"], data["totals"]]:
            writer.writerow([row["label"], *(row[attr] for attr, _ in COLUMNS)])
        return out.getvalue().encode()


def _row(row: Any) -> dict[str, Any]:
    return {
        "key": None if row.key is None else str(row.key),
        "label": row.label,
        **{
            name: getattr(row, name)
            for name in (
                "calls",
                "success",
                "errors",
                "capacity_errors",
                "rate_limit_errors",
                "server_errors",
                "timeouts",
                "rejected",
                "fallbacks",
                "tokens_in",
                "tokens_out",
                "p50_ms",
                "p95_ms",
            )
        },
        "cost": str(row.cost),
    }


class UsageReportView(APIView):
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
        filters: dict[str, int] = {}
        for name, qs, field in (
            ("team", teams_visible_to(viewer), "slug"),
            ("application", applications_visible_to(viewer), "slug"),
            ("member", members_visible_to(viewer), "user__email"),
        ):
            if name in q:
                pk = qs.filter(**{field: q[name]}).values_list("pk", flat=True).first()
                if pk is None:
                    raise ValidationError({name: f"No {name} {q[name]!r}."})
                filters[f"{name}_id"] = pk
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


_CALL_FILTERS = [
    OpenApiParameter("member", str, description="member email"),
    OpenApiParameter("application", str, description="application slug"),
    OpenApiParameter("key", str, description="key prefix"),
    OpenApiParameter("model", str, description="the model (route) asked for"),
    OpenApiParameter("deployment", str, description="the deployment that served"),
    OpenApiParameter("outcome", str, enum=Outcome.values),
    OpenApiParameter("fell_back", bool),
    OpenApiParameter("since", str, description="ISO 8601 time"),
    OpenApiParameter("until", str, description="ISO 8601 time"),
]


@extend_schema(parameters=_CALL_FILTERS)
class CallViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Calls in the caller's scope, newest first, with a cursor (`next`/`previous` links)."""

    pagination_class = NewestFirst
    lookup_field = "request_id"
    lookup_value_regex = r"[^/]+"

    def get_serializer_class(self) -> type:
        return s.CallDetailOut if self.action == "retrieve" else s.CallOut

    def get_queryset(self) -> QuerySet:
        qs = calls_visible_to(viewer_of(self.request))
        if self.action == "retrieve":
            return qs.prefetch_related("attempts")
        p = self.request.query_params
        exact = {
            "member": "member_email",
            "application": "application_slug",
            "key": "key_prefix",
            "model": "requested_model",
            "deployment": "served_deployment",
        }
        for param, column in exact.items():
            if p.get(param):
                qs = qs.filter(**{column: p[param]})
        if p.get("outcome"):
            if p["outcome"] not in Outcome.values:
                raise ValidationError({"outcome": f"Must be one of {', '.join(Outcome.values)}."})
            qs = qs.filter(outcome=p["outcome"])
        if p.get("fell_back"):
            if p["fell_back"] not in ("true", "false"):
                raise ValidationError({"fell_back": "Must be true or false."})
            qs = qs.filter(fell_back=p["fell_back"] == "true")
        for param, lookup in (("since", "created_at__gte"), ("until", "created_at__lt")):
            if p.get(param):
                try:
                    moment = parse_datetime(p[param])
                except ValueError:
                    moment = None
                if moment is None:
                    raise ValidationError({param: "Must be an ISO 8601 date and time."})
                if timezone.is_naive(moment):
                    moment = timezone.make_aware(moment, UTC)
                qs = qs.filter(**{lookup: moment})
        return qs
