"""Capacity weather: when is a deployment full? An hour-of-week heatmap (7 x 24, in a time
zone) of capacity-error share and calls over the last weeks, read from the hourly rollups,
and the quietest daily window of a given length: where batch work should go.

The share is capacity errors over upstream attempts at the deployment, attempts estimated
from the rollups as calls it answered plus attempts that failed there
(reports.usage.attempts_sum).
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.db.models import Sum

from accounts.selectors import Viewer
from quotas.selectors import rollups_visible_to
from reports.usage import attempts_sum

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass
class Cell:
    calls: int = 0
    attempts: int = 0
    capacity_errors: int = 0

    @property
    def share(self) -> float | None:
        return self.capacity_errors / self.attempts if self.attempts else None


@dataclass(frozen=True)
class Window:
    start_hour: int  # local hour of day the window opens
    hours: int
    share: float  # capacity errors / attempts inside the window, every day of the week
    calls: int

    @property
    def label(self) -> str:
        end = (self.start_hour + self.hours) % 24
        return f"{self.start_hour:02d}:00–{end:02d}:00"  # noqa: RUF001


@dataclass
class Weather:
    deployment: str
    zone: ZoneInfo
    grid: list[list[Cell]]  # [weekday 0=Monday][hour]
    quietest: Window | None
    peak_share: float | None  # the worst single hour-of-week

    def suggestion(self) -> str:
        if self.quietest is None:
            return "No traffic in these weeks: no batch window to suggest yet."
        text = (
            f"batch window suggestion: {self.quietest.label} {self.zone.key}, "
            f"{self.quietest.share:.1%} capacity errors"
        )
        if self.peak_share is not None:
            text += f" vs {self.peak_share:.1%} at peak"
        return text


def quietest_window(grid: list[list[Cell]], hours: int) -> Window | None:
    """The daily window of `hours` consecutive hours (wrapping midnight) with the lowest
    capacity-error share over all seven days; ties go to the busier window (more evidence),
    then the earlier one. None when no hour saw an attempt."""
    if not 1 <= hours <= 24:
        raise ValueError("A window is 1 to 24 hours long.")
    best: Window | None = None
    for start in range(24):
        attempts = capacity = calls = 0
        for day in grid:
            for h in range(start, start + hours):
                cell = day[h % 24]
                attempts += cell.attempts
                capacity += cell.capacity_errors
                calls += cell.calls
        if not attempts:
            continue
        window = Window(start, hours, capacity / attempts, calls)
        if best is None or (window.share, -window.calls) < (best.share, -best.calls):
            best = window
    return best


_SUMS = {
    "s_requests": Sum("requests"),
    "s_capacity_errors": Sum("capacity_errors"),
    "s_attempts": attempts_sum(),
}


def capacity_weather(
    *,
    viewer: Viewer,
    zone: ZoneInfo,
    now: datetime,
    weeks: int = 4,
    window_hours: int = 5,
    deployments: list[str] | None = None,
) -> list[Weather]:
    """One heatmap per deployment seen in the last `weeks` weeks (or those named)."""
    since = (now - timedelta(weeks=weeks)).replace(minute=0, second=0, microsecond=0)
    qs = rollups_visible_to(viewer).filter(hour__gte=since, hour__lt=now).exclude(deployment="")
    if deployments:
        qs = qs.filter(deployment__in=deployments)
    found = qs.values("hour", "deployment").annotate(**_SUMS).order_by()
    grids: dict[str, list[list[Cell]]] = {}
    for v in found:
        grid = grids.get(v["deployment"])
        if grid is None:  # not setdefault: that would build a 7x24 grid for every row
            grid = grids[v["deployment"]] = [[Cell() for _ in range(24)] for _ in DAYS]
        local = v["hour"].astimezone(zone)
        cell = grid[local.weekday()][local.hour]
        cell.calls += int(v["s_requests"] or 0)
        cell.attempts += int(v["s_attempts"] or 0)
        cell.capacity_errors += int(v["s_capacity_errors"] or 0)
    result = []
    for name in sorted(grids):
        grid = grids[name]
        shares = [c.share for day in grid for c in day if c.share is not None]
        result.append(
            Weather(
                deployment=name,
                zone=zone,
                grid=grid,
                quietest=quietest_window(grid, window_hours),
                peak_share=max(shares) if shares else None,
            )
        )
    return result
