"""Fixtures of the deployment-state suites: each test runs against both backends."""

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from routing.deployment_state import LocalDeploymentState
from routing.request_path.upstream import close_sessions


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
async def serving() -> AsyncIterator[Callable[..., Awaitable[asyncio.Server]]]:
    """Starts loopback servers for a test (`await serving(handle, ssl=...)`); closes them,
    and this loop's pooled upstream connections, after it."""
    servers: list[asyncio.Server] = []

    async def start(handle: Callable[..., Awaitable[None]], **options: Any) -> asyncio.Server:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, **options)
        servers.append(server)
        return server

    yield start
    await close_sessions()
    for server in servers:
        server.close()
        await server.wait_closed()


@pytest.fixture
def name() -> str:
    return f"dep-{uuid.uuid4().hex[:8]}"
