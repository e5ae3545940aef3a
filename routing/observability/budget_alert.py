"""The budget alert (docs/quotas.md#budget-forecasts): a monthly budget (spend or tokens, of
a key, application, member or team) whose month-end forecast reaches one of
SLUICE_BUDGET_ALERT_THRESHOLDS (80 % and 100 % of it) is logged and posted to
SLUICE_BUDGET_ALERT_WEBHOOK_URL (by default the capacity alert's) as `{"text": ...}`, which
Slack's and Microsoft Teams' incoming webhooks both take.

Once per crossing: a budget remembers the highest line it is alerting at, this month; it
alerts again only at a higher line, and is cleared (one message) when its projection falls
SLUICE_BUDGET_ALERT_MARGIN (5 points) under that line. A new month starts with nothing
alerting. As for the capacity alert, every worker runs the loop, an evaluation first takes a
short Redis lock, and the alerting levels live beside it, so four workers send one message.
"""

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings
from django.db.models import Q

from quotas.forecast import Forecast
from quotas.models import Limit
from quotas.selectors import budget_forecasts, limit_target_name
from routing.observability.alert_delivery import alert_loop, deliver, post_webhook

log = logging.getLogger("sluice.alert")

_WHAT = {"cost_per_month": "monthly spend", "tokens_per_month": "monthly tokens"}


@dataclass(frozen=True)
class Watched:
    """One monthly budget and its forecast now."""

    key: str  # "<limit id>:<field>": where its level is remembered
    scope: str
    name: str
    field: str  # cost_per_month | tokens_per_month
    forecast: Forecast

    @property
    def period(self) -> str:
        return self.forecast.period_start.isoformat()

    def amount(self, value: float | None) -> str:
        if value is None:
            return "—"
        return f"${value:,.2f}" if self.field == "cost_per_month" else f"{value:,.0f} tokens"


@dataclass(frozen=True)
class BudgetTransition:
    watched: Watched
    kind: str  # "alert" | "cleared"
    line: float  # the threshold crossed, or the one cleared
    level: float  # the line alerting after it (0: none)

    def text(self) -> str:
        w, f = self.watched, self.watched.forecast
        who = f"{w.scope} `{w.name}`"
        share = f.share or 0.0
        projected = f"{w.amount(f.projected)} of its {w.amount(f.budget)} budget ({share:.0%})"
        if self.kind == "alert":
            runs_out = (
                f"; at this rate it runs out on {f.runs_out_on.isoformat()}"
                if f.runs_out_on
                else ""
            )
            return (
                f":warning: Sluice: {who}'s {_WHAT[w.field]} is projected to reach "
                f"{projected} by the month's end, past the {self.line:.0%} line{runs_out}. "
                f"Spent so far: {w.amount(f.spent)}."
            )
        still = f", still past {self.level:.0%}" if self.level else ""
        return (
            f":white_check_mark: Sluice: {who}'s {_WHAT[w.field]} projection is back under "
            f"the {self.line:.0%} line{still}: {projected}."
        )


def _line_reached(share: float, thresholds: Iterable[float], *, less: float = 0.0) -> float:
    """The highest threshold `share` reaches (each lowered by `less`), 0 for none."""
    return max((t for t in thresholds if share >= t - less), default=0.0)


def budget_transitions(
    watched: list[Watched],
    levels: dict[str, tuple[str, float]],
    *,
    thresholds: tuple[float, ...],
    margin: float,
) -> list[BudgetTransition]:
    """What changed against the remembered levels (key -> (period, line alerting)): a
    budget past a line higher than its level alerts; one that falls `margin` under its
    level clears. A level of another month counts as none; no forecast yet changes
    nothing."""
    changes = []
    for w in watched:
        share = w.forecast.share
        if share is None:
            continue
        period, level = levels.get(w.key, (w.period, 0.0))
        if period != w.period:
            level = 0.0
        up = _line_reached(share, thresholds)
        if up > level:
            changes.append(BudgetTransition(w, "alert", up, up))
        elif level:
            held = _line_reached(share, thresholds, less=margin)
            if held < level:
                changes.append(BudgetTransition(w, "cleared", level, held))
    return changes


