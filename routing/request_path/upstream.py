"""Calls to upstream APIs, whole or streamed, through the lean HTTP/1.1 client
(routing/request_path/upstream_http.py): aiohttp's errors and timeouts, so the chain walk
classifies failures as it always did, for a sixth of aiohttp's CPU per request and no timer
moved per streamed chunk. An upstream set to `http2` is called over HTTP/2
(routing/request_path/upstream_h2.py), with the same answers and errors.

Neither aiohttp's client nor httpx: httpx.AsyncClient's pool scans every connection on each
request, so its CPU per request grows with concurrency; aiohttp's stays flat, and the lean
client's is flat and lower again (measure with bench/overhead.py against the simulator).
"""

import asyncio
import json
from collections.abc import Mapping

import aiohttp

from routing.catalog.specs import DeploymentSpec
from routing.request_path import upstream_h2, upstream_http
from routing.request_path.classify import ErrorClass
from routing.request_path.protocols import anthropic_upstream, responses_upstream
from routing.request_path.protocols.native import NATIVE_PATHS, native_bytes

# Transport failures, as the proxy sees them.
UpstreamError = (aiohttp.ClientError, asyncio.TimeoutError)


def prepare_clients() -> None:
    """Build the clients' TLS contexts now, before the worker serves: built at its first
    upstream connection, reading the host's CA certificates held the loop (30-40 ms) and
    every call in flight with it."""
    upstream_http.tls_context()
    upstream_h2.tls_context()


async def close_sessions() -> None:
    """Close this event loop's pooled upstream connections (a worker or runner ending)."""
    upstream_http.close_pool()
    upstream_h2.close_pool()


# A client's OpenAI account headers, passed on only to upstreams configured to take them.
OPENAI_ACCOUNT_HEADERS = ("openai-organization", "openai-project", "openai-beta")
# A Messages client's protocol headers, passed on with its body to an Anthropic deployment.
ANTHROPIC_HEADERS = ("anthropic-version", "anthropic-beta")
# What an upstream says about its answer that its SDK reads (OpenAI's `_request_id`,
# Anthropic's `request-id`), passed back as they came.
PASSED_BACK = ("x-request-id", "openai-processing-ms", "request-id")  # request-id: Anthropic


def account_headers(headers: Mapping[str, str]) -> dict[str, str]:
    names = OPENAI_ACCOUNT_HEADERS + ANTHROPIC_HEADERS
    return {name: headers[name] for name in names if headers.get(name)}


def passed_back(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: headers[name] for name in PASSED_BACK if name in headers}


async def open_response(
    deployment: DeploymentSpec,
    path: str,
    body: bytes,
    client_headers: Mapping[str, str] | None = None,
    trace_headers: Mapping[str, str] | None = None,
    *,
    whole: bool = False,
) -> aiohttp.ClientResponse:
    """Send the request and return once the status and headers are in; the body is read
    (or streamed) by the caller, who must release the response. `client_headers` (the
    client's OpenAI account headers) go only to an upstream set to receive them; the
    client's own Authorization never goes anywhere. `trace_headers` (the attempt's own
    `traceparent`, when traces are exported) go to every upstream. A call not streamed
    (`whole`) is read with `read()`; a streamed one with `content.readany()`."""
    upstream = deployment.upstream
    timeout = _Limits(upstream.connect_timeout, upstream.read_timeout, whole, upstream.http2)
    native = getattr(body, "native", None)
    if native is not None and native.kind == upstream.kind:
        # The client's own protocol: its body as it came, the answer as it comes.
        return await _post(
            f"{upstream.base_url}/{NATIVE_PATHS[upstream.kind]}",
            native_bytes(native, deployment.model),
            _traced(_native_headers(deployment, client_headers or {}), trace_headers),
            timeout,
        )
    if upstream.kind == responses_upstream.KIND:
        # OpenAI's Responses API for a chat request: translated there and back.
        chat = json.loads(body)
        response = await _post(
            f"{upstream.base_url}/responses",
            responses_upstream.responses_body(chat),
            _traced(_openai_headers(deployment, client_headers), trace_headers),
            timeout,
        )
        return responses_upstream.ResponsesResponse(response, bool(chat.get("stream")))  # type: ignore[return-value]
    if upstream.kind == anthropic_upstream.KIND:
        # Anthropic's Messages API: the chat request translated, the answer read as chat.
        chat = json.loads(body)
        response = await _post(
            f"{upstream.base_url}/messages",
            anthropic_upstream.messages_body(deployment, chat),
            _traced(anthropic_upstream.messages_headers(deployment), trace_headers),
            timeout,
        )
        stream = bool(chat.get("stream"))
        return anthropic_upstream.MessagesResponse(response, stream)  # type: ignore[return-value]
    headers = _traced(_openai_headers(deployment, client_headers), trace_headers)
    return await _post(f"{upstream.base_url}/{path}", body, headers, timeout)


