"""Requested vs served: which deployment answered the calls for each route (the model
asked for), each route's downgrade rate, and the downgrades per application. Read
from the rollups in the viewer's scope, like the usage report (reports/usage.py).
"""

from dataclasses import dataclass
from typing import Any

from django.db.models import Aggregate, F, Sum

from accounts.selectors import Viewer
from reports.usage import Period, _labels, _parts, _summed

# Calls a deployment answered, and how many of them fell back to it.
_SERVED_SUMS: dict[str, Aggregate] = {"n": Sum(F("requests") - F("errors")), "fb": Sum("fallbacks")}


@dataclass
class Matrix:
    routes: list[str]
    deployments: list[str]
    counts: dict[tuple[str, str], int]  # (route, deployment) -> calls served
    route_totals: dict[str, int]
    fallbacks: dict[str, int]  # route -> calls served by a deployment other than the first

    def share(self, route: str, deployment: str) -> float:
        total = self.route_totals.get(route, 0)
        return self.counts.get((route, deployment), 0) / total if total else 0.0

    def downgrade_rate(self, route: str) -> float:
        total = self.route_totals.get(route, 0)
        return self.fallbacks.get(route, 0) / total if total else 0.0


def requested_vs_served(
    *, viewer: Viewer, period: Period, application_id: int | None = None, team_id: int | None = None
) -> Matrix:
    """Route (the model asked for) x deployment (the one that answered): calls served, each
    route's share per deployment, and its downgrade rate (served by another than the
    chain's first). Calls no deployment served are left out."""
    parts = _parts(viewer, period, team_id=team_id, application_id=application_id)
    found = _summed(
        (p.rows.exclude(deployment="").exclude(route="") for p in parts),
        ("route", "deployment"),
        _SERVED_SUMS,
    )
    counts: dict[tuple[str, str], int] = {}
    route_totals: dict[str, int] = {}
    fallbacks: dict[str, int] = {}
    for v in found:
        n = int(v["n"] or 0)
        if not n:
            continue
        counts[(v["route"], v["deployment"])] = n
        route_totals[v["route"]] = route_totals.get(v["route"], 0) + n
        fallbacks[v["route"]] = fallbacks.get(v["route"], 0) + int(v["fb"] or 0)
    deployments = sorted(
        {d for _, d in counts},
        key=lambda d: (-sum(n for (_, dd), n in counts.items() if dd == d), d),
    )
    routes = sorted(route_totals, key=lambda r: (-route_totals[r], r))
    return Matrix(routes, deployments, counts, route_totals, fallbacks)


def downgrades_by_application(*, viewer: Viewer, period: Period) -> list[dict[str, Any]]:
    """Per application and route: calls served and how many fell back."""
    found = _summed(
        (p.rows.exclude(deployment="").exclude(route="") for p in _parts(viewer, period)),
        ("application_id", "route"),
        _SERVED_SUMS,
    )
    labels = _labels("application", [v["application_id"] for v in found])
    rows = [
        {
            "application": labels.get(v["application_id"], "(deleted)"),
            "route": v["route"],
            "served": int(v["n"] or 0),
            "fell_back": int(v["fb"] or 0),
            "rate": (v["fb"] or 0) / v["n"] if v["n"] else 0.0,
        }
        for v in found
        if v["n"]
    ]
    rows.sort(key=lambda r: (r["application"], r["route"]))
    return rows
