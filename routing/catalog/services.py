"""Writes for routing: deployments (drain, enable) and the catalog as a whole (config)."""

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts import policy
from accounts.services import SYSTEM, Actor, admin_action_record, recorded_change, snapshot_of
from routing.models import Deployment

MAX_DRAIN = timedelta(days=7)
_DRAIN_FIELDS = ("drained_until", "drain_reason", "enabled")


class RoutingError(Exception):
    """A change that names something missing or cannot be made; the message says which."""


def deployment_mark_misconfigured(*, name: str, message: str) -> None:
    """Shown in the admin next to the deployment until someone clears it there."""
    Deployment.objects.filter(name=name).update(
        config_error=message[:300], config_error_at=timezone.now()
    )


def _drain_snapshot(deployment: Deployment) -> dict[str, Any]:
    return snapshot_of(deployment, _DRAIN_FIELDS)


def _deployment(name: str) -> Deployment:
    deployment = Deployment.objects.filter(name=name).first()
    if deployment is None:
        raise RoutingError(f"no deployment {name!r}")
    return deployment


def deployment_drain(
    *, name: str, minutes: float | None, reason: str = "", actor: Actor = SYSTEM
) -> Deployment:
    """Take a deployment out of service for `minutes` (a drill: traffic flows down the
    chain), or bring it back (None). Every worker sees it within the catalog's few seconds."""
    policy.staff_check(actor=actor, what="drain a deployment")
    deployment = _deployment(name)
    if minutes is not None and not 0 < minutes <= MAX_DRAIN.total_seconds() / 60:
        raise RoutingError("a drain lasts more than 0 minutes and at most one week")
    if len(reason) > 300:
        raise RoutingError("the reason must be at most 300 characters")
    with recorded_change(
        actor=actor,
        action="deployment.drain" if minutes is not None else "deployment.undrain",
        obj=deployment,
        snapshot=_drain_snapshot,
    ):
        if minutes is None:
            deployment.drained_until, deployment.drain_reason = None, ""
        else:
            deployment.drained_until = timezone.now() + timedelta(minutes=minutes)
            deployment.drain_reason = reason
        deployment.save(update_fields=["drained_until", "drain_reason"])
    return deployment


def deployment_set_enabled(*, name: str, enabled: bool, actor: Actor = SYSTEM) -> Deployment:
    """A disabled deployment leaves every chain until it is enabled again."""
    policy.staff_check(actor=actor, what="enable or disable a deployment")
    deployment = _deployment(name)
    if deployment.enabled == enabled:
        return deployment
    with recorded_change(
        actor=actor,
        action="deployment.enable" if enabled else "deployment.disable",
        obj=deployment,
        snapshot=_drain_snapshot,
    ):
        deployment.enabled = enabled
        deployment.save(update_fields=["enabled"])
    return deployment


def config_apply(*, text: str, actor: Actor = SYSTEM, dry_run: bool = False) -> Any:
    """Check a whole TOML file, then apply it in one transaction (or, with `dry_run`, only
    say what would change). Returns the `ConfigDiff`; raises ConfigError for a bad file."""
    from routing.catalog.config_export import config_diff

    policy.staff_check(actor=actor, what="apply a config file")
    with transaction.atomic():
        diff = config_diff(text, apply=not dry_run)
        if not dry_run and diff.changed:
            admin_action_record(
                actor=actor,
                action="config.apply",
                obj="catalog",
                object_type="config",
                before={"changes": diff.before_summary()},
                after={"changes": diff.after_summary(), "summary": diff.report.summary()},
            )
    return diff