def _traced(headers: dict[str, str], trace_headers: Mapping[str, str] | None) -> dict[str, str]:
    if trace_headers:
        headers.update(trace_headers)
    return headers


def _openai_headers(
    deployment: DeploymentSpec, client_headers: Mapping[str, str] | None
) -> dict[str, str]:
    upstream = deployment.upstream
    headers = {"content-type": "application/json", "accept": "application/json"}
    if client_headers and upstream.forward_openai_headers:
        headers |= {k: v for k, v in client_headers.items() if k in OPENAI_ACCOUNT_HEADERS}
    if upstream.api_key:
        headers["authorization"] = f"Bearer {upstream.api_key}"
    return headers


def _native_headers(
    deployment: DeploymentSpec, client_headers: Mapping[str, str]
) -> dict[str, str]:
    """A native call's headers: the upstream's own key (never the client's), and for
    Anthropic the client's anthropic-version and anthropic-beta as they came."""
    if deployment.upstream.kind != anthropic_upstream.KIND:
        return _openai_headers(deployment, client_headers)
    headers = anthropic_upstream.messages_headers(deployment)
    headers |= {k: v for k, v in client_headers.items() if k in ANTHROPIC_HEADERS}
    return headers


class _Limits:
    """An attempt's connect and read timeouts, whether its answer is read whole, and
    whether it goes over HTTP/2."""

    __slots__ = ("connect", "http2", "read", "whole")

    def __init__(self, connect: float, read: float, whole: bool, http2: bool) -> None:
        self.connect, self.read, self.whole, self.http2 = connect, read, whole, http2


async def _post(
    url: str, body: bytes, headers: dict[str, str], limits: _Limits
) -> aiohttp.ClientResponse:
    try:
        return await _send(url, body, headers, limits)
    except aiohttp.ServerDisconnectedError:
        # Closed before any answer: mostly a pooled connection the upstream dropped as we
        # reused it (its idle timeout is shorter than our pool's: uvicorn's is 5 s), so the
        # request was never read. Sent again once, not as a failed attempt, on a new
        # connection: the pool's other idle ones went idle as long and may be dropped too.
        # A second drop is the upstream's failure. Over HTTP/2: a stream the upstream
        # refused, or left unprocessed as it went away.
        return await _send(url, body, headers, limits, fresh=True)


async def _send(
    url: str, body: bytes, headers: dict[str, str], limits: _Limits, *, fresh: bool = False
) -> aiohttp.ClientResponse:
    post = upstream_h2.post if limits.http2 else upstream_http.post
    return await post(  # type: ignore[return-value]  # status, headers, read(), content
        url,
        body,
        headers,
        connect_timeout=limits.connect,
        read_timeout=limits.read,
        stream=not limits.whole,
        fresh=fresh,
    )


def transport_error_class(exc: BaseException) -> ErrorClass:
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ErrorClass.CONNECT_TIMEOUT
    if isinstance(exc, asyncio.TimeoutError):
        return ErrorClass.READ_TIMEOUT
    if isinstance(exc, aiohttp.ClientResponseError):
        return ErrorClass.MALFORMED  # not HTTP as it should be
    return ErrorClass.CONNECTION  # refused, reset, or a body cut short (ClientPayloadError)
