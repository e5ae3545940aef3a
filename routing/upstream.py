"""Calls to upstream APIs: one pooled httpx client per process (and event loop)."""

import asyncio

import httpx

from routing.catalog import DeploymentSpec
from routing.classify import ErrorClass

_clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
_LIMITS = httpx.Limits(max_connections=2000, max_keepalive_connections=500, keepalive_expiry=30)


def client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    found = _clients.get(loop)
    if found is None:
        for stale in [old for old in _clients if old.is_closed()]:
            del _clients[stale]
        # Timeouts are set per request, from the upstream's own settings.
        found = _clients[loop] = httpx.AsyncClient(limits=_LIMITS, timeout=None)
    return found


async def close_clients() -> None:
    loop = asyncio.get_running_loop()
    found = _clients.pop(loop, None)
    if found is not None:
        await found.aclose()


async def open_response(deployment: DeploymentSpec, path: str, body: bytes) -> httpx.Response:
    """Send the request and return once the status and headers are in; the body is read
    (or streamed) by the caller, who must close the response."""
    upstream = deployment.upstream
    headers = {"content-type": "application/json", "accept": "application/json"}
    if upstream.api_key:
        headers["authorization"] = f"Bearer {upstream.api_key}"
    request = client().build_request(
        "POST",
        f"{upstream.base_url}/{path}",
        content=body,
        headers=headers,
        timeout=httpx.Timeout(
            upstream.read_timeout, connect=upstream.connect_timeout, pool=upstream.connect_timeout
        ),
    )
    return await client().send(request, stream=True)


def transport_error_class(exc: httpx.HTTPError) -> ErrorClass:
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return ErrorClass.CONNECT_TIMEOUT
    if isinstance(exc, httpx.TimeoutException):
        return ErrorClass.READ_TIMEOUT
    if isinstance(exc, httpx.DecodingError):
        return ErrorClass.MALFORMED
    return ErrorClass.CONNECTION
