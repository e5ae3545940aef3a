"""The capacity alert (docs/operations.md): a deployment whose capacity-error share over the window
(5 minutes) passes SLUICE_CAPACITY_ALERT_SHARE (20 %), with at least
SLUICE_CAPACITY_ALERT_MIN_ATTEMPTS attempts in it, is logged as a warning and posted to
SLUICE_CAPACITY_ALERT_WEBHOOK_URL as Slack-compatible JSON (`{"text": ...}`).

Once per crossing: a deployment stays alerting until its share falls to the threshold times
SLUICE_CAPACITY_ALERT_RECOVER_RATIO (or it sees no attempts at all), then one recovery
message is sent. Every worker runs the loop, but an evaluation first takes a short Redis
lock (in process without Redis: one worker), and the set of alerting deployments lives
beside it, so four workers send one message, not four. The console's banner reads the same
measure through routing.catalog.selectors.capacity_alerts.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from django.conf import settings

from routing.catalog.selectors import CapacityShare, capacity_error_share
from routing.observability.alert_delivery import alert_loop, deliver, post_webhook

log = logging.getLogger("sluice.alert")


@dataclass(frozen=True)
class Transition:
    deployment: str
    kind: str  # "alert" | "recovered"
    share: CapacityShare

    def text(self, *, threshold: float, window: timedelta) -> str:
        seconds = int(window.total_seconds())
        span = f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"
        measured = (
            f"{self.share.share:.1%} of {self.share.attempts} attempts "
            f"({self.share.capacity_errors} capacity errors) over the last {span}"
        )
        if self.kind == "alert":
            return (
                f":warning: Sluice: deployment `{self.deployment}` is at capacity: {measured}, "
                f"above the {threshold:.0%} alert line."
            )
        return f":white_check_mark: Sluice: deployment `{self.deployment}` recovered: {measured}."


class AlertStore(Protocol):
    def lock(self, seconds: float) -> bool:
        """True for the one caller that may evaluate now (for `seconds`)."""

    def alerting(self) -> set[str]: ...

    def mark(self, deployment: str, *, alerting: bool) -> None: ...


class LocalAlertStore:
    """One process (no REDIS_URL): one worker, one loop, so it always may evaluate."""

    def __init__(self) -> None:
        self._alerting: set[str] = set()

    def lock(self, seconds: float) -> bool:
        return True

    def alerting(self) -> set[str]:
        return set(self._alerting)

    def mark(self, deployment: str, *, alerting: bool) -> None:
        (self._alerting.add if alerting else self._alerting.discard)(deployment)


class RedisAlertStore:
    """Shared by every worker and host: a lock key taken with SET NX PX, and a set."""

    def __init__(self, url: str, prefix: str) -> None:
        from core.redis_client import sync_redis_client

        self._redis = sync_redis_client(url)
        self._lock_key = f"{prefix}:capacity_alert:lock"
        self._set_key = f"{prefix}:capacity_alert:alerting"

    def lock(self, seconds: float) -> bool:
        return bool(self._redis.set(self._lock_key, "1", nx=True, px=max(1, int(seconds * 1000))))

    def alerting(self) -> set[str]:
        return {m.decode() for m in self._redis.smembers(self._set_key)}

    def mark(self, deployment: str, *, alerting: bool) -> None:
        if alerting:
            self._redis.sadd(self._set_key, deployment)
        else:
            self._redis.srem(self._set_key, deployment)


_store: AlertStore | None = None


def alert_store() -> AlertStore:
    global _store
    if _store is None:
        if settings.REDIS_URL:
            _store = RedisAlertStore(settings.REDIS_URL, settings.SLUICE_REDIS_PREFIX)
        else:
            _store = LocalAlertStore()
    return _store


def transitions(
    shares: dict[str, CapacityShare],
    alerting: set[str],
    *,
    threshold: float,
    minimum: int,
    recover_ratio: float,
) -> list[Transition]:
    """What changed: deployments that crossed the line, and alerting ones that recovered
    (hysteresis: under threshold x recover_ratio, or no attempts at all)."""
    changes = []
    for name, share in sorted(shares.items()):
        if name not in alerting and share.attempts >= minimum and share.share > threshold:
            changes.append(Transition(name, "alert", share))
    for name in sorted(alerting):
        share = shares.get(name, CapacityShare(0, 0))
        if share.attempts == 0 or share.share <= threshold * recover_ratio:
            changes.append(Transition(name, "recovered", share))
    return changes


def capacity_alert_check(
    *,
    now: datetime | None = None,
    store: AlertStore | None = None,
    send: Callable[[str, str], None] = post_webhook,
) -> list[Transition]:
    """One evaluation, if this caller gets the lock: log, post and remember what changed."""
    store = store or alert_store()
    every = settings.SLUICE_CAPACITY_ALERT_EVERY_SECONDS
    if not store.lock(every * 0.8):
        return []
    threshold = settings.SLUICE_CAPACITY_ALERT_SHARE
    window = timedelta(seconds=settings.SLUICE_CAPACITY_ALERT_WINDOW_SECONDS)
    changes = transitions(
        capacity_error_share(window=window, now=now),
        store.alerting(),
        threshold=threshold,
        minimum=settings.SLUICE_CAPACITY_ALERT_MIN_ATTEMPTS,
        recover_ratio=settings.SLUICE_CAPACITY_ALERT_RECOVER_RATIO,
    )
    url = settings.SLUICE_CAPACITY_ALERT_WEBHOOK_URL
    for change in changes:
        text = change.text(threshold=threshold, window=window)
        if change.kind == "alert":
            log.warning("%s", text)
        else:
            log.info("%s", text)
        store.mark(change.deployment, alerting=change.kind == "alert")
        deliver(url, text, send, "capacity")
    return changes


async def capacity_alert_loop() -> None:
    await alert_loop(capacity_alert_check, settings.SLUICE_CAPACITY_ALERT_EVERY_SECONDS, "capacity")
