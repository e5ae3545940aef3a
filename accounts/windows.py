"""Batch windows: when an application's (or team's) batches may run, in the team's time zone.

Written as "HH:MM-HH:MM" (several, comma separated; a window may cross midnight, e.g.
"22:00-06:00"); "" or "any" means at any time. Pure, so the config file, the admin and the
batch runner all read them the same way.
"""

import re
from dataclasses import dataclass
from datetime import datetime, time
from zoneinfo import ZoneInfo

ANY = "any"
_WINDOW = re.compile(r"(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})")


@dataclass(frozen=True)
class Window:
    start: time
    end: time  # exclusive; end <= start crosses midnight

    def contains(self, moment: time) -> bool:
        if self.start < self.end:
            return self.start <= moment < self.end
        return moment >= self.start or moment < self.end  # across midnight (or all day)


def parse_windows(text: str | list[str]) -> tuple[Window, ...]:
    """The windows of a setting; () means any time. ValueError names a bad one."""
    items = text if isinstance(text, list) else text.split(",")
    items = [item.strip() for item in items if item.strip()]
    if not items or [item.lower() for item in items] == [ANY]:
        return ()
    windows = []
    for item in items:
        match = _WINDOW.fullmatch(item)
        if match is None:
            raise ValueError(f"batch window {item!r} must look like 00:00-06:00 (or be 'any')")
        h1, m1, h2, m2 = (int(g) for g in match.groups())
        if h1 > 23 or h2 > 24 or m1 > 59 or m2 > 59 or (h2 == 24 and m2):
            raise ValueError(f"batch window {item!r}: not a time of day")
        end = time(0, 0) if h2 == 24 else time(h2, m2)
        windows.append(Window(time(h1, m1), end))
    return tuple(windows)


def normalize_windows(value: str | list[str]) -> str:
    """The stored form: "" (not set: an application then follows its team), "any", or
    "HH:MM-HH:MM, ..." (raises ValueError)."""
    windows = parse_windows(value)
    if not windows:
        items = value if isinstance(value, list) else [value]
        return ANY if any(item.strip() for item in items) else ""
    return ", ".join(f"{w.start:%H:%M}-{w.end:%H:%M}" for w in windows)


def window_open(windows: tuple[Window, ...], time_zone: str, now: datetime) -> bool:
    """Whether `now` (aware) falls in one of the windows, read in `time_zone`."""
    if not windows:
        return True
    local = now.astimezone(ZoneInfo(time_zone)).time()
    return any(w.contains(local) for w in windows)


def effective_windows(application: str, team: str) -> str:
    """The application's windows when it sets any, else its team's."""
    return application if application.strip() else team
