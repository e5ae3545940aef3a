"""Who may change what. Every write service calls one of these checks with its `actor`, so
the console, the management API, config apply and `manage.py` cannot disagree: a view may
refuse earlier (a 404 for what the caller cannot see, a nicer form error), never later.

An actor without a viewer is a command run on the machine (or the system itself): it may
do anything. Otherwise:

| change | staff | team admin | member |
|---|---|---|---|
| create a team | yes | no | no |
| edit a team, create or edit its applications and members | yes | their team | no |
| the team's own limits (set or clear) | yes | no | no |
| other limits (key, application, member) | yes | their team, not a staff member | no |
| a member's role or active state | yes | their team's, never a staff user's, never their own | no |
| a key (create, revoke, rotate) | yes | their team's | their own |
| deployments, config apply | yes | no | no |

The member role "admin" is a team admin: a team admin may make another member of their
team one (no more power than their own); nothing but the admin site and single sign-on's
group rules (the config file's `[sso]`, applied by staff) grants staff.
"""

from django.core.exceptions import PermissionDenied

from accounts.selectors import Viewer


class NotAllowed(PermissionDenied):
    """The actor's role may not make this change: 403 in the console and the API."""


def _viewer(actor: object) -> Viewer | None:
    return getattr(actor, "viewer", None)


def _require(allowed: bool, message: str) -> None:
    if not allowed:
        raise NotAllowed(message)


def staff_check(*, actor: object, what: str) -> None:
    """Teams, deployments and config: only an admin of everything (or a command)."""
    viewer = _viewer(actor)
    _require(viewer is None or viewer.is_staff, f"Only an admin may {what}.")


def team_manage_check(*, actor: object, team_id: int | None) -> None:
    """Edit a team, its applications, or add members to it."""
    viewer = _viewer(actor)
    _require(
        viewer is None or viewer.manages_team(team_id),
        "Only an admin or this team's admin may do this.",
    )


def member_change_check(
    *, actor: object, team_id: int, member_id: int, member_is_staff: bool, what: str
) -> None:
    """Change a member's role or active state."""
    viewer = _viewer(actor)
    if viewer is None or viewer.is_staff:
        return
    team_manage_check(actor=actor, team_id=team_id)
    _require(not member_is_staff, "Only an admin may change another admin.")
    _require(member_id != viewer.member_id, f"You cannot {what} yourself; ask another admin.")


def limit_change_check(
    *, actor: object, scope: str, team_id: int | None, member_is_staff: bool = False
) -> None:
    """Set or clear a limit. A team's own limit is what staff give the team: its admin
    may neither lift nor remove it."""
    viewer = _viewer(actor)
    if viewer is None or viewer.is_staff:
        return
    _require(scope != "team", "Only an admin may change a team's own limits.")
    team_manage_check(actor=actor, team_id=team_id)
    _require(not member_is_staff, "Only an admin may change an admin's limits.")


def key_change_check(*, actor: object, member_id: int, team_id: int) -> None:
    """Create, revoke or rotate a key of `member_id`."""
    viewer = _viewer(actor)
    if viewer is None or member_id == viewer.member_id:
        return
    _require(
        viewer.manages_team(team_id),
        "Only an admin or the member's team admin may change another member's keys.",
    )
