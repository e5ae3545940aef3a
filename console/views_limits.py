"""Limits: every scope in one table with usage against each limit; edit with `limit_set`'s
meaning (empty: no limit). Staff edit any; a team admin their team's applications, members
and keys (not the team's own limit, which staff set); members only read."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.selectors import Viewer
from console.access import actor_of, console_view, viewer_of
from console.forms import LimitForm, LimitTargetForm
from console.tables import Column, table
from quotas.models import Limit, Scope
from quotas.selectors import LimitTarget, limit_rows, limit_target_find, limits_visible_to
from quotas.services import LIMIT_FIELDS, LimitError, limit_set

LIMIT_COLUMNS = [
    Column("scope", "Scope", "scope"),
    Column("target", "Applies to"),
    Column("rpm", "Requests / min"),
    Column("tpm", "Tokens / min"),
    Column("day", "Tokens today"),
    Column("month", "Tokens this month"),
    Column("cost", "Spend this month"),
    Column("forecast", "Month-end forecast"),
    Column("flight", "In flight"),
    Column("updated", "Changed", "updated_at"),
    Column("actions", ""),
]


@console_view()
def limit_list(request: HttpRequest) -> HttpResponse:
    viewer = viewer_of(request)
    qs = limits_visible_to(viewer)
    scope = request.GET.get("scope", "")
    if scope in Scope.values:
        qs = qs.filter(scope=scope)
    t = table(request, qs, LIMIT_COLUMNS, default_sort="scope")
    rows = limit_rows(t.rows, forecast=True)
    for row in rows:
        row.editable = _may_edit(viewer, row.scope, row.limit)  # type: ignore[attr-defined]
    return render(
        request,
        "console/limits/list.html",
        {
            "table": t,
            "rows": rows,
            "scope": scope,
            "scopes": Scope.choices,
            "target_form": LimitTargetForm(),
        },
    )


def _target(viewer: Viewer, scope: str, name: str) -> LimitTarget:
    """What a limit would apply to, if it is in the viewer's scope (else 404)."""
    found = limit_target_find(scope, name, viewer=viewer)
    if found is None:
        raise Http404(f"No {scope} {name!r} in your scope.")
    return found


def _may_edit(viewer: Viewer, scope: str, target: object) -> bool:
    if viewer.is_staff:
        return True
    return viewer.team_admin_of is not None and scope != Scope.TEAM


@console_view()
def limit_edit(request: HttpRequest) -> HttpResponse:
    viewer = viewer_of(request)
    source = request.POST if request.method == "POST" else request.GET
    target_form = LimitTargetForm(source)
    if not target_form.is_valid():
        messages.error(request, "Choose a scope and the name of what the limit applies to.")
        return redirect("console:limits")
    scope, name = target_form.cleaned_data["scope"], target_form.cleaned_data["name"].strip()
    target = _target(viewer, scope, name)
    if not _may_edit(viewer, scope, target):
        raise PermissionDenied("Your role may not change this limit.")
    existing = Limit.objects.filter(scope=scope, **target.lookup).first()
    initial = {f: getattr(existing, f) for f in LIMIT_FIELDS} if existing else {}
    form = LimitForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and form.is_valid():
        # The form holds every limit: an empty field means no limit (0 in limit_set's terms).
        values = {f: (v if v is not None else 0) for f, v in form.cleaned_data.items()}
        if existing is None and not any(values.values()):
            messages.info(request, f"{scope} {name} has no limits; nothing to save.")
            return redirect("console:limits")
        try:
            limit_set(scope=scope, name=target.name, actor=actor_of(request), **values)
        except LimitError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Limits of {scope} {name} saved.")
            return redirect("console:limits")
    return render(
        request,
        "console/limits/edit.html",
        {"form": form, "scope": scope, "name": name, "existing": existing},
    )


@require_POST
@console_view(manage=True)
def limit_clear(request: HttpRequest) -> HttpResponse:
    viewer = viewer_of(request)
    target_form = LimitTargetForm(request.POST)
    if not target_form.is_valid():
        raise Http404("No such limit.")
    scope, name = target_form.cleaned_data["scope"], target_form.cleaned_data["name"].strip()
    target = _target(viewer, scope, name)
    if not _may_edit(viewer, scope, target):
        raise PermissionDenied("Your role may not change this limit.")
    limit_set(scope=scope, name=target.name, clear=True, actor=actor_of(request))
    messages.success(request, f"{scope} {name} has no limits now.")
    return redirect("console:limits")
