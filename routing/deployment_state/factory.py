"""The process's deployment state backend, chosen by REDIS_URL (beside both backends, so
choosing one imports no module that imports this one)."""

from django.conf import settings

from core.change_log import change_reader
from routing.deployment_state.grant_listener import grant_listener
from routing.deployment_state.interface import DeploymentState
from routing.deployment_state.local import LocalDeploymentState


def state_from_settings() -> DeploymentState:
    if settings.REDIS_URL:
        from routing.deployment_state.redis import RedisDeploymentState

        return RedisDeploymentState(settings.REDIS_URL, settings.SLUICE_REDIS_PREFIX)
    return LocalDeploymentState()


_state: DeploymentState | None = None


def deployment_state() -> DeploymentState:
    """The process's backend, chosen by REDIS_URL."""
    global _state
    if _state is None:
        _state = state_from_settings()
    return _state


def listen_for_changes() -> None:
    """From this process's first request on: with Redis, it listens for grants and
    invalidations; without, it reads the changes other processes write to the database
    (a change made here drops its values directly)."""
    if settings.REDIS_URL:
        from routing.deployment_state.redis import RedisDeploymentState

        state = deployment_state()
        if isinstance(state, RedisDeploymentState):
            grant_listener(state).start()
    elif settings.SLUICE_CHANGE_POLL_SECONDS > 0:
        change_reader().start()
