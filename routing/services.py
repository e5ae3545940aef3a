"""Writes for routing."""

from datetime import timedelta

from django.utils import timezone

from routing.models import Deployment


def deployment_mark_misconfigured(*, name: str, message: str) -> None:
    """Shown in the admin next to the deployment until someone clears it there."""
    Deployment.objects.filter(name=name).update(
        config_error=message[:300], config_error_at=timezone.now()
    )


def deployment_drain(*, name: str, minutes: float | None) -> Deployment:
    """Take a deployment out of service for `minutes` (a drill), or bring it back (None)."""
    deployment = Deployment.objects.get(name=name)
    deployment.drained_until = (
        timezone.now() + timedelta(minutes=minutes) if minutes is not None else None
    )
    deployment.save(update_fields=["drained_until"])
    return deployment
