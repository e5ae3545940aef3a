"""The process's deployment state backend, chosen by REDIS_URL (beside both backends, so
choosing one imports no module that imports this one)."""

from django.conf import settings

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
    """With Redis, this worker listens for grants and invalidations (from its first
    request on); without, there is one worker and a change drops its values directly."""
    if settings.REDIS_URL:
        from routing.deployment_state.redis import RedisDeploymentState

        state = deployment_state()
        if isinstance(state, RedisDeploymentState):
            grant_listener(state).start()
