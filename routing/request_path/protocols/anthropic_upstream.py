"""An upstream of kind `anthropic`: the chat request sent as a Messages request, and its
answer read back as chat completions, so the chain walk, the classifier, the relay and the
audit see the same shapes from every kind of upstream.

The response wrapper offers what they use of an aiohttp response (`status`, `headers`,
`read()`, `content.readany()`/`iter_any()`, `release()`, `close()`); an error body becomes
OpenAI's shape with Anthropic's error type as its code (`overloaded_error` stays readable to
routing/request_path/classify.py).
"""

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from core.errors import bad_request, json_object
from routing.catalog.specs import DeploymentSpec, RouteSpec
from routing.request_path.payloads import ClientRequest, Endpoint
from routing.request_path.protocols import Degrade
from routing.request_path.protocols.anthropic_messages import (
    API_VERSION,
    MessagesToChatStream,
    chat_request_to_messages,
    error_to_chat,
    message_response_to_chat,
)
from routing.request_path.stream_tap import data_of

KIND = "anthropic"


def check_request(route: RouteSpec, request: ClientRequest, degrade: Degrade) -> None:
    """Before any upstream is tried: what a chat request loses on the route's Anthropic
    deployments is noted in `degrade` (on a strict route, refused: a 400 naming the
    field). A Messages client's own request is not translated for them."""
    if request.passes_through(KIND) or not any(d.upstream.kind == KIND for d in route.chain):
        return
    if request.endpoint is not Endpoint.CHAT:
        raise bad_request(
            f"`{route.name}` is served by an Anthropic deployment, which takes chat only.",
            param="model",
        )
    chat_request_to_messages(request.body, degrade=degrade)


def messages_body(deployment: DeploymentSpec, chat: dict[str, Any]) -> bytes:
    # What it loses was noted (or refused, on a strict route) before the chain walk began.
    return json.dumps(chat_request_to_messages(chat, deployment.model)).encode()


def messages_headers(deployment: DeploymentSpec) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "application/json",
        "anthropic-version": API_VERSION,
    }
    if deployment.upstream.api_key:
        headers["x-api-key"] = deployment.upstream.api_key
    return headers


class _ChatEvents:
    """The upstream's Messages event stream, read as chat chunks."""

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self._content = content
        self._translator = MessagesToChatStream()
        self._buffer = b""

    async def readany(self) -> bytes:
        """Translated bytes, whole events; b"" only at the end of the stream."""
        while True:
            chunk = await self._content.readany()
            if not chunk:
                rest, self._buffer = self._buffer, b""
                return self._event(rest) if rest.strip() else b""
            out = self._translate(chunk)
            if out:
                return out

    async def iter_any(self) -> AsyncIterator[bytes]:
        while True:
            out = await self.readany()
            if not out:
                return
            yield out

    def _translate(self, chunk: bytes) -> bytes:
        events = (self._buffer + chunk.replace(b"\r\n", b"\n")).split(b"\n\n")
        self._buffer = events.pop()
        return b"".join(self._event(event) for event in events)

    def _event(self, event: bytes) -> bytes:
        data = data_of(event)
        if data is None:
            return b""
        try:
            payload = json.loads(data)
        except ValueError:
            return b"data: " + data + b"\n\n"  # not JSON: the relay calls it malformed
        return self._translator.feed(payload) if isinstance(payload, dict) else b""


class MessagesResponse:
    def __init__(self, response: aiohttp.ClientResponse, stream: bool) -> None:
        self._response = response
        self.status = response.status
        self.headers = response.headers
        self.content: Any = _ChatEvents(response.content) if stream else response.content

    async def read(self) -> bytes:
        raw = await self._response.read()
        if self.status >= 400:
            return error_to_chat(self.status, raw)
        payload = json_object(raw)
        if payload is None or payload.get("type") != "message":
            if payload is not None and payload.get("type") == "error":
                return error_to_chat(self.status, raw)
            return raw  # not a Messages answer: the chain calls it malformed
        return json.dumps(message_response_to_chat(payload)).encode()

    def release(self) -> None:
        self._response.release()

    def close(self) -> None:
        self._response.close()
