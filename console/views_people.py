"""Teams, members and applications: lists in the viewer's scope, create, edit, deactivate.
Staff manage every team; a team admin their own (they cannot create teams)."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounts.selectors import applications_visible_to, members_visible_to, teams_visible_to
from accounts.services import (
    AccountError,
    application_create,
    application_update,
    member_create,
    member_set_active,
    member_update,
    team_create,
    team_update,
)
from console.access import actor_of, console_view, viewer_of
from console.forms import ApplicationForm, MemberCreateForm, MemberEditForm, TeamForm
from console.tables import Column, table

TEAM_COLUMNS = [
    Column("slug", "Slug", "slug"),
    Column("name", "Name", "name"),
    Column("time_zone", "Time zone", "time_zone"),
    Column("members", "Members", "member_count"),
    Column("applications", "Applications", "app_count"),
    Column("actions", ""),
]


@console_view(manage=True)
def team_list(request: HttpRequest) -> HttpResponse:
    qs = teams_visible_to(viewer_of(request)).annotate(
        member_count=Count("members", distinct=True), app_count=Count("applications", distinct=True)
    )
    t = table(request, qs, TEAM_COLUMNS, default_sort="slug")
    return render(request, "console/teams/list.html", {"table": t})


@console_view(staff=True)
def team_create_view(request: HttpRequest) -> HttpResponse:
    form = TeamForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            team = team_create(actor=actor_of(request), **form.cleaned_data)
        except AccountError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Team {team.slug} created.")
            return redirect("console:teams")
    return render(request, "console/form.html", _form_page(form, "New team", "team-form"))


@console_view(manage=True)
def team_edit_view(request: HttpRequest, slug: str) -> HttpResponse:
    team = get_object_or_404(teams_visible_to(viewer_of(request)), slug=slug)
    initial = {"name": team.name, "time_zone": team.time_zone}
    form = TeamForm(
        request.POST if request.method == "POST" else None, initial=initial, editing=True
    )
    if request.method == "POST" and form.is_valid():
        try:
            team_update(actor=actor_of(request), team=team, **form.cleaned_data)
        except AccountError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Team {team.slug} saved.")
            return redirect("console:teams")
    return render(request, "console/form.html", _form_page(form, f"Team {team.slug}", "team-form"))


MEMBER_COLUMNS = [
    Column("email", "Email", "user__email"),
    Column("team", "Team", "team__slug"),
    Column("role", "Role", "role"),
    Column("active", "State", "user__is_active"),
    Column("keys", "Active keys", "key_count"),
    Column("joined", "Joined", "user__date_joined"),
    Column("actions", ""),
]


@console_view(manage=True)
def member_list(request: HttpRequest) -> HttpResponse:
    qs = members_visible_to(viewer_of(request)).annotate(
        key_count=Count("api_keys", filter=Q(api_keys__revoked_at=None))
    )
    q = request.GET.get("q", "").strip()
    if q:
        qs = qs.filter(user__email__icontains=q)
    t = table(request, qs, MEMBER_COLUMNS, default_sort="email")
    return render(request, "console/members/list.html", {"table": t, "q": q})


@console_view(manage=True)
def member_create_view(request: HttpRequest) -> HttpResponse:
    teams = teams_visible_to(viewer_of(request))
    form = MemberCreateForm(request.POST if request.method == "POST" else None, teams=teams)
    if request.method == "POST" and form.is_valid():
        try:
            member = member_create(actor=actor_of(request), **form.cleaned_data)
        except AccountError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"{member.user.email} added to {member.team.slug}.")
            return redirect("console:members")
    return render(request, "console/form.html", _form_page(form, "New member", "member-form"))


@console_view(manage=True)
def member_edit_view(request: HttpRequest, pk: int) -> HttpResponse:
    viewer = viewer_of(request)
    member = get_object_or_404(members_visible_to(viewer), pk=pk)
    _refuse_staff_target(viewer, member)
    form = MemberEditForm(
        request.POST if request.method == "POST" else None, initial={"role": member.role}
    )
    if request.method == "POST" and form.is_valid():
        if member.pk == viewer.member_id and not viewer.is_staff:
            form.add_error(None, "You cannot change your own role; ask another admin.")
        else:
            member_update(actor=actor_of(request), member=member, role=form.cleaned_data["role"])
            messages.success(request, f"{member.user.email} is now {member.get_role_display()}.")
            return redirect("console:members")
    context = _form_page(form, f"Member {member.user.email}", "member-form")
    context["member"] = member
    return render(request, "console/members/edit.html", context)


@require_POST
@console_view(manage=True)
def member_active_view(request: HttpRequest, pk: int, active: bool) -> HttpResponse:
    viewer = viewer_of(request)
    member = get_object_or_404(members_visible_to(viewer), pk=pk)
    _refuse_staff_target(viewer, member)
    if member.pk == viewer.member_id:
        messages.error(request, "You cannot deactivate yourself.")
        return redirect("console:members")
    member_set_active(actor=actor_of(request), member=member, active=active)
    if active:
        messages.success(request, f"{member.user.email} is active again.")
    else:
        messages.success(
            request,
            f"{member.user.email} is deactivated: they cannot log in and their keys stop "
            "working within seconds.",
        )
    return redirect("console:members")


def _refuse_staff_target(viewer: object, member: object) -> None:
    """A team admin manages their team's members, but never an admin (staff) who happens to
    be a member of it."""
    if member.user.is_staff and not viewer.is_staff:  # type: ignore[attr-defined]
        raise PermissionDenied("Only an admin may change another admin.")


APP_COLUMNS = [
    Column("slug", "Slug", "slug"),
    Column("name", "Name", "name"),
    Column("team", "Team", "team__slug"),
    Column("routes", "Routes"),
    Column("priority", "Priority", "default_priority"),
    Column("fallback", "Fallback", "fallback"),
    Column("ceilings", "max_tokens / n"),
    Column("actions", ""),
]


@console_view(manage=True)
def application_list(request: HttpRequest) -> HttpResponse:
    qs = applications_visible_to(viewer_of(request)).prefetch_related("routes")
    t = table(request, qs, APP_COLUMNS, default_sort="slug")
    return render(request, "console/applications/list.html", {"table": t})


def _app_values(data: dict) -> dict:
    return {k: v for k, v in data.items() if k not in ("routes", "team", "slug")}


@console_view(manage=True)
def application_create_view(request: HttpRequest) -> HttpResponse:
    teams = teams_visible_to(viewer_of(request))
    form = ApplicationForm(request.POST if request.method == "POST" else None, teams=teams)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            app = application_create(
                actor=actor_of(request),
                team=data["team"],
                slug=data["slug"],
                routes=list(data["routes"]),
                **_app_values(data),
            )
        except AccountError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Application {app.slug} created.")
            return redirect("console:applications")
    page = _form_page(form, "New application", "application-form")
    return render(request, "console/form.html", page)


@console_view(manage=True)
def application_edit_view(request: HttpRequest, slug: str) -> HttpResponse:
    viewer = viewer_of(request)
    if not viewer.is_staff:
        qs = applications_visible_to(viewer).filter(team_id=viewer.team_admin_of)
    else:
        qs = applications_visible_to(viewer)
    app = get_object_or_404(qs, slug=slug)
    initial = {
        "name": app.name,
        "routes": list(app.routes.all()),
        "default_priority": app.default_priority,
        "fallback": app.fallback,
        "default_max_tokens": app.default_max_tokens,
        "max_tokens_ceiling": app.max_tokens_ceiling,
        "clamp_max_tokens": app.clamp_max_tokens,
        "max_n": app.max_n,
        "batch_windows": app.batch_windows,
        "cache_ttl_seconds": app.cache_ttl_seconds,
    }
    form = ApplicationForm(
        request.POST if request.method == "POST" else None,
        initial=initial,
        teams=teams_visible_to(viewer),
        editing=True,
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            application_update(
                actor=actor_of(request),
                application=app,
                routes=list(data["routes"]),
                **_app_values(data),
            )
        except AccountError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Application {app.slug} saved.")
            return redirect("console:applications")
    page = _form_page(form, f"Application {app.slug}", "application-form")
    return render(request, "console/form.html", page)


def _form_page(form: object, title: str, testid: str) -> dict:
    return {"form": form, "title": title, "form_id": testid}
