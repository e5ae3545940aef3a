"""Calls to upstream APIs: one pooled aiohttp session per process (and event loop).

aiohttp rather than httpx: httpx.AsyncClient's pool scans every connection on each request,
so its CPU per request grows with concurrency; aiohttp's stays flat and several times lower
(measure with bench/overhead.py against the simulator).
"""

import asyncio

import aiohttp

from routing.catalog import DeploymentSpec
from routing.classify import ErrorClass

_sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}

# Transport failures, as the proxy sees them.
UpstreamError = (aiohttp.ClientError, asyncio.TimeoutError)


def session() -> aiohttp.ClientSession:
    loop = asyncio.get_running_loop()
    found = _sessions.get(loop)
    if found is None or found.closed:
        for stale in [old for old in _sessions if old.is_closed()]:
            del _sessions[stale]
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30, ttl_dns_cache=300)
        # Timeouts are set per request from the upstream's own settings.
        found = _sessions[loop] = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None),
            skip_auto_headers=("User-Agent",),
        )
    return found


async def close_sessions() -> None:
    found = _sessions.pop(asyncio.get_running_loop(), None)
    if found is not None:
        await found.close()


async def open_response(
    deployment: DeploymentSpec, path: str, body: bytes
) -> aiohttp.ClientResponse:
    """Send the request and return once the status and headers are in; the body is read
    (or streamed) by the caller, who must release the response."""
    upstream = deployment.upstream
    headers = {"content-type": "application/json", "accept": "application/json"}
    if upstream.api_key:
        headers["authorization"] = f"Bearer {upstream.api_key}"
    timeout = aiohttp.ClientTimeout(
        total=None, connect=upstream.connect_timeout, sock_read=upstream.read_timeout
    )
    url = f"{upstream.base_url}/{path}"
    try:
        return await session().post(url, data=body, headers=headers, timeout=timeout)
    except aiohttp.ServerDisconnectedError:
        # Closed before any answer: mostly a pooled connection the upstream dropped as we
        # reused it (its idle timeout is shorter than our pool's: uvicorn's is 5 s), so the
        # request was never read. Sent again once, not as a failed attempt; a second drop
        # is the upstream's failure.
        return await session().post(url, data=body, headers=headers, timeout=timeout)


def transport_error_class(exc: BaseException) -> ErrorClass:
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ErrorClass.CONNECT_TIMEOUT
    if isinstance(exc, asyncio.TimeoutError):
        return ErrorClass.READ_TIMEOUT
    if isinstance(exc, aiohttp.ClientResponseError):
        return ErrorClass.MALFORMED  # not HTTP as it should be
    return ErrorClass.CONNECTION  # refused, reset, or a body cut short (ClientPayloadError)
