"""Roles for the API, from accounts/selectors.py (the console's rules): an object out of a
caller's scope is looked up through a `*_visible_to` queryset and so answers 404; an action
the caller's role may never take answers 403."""

from typing import Any

from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from accounts.models import AdminAction, ManagementToken
from accounts.selectors import ANONYMOUS, Viewer, viewer_for, viewer_for_token
from accounts.services import Actor


def viewer_of(request: Request) -> Viewer:
    viewer = getattr(request, "_sluice_viewer", None)
    if viewer is None:
        if isinstance(request.auth, ManagementToken):
            viewer = viewer_for_token(request.auth)
        elif request.user is not None:
            viewer = viewer_for(request.user)
        else:
            viewer = ANONYMOUS
        request._sluice_viewer = viewer  # type: ignore[attr-defined]
    return viewer


def actor_of(request: Request) -> Actor:
    return Actor.of(viewer_of(request), via=AdminAction.Via.API)


def require(allowed: bool, message: str) -> None:
    if not allowed:
        raise PermissionDenied(message)


def require_staff(viewer: Viewer) -> None:
    require(viewer.is_staff, "Only an admin may do this.")


def require_manager(viewer: Viewer, team_id: int | None = None) -> None:
    """An admin, or the admin of `team_id` (of any team when None)."""
    if team_id is None:
        require(viewer.can_manage, "Only an admin or a team admin may do this.")
    else:
        require(viewer.manages_team(team_id), "Only an admin or this team's admin may do this.")


class HasRole(BasePermission):
    """Authenticated, with a role: admin, team admin or member."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.user is None and request.auth is None:
            return False  # DRF answers 401: not authenticated
        if viewer_of(request).role == "anonymous":
            raise PermissionDenied("Your account has no role in any team.")
        return True


class IsManager(BasePermission):
    """An admin or a team admin (members may never do this: 403)."""

    message = "Only an admin or a team admin may do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return viewer_of(request).can_manage
