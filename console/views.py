"""The overview (totals and the live capacity board), My usage, and the admin actions log."""

from datetime import UTC, timedelta
from zoneinfo import ZoneInfo

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import never_cache

from accounts.models import Member
from accounts.selectors import admin_actions_visible_to
from console.access import console_view, viewer_of
from console.series_charts import series_charts
from console.tables import Column, table
from quotas.selectors import (
    budget_forecasts_visible_to,
    limit_rows,
    limits_of_member,
    member_usage,
)
from reports.usage import Period, usage_series
from routing.catalog.selectors import deployment_board, recent_calls, usage_totals


@console_view()
def overview(request: HttpRequest) -> HttpResponse:
    viewer = viewer_of(request)
    now = timezone.now()
    context = {
        "hour": usage_totals(viewer=viewer, since=now - timedelta(hours=1)),
        "day": usage_totals(viewer=viewer, since=now - timedelta(days=1)),
        "board": deployment_board(now=now),
        "budgets": budget_forecasts_visible_to(viewer),
    }
    # The last 24 rollup hours (the current one included), in UTC so every bucket is a
    # whole rollup hour whatever the viewer's zone; at most 24 hours of rollups are read.
    end = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    period = Period(end - timedelta(hours=24), end, ZoneInfo("UTC"), "last 24 hours (UTC)")
    series = usage_series(viewer=viewer, period=period)
    context |= {
        "period": period,
        "series": series,
        # Capacity-error shares are about shared deployments: shown to those who manage.
        "charts": series_charts(series, with_capacity=viewer.can_manage),
    }
    return render(request, "console/overview.html", context)


@never_cache
@console_view()
def board(request: HttpRequest) -> HttpResponse:
    """The capacity board's rows alone: what the page's script swaps in every few seconds."""
    return render(request, "console/partials/board.html", {"board": deployment_board()})


@never_cache
@console_view()
def alerts(request: HttpRequest) -> HttpResponse:
    """The capacity alert banner alone (refreshed on every page)."""
    return render(request, "console/partials/alerts.html")


@console_view()
def usage(request: HttpRequest) -> HttpResponse:
    viewer = viewer_of(request)
    member = (
        Member.objects.select_related("user", "team").filter(pk=viewer.member_id).first()
        if viewer.member_id
        else None
    )
    context: dict = {"member": member}
    if member is not None:
        days = member_usage(member=member, days=30)
        context |= {
            "days": list(reversed(days)),
            "totals": {
                "calls": sum(d.calls for d in days),
                "tokens": sum(d.tokens for d in days),
                "cost": sum(d.cost for d in days),
            },
            "peak_calls": max((d.calls for d in days), default=0),
            "limits": limit_rows(list(limits_of_member(member)), forecast=True),
            "calls": list(recent_calls(viewer=viewer, member_id=member.pk, limit=50)),
        }
    return render(request, "console/usage.html", context)


ACTION_COLUMNS = [
    Column("at", "When", "at"),
    Column("actor", "Who", "actor_label"),
    Column("via", "Via", "via"),
    Column("action", "Action", "action"),
    Column("object", "Object", "object_repr"),
    Column("change", "Before → after"),
]


@console_view(manage=True)
def actions(request: HttpRequest) -> HttpResponse:
    qs = admin_actions_visible_to(viewer_of(request))
    action = request.GET.get("action", "").strip()
    if action:
        qs = qs.filter(action__startswith=action)
    t = table(request, qs, ACTION_COLUMNS, default_sort="-at", per_page=50)
    return render(request, "console/actions.html", {"table": t, "action": action})
