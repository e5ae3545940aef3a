"""Deployments and routes: chains, tiers, prices, concurrency; drain/undrain with a duration
and a reason, enable/disable (staff only: deployments serve every team)."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from console.access import actor_of, console_view, redirect_back, viewer_of
from console.forms import DrainForm
from console.tables import Column, table
from routing.catalog.selectors import deployments_with_routes, routes_with_chains
from routing.catalog.services import RoutingError, deployment_drain, deployment_set_enabled
from routing.models import Deployment

DEPLOYMENT_COLUMNS = [
    Column("name", "Deployment", "name"),
    Column("model", "Model", "model"),
    Column("upstream", "Upstream", "upstream__name"),
    Column("tier", "Tier", "tier"),
    Column("concurrency", "Max in flight", "max_concurrency"),
    Column("context", "Context", "context_window"),
    Column("prices", "USD / 1M in · out", "input_price_per_million"),
    Column("state", "State"),
    Column("actions", ""),
]


@console_view()
def deployment_list(request: HttpRequest) -> HttpResponse:
    t = table(request, deployments_with_routes(), DEPLOYMENT_COLUMNS, default_sort="name")
    return render(
        request,
        "console/deployments/list.html",
        {
            "table": t,
            "routes": routes_with_chains(),
            "drain_form": DrainForm(),
            "may_steer": viewer_of(request).is_staff,
            "now": timezone.now(),
        },
    )


@require_POST
@console_view(staff=True)
def deployment_drain_view(request: HttpRequest, name: str) -> HttpResponse:
    deployment = get_object_or_404(Deployment, name=name)
    form = DrainForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
        messages.error(request, f"Not drained: {errors}")
        return redirect("console:deployments")
    try:
        deployment_drain(
            name=deployment.name,
            minutes=form.cleaned_data["minutes"],
            reason=form.cleaned_data["reason"],
            actor=actor_of(request),
        )
    except RoutingError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"{deployment.name} drained for {form.cleaned_data['minutes']} min: traffic flows "
            "down its chains within seconds.",
        )
    return redirect_back(request, "console:deployments")


@require_POST
@console_view(staff=True)
def deployment_undrain_view(request: HttpRequest, name: str) -> HttpResponse:
    deployment = get_object_or_404(Deployment, name=name)
    deployment_drain(name=deployment.name, minutes=None, actor=actor_of(request))
    messages.success(request, f"{deployment.name} is back in service.")
    return redirect("console:deployments")


@require_POST
@console_view(staff=True)
def deployment_enable_view(request: HttpRequest, name: str, enabled: bool) -> HttpResponse:
    deployment = get_object_or_404(Deployment, name=name)
    deployment_set_enabled(name=deployment.name, enabled=enabled, actor=actor_of(request))
    state = "enabled" if enabled else "disabled: it leaves every chain within seconds"
    messages.success(request, f"{deployment.name} {state}.")
    return redirect("console:deployments")
