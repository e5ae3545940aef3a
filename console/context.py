"""What every console page shows around its content: the viewer and their role, the
navigation for that role, and the capacity alert."""

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.urls import reverse

from console.access import viewer_of
from routing.catalog.selectors import capacity_alerts

ROLE_LABELS = {"admin": "Admin", "team_admin": "Team admin", "member": "Member"}


def _nav(role: str) -> list[tuple[str, str, str]]:
    """(url name, label, test id) for the viewer's role."""
    items = [("console:overview", "Overview", "nav-overview"), ("console:keys", "Keys", "nav-keys")]
    items.append(("console:usage", "My usage", "nav-usage"))
    items += [
        ("console:report_usage", "Reports", "nav-reports"),
        ("console:calls", "Calls", "nav-calls"),
    ]
    items.append(("console:batches", "Batches", "nav-batches"))
    items.append(("console:limits", "Limits", "nav-limits"))
    if role in ("admin", "team_admin"):
        items += [
            ("console:teams", "Teams", "nav-teams"),
            ("console:members", "Members", "nav-members"),
            ("console:applications", "Applications", "nav-applications"),
        ]
    items.append(("console:deployments", "Deployments", "nav-deployments"))
    if role == "admin":
        items.append(("console:config", "Config as code", "nav-config"))
    if role in ("admin", "team_admin"):
        items.append(("console:actions", "Admin actions", "nav-actions"))
    return items


def console(request: HttpRequest) -> dict[str, Any]:
    if not request.path.startswith("/") or request.path.startswith(("/admin/", "/api/")):
        return {}
    viewer = viewer_of(request)
    if not viewer.is_authenticated:
        return {"viewer": viewer}
    return {
        "viewer": viewer,
        "role_label": ROLE_LABELS.get(viewer.role, ""),
        "nav": [
            {
                "href": (href := reverse(name)),
                "label": label,
                "testid": testid,
                "current": request.path == href or (href != "/" and request.path.startswith(href)),
            }
            for name, label, testid in _nav(viewer.role)
        ],
        "capacity_alerts": capacity_alerts(),
        "refresh_seconds": settings.SLUICE_CONSOLE_REFRESH_SECONDS,
        "alert_share": getattr(settings, "SLUICE_CAPACITY_ALERT_SHARE", 0.2),
    }
