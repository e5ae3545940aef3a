"""Fixtures of the deployment-state suites: each test runs against both backends."""

import os
import uuid

import pytest

from routing.deployment_state import LocalDeploymentState


@pytest.fixture(params=["local", "redis"])
async def state(request):
    """The in-process state, and the Redis state when REDIS_URL is set (CI's second run)."""
    if request.param == "local":
        yield LocalDeploymentState()
        return
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    from routing.deployment_state.redis import RedisDeploymentState

    backend = RedisDeploymentState(url, prefix=f"test-{uuid.uuid4().hex[:8]}")
    yield backend
    await backend._client().aclose()


@pytest.fixture
def name() -> str:
    return f"dep-{uuid.uuid4().hex[:8]}"
