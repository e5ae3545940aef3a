"""Who may open a console page: every view is wrapped by `console_view`.

Anonymous visitors go to the login page; a role that may never take an action gets 403;
objects out of the viewer's scope are looked up through `*_visible_to` querysets and so
answer 404 (their existence is not revealed).
"""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme

from accounts.selectors import Viewer, viewer_for
from accounts.services import Actor

View = Callable[..., HttpResponse]


def console_view(*, manage: bool = False, staff: bool = False) -> Callable[[View], View]:
    """`manage`: staff or a team admin only; `staff`: staff only. Others get 403."""

    def wrap(view: View) -> View:
        @wraps(view)
        def run(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            viewer = viewer_of(request)
            if not viewer.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if staff and not viewer.is_staff:
                raise PermissionDenied("Only an admin may do this.")
            if manage and not viewer.can_manage:
                raise PermissionDenied("Only an admin or a team admin may do this.")
            return view(request, *args, **kwargs)

        return run

    return wrap


def viewer_of(request: HttpRequest) -> Viewer:
    """The request's viewer, worked out once per request."""
    viewer = getattr(request, "_sluice_viewer", None)
    if viewer is None:
        viewer = viewer_for(request.user)
        request._sluice_viewer = viewer  # type: ignore[attr-defined]
    return viewer


def actor_of(request: HttpRequest) -> Actor:
    return Actor.of(viewer_of(request))


def redirect_back(request: HttpRequest, default: str) -> HttpResponse:
    """To the form's `next` if it is a page of this console, else to `default` (a URL
    name): never to another site (`next=https://evil.example/`, `//evil.example`)."""
    back = safe_next(request, request.POST.get("next", ""))
    return redirect(back or default)


def safe_next(request: HttpRequest, value: str) -> str:
    """`value` when it is a page of this console, else "" (never another site)."""
    if value and url_has_allowed_host_and_scheme(
        value, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return value
    return ""