class BudgetAlertStore(Protocol):
    def lock(self, seconds: float) -> bool:
        """True for the one caller that may evaluate now (for `seconds`)."""

    def levels(self) -> dict[str, tuple[str, float]]: ...

    def set_level(self, key: str, period: str, level: float) -> None:
        """Remember the line alerting (0: none, forgotten)."""

    def forget(self, keys: Iterable[str]) -> None: ...


class LocalBudgetAlertStore:
    """One process (no REDIS_URL): one worker, one loop."""

    def __init__(self) -> None:
        self._levels: dict[str, tuple[str, float]] = {}

    def lock(self, seconds: float) -> bool:
        return True

    def levels(self) -> dict[str, tuple[str, float]]:
        return dict(self._levels)

    def set_level(self, key: str, period: str, level: float) -> None:
        if level:
            self._levels[key] = (period, level)
        else:
            self._levels.pop(key, None)

    def forget(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._levels.pop(key, None)


class RedisBudgetAlertStore:
    """Shared by every worker and host: a lock key (SET NX PX) and a hash key -> period:line."""

    def __init__(self, url: str, prefix: str) -> None:
        import redis

        self._redis = redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
        self._lock_key = f"{prefix}:budget_alert:lock"
        self._hash_key = f"{prefix}:budget_alert:levels"

    def lock(self, seconds: float) -> bool:
        return bool(self._redis.set(self._lock_key, "1", nx=True, px=max(1, int(seconds * 1000))))

    def levels(self) -> dict[str, tuple[str, float]]:
        found = {}
        for key, value in self._redis.hgetall(self._hash_key).items():
            period, _, level = value.decode().partition("|")
            try:
                found[key.decode()] = (period, float(level))
            except ValueError:
                continue  # not ours: treated as nothing alerting
        return found

    def set_level(self, key: str, period: str, level: float) -> None:
        if level:
            self._redis.hset(self._hash_key, key, f"{period}|{level}")
        else:
            self._redis.hdel(self._hash_key, key)

    def forget(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if keys:
            self._redis.hdel(self._hash_key, *keys)


_store: BudgetAlertStore | None = None


def budget_alert_store() -> BudgetAlertStore:
    global _store
    if _store is None:
        if settings.REDIS_URL:
            _store = RedisBudgetAlertStore(settings.REDIS_URL, settings.SLUICE_REDIS_PREFIX)
        else:
            _store = LocalBudgetAlertStore()
    return _store


def watched_budgets(*, now: float | None = None) -> list[Watched]:
    """Every monthly budget with its forecast."""
    limits = list(
        Limit.objects.filter(
            Q(cost_per_month__isnull=False) | Q(tokens_per_month__isnull=False)
        ).select_related(
            "team",
            "application__team",
            "member__user",
            "member__team",
            "api_key__application__team",
        )
    )
    forecasts = budget_forecasts(limits, now=now)
    return [
        Watched(f"{limit.pk}:{name}", limit.scope, limit_target_name(limit), name, forecast)
        for limit in limits
        for name, forecast in forecasts.get(limit.pk, {}).items()
    ]


def budget_alert_check(
    *,
    now: float | None = None,
    store: BudgetAlertStore | None = None,
    send: Callable[[str, str], None] = post_webhook,
) -> list[BudgetTransition]:
    """One evaluation, if this caller gets the lock: log, post and remember what changed."""
    store = store or budget_alert_store()
    if not store.lock(settings.SLUICE_BUDGET_ALERT_EVERY_SECONDS * 0.8):
        return []
    watched = watched_budgets(now=now)
    levels = store.levels()
    # Limits removed (or budgets cleared) since: their levels go, without a message.
    store.forget(set(levels) - {w.key for w in watched})
    changes = budget_transitions(
        watched,
        levels,
        thresholds=settings.SLUICE_BUDGET_ALERT_THRESHOLDS,
        margin=settings.SLUICE_BUDGET_ALERT_MARGIN,
    )
    url = settings.SLUICE_BUDGET_ALERT_WEBHOOK_URL
    for change in changes:
        text = change.text()
        (log.warning if change.kind == "alert" else log.info)("%s", text)
        store.set_level(change.watched.key, change.watched.period, change.level)
        deliver(url, text, send, "budget")
    return changes


async def budget_alert_loop() -> None:
    await alert_loop(budget_alert_check, settings.SLUICE_BUDGET_ALERT_EVERY_SECONDS, "budget")
