"""ASGI plumbing of the simulator: message types, JSON encoding, sending answers, reading the
body, noticing a client that went away and dropping a connection on purpose."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# One shared encoder: compact separators and no per-call keyword processing.
_encode = json.JSONEncoder(separators=(",", ":")).encode


def json_bytes(obj: Any) -> bytes:
    return _encode(obj).encode()


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    """Encode an error exactly as OpenAI shapes it."""
    return json_bytes({"error": {"message": message, "type": type_, "code": code, "param": param}})


CT_JSON = (b"content-type", b"application/json")
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]
DONE = b"data: [DONE]\n\n"


def json_headers(body: bytes, extra: Iterable[tuple[bytes, bytes]] = ()) -> list:
    return [CT_JSON, (b"content-length", b"%d" % len(body)), *extra]


class Guard:
    """Shared between a request and its disconnect watcher."""

    __slots__ = ("disconnected", "finishing")

    def __init__(self) -> None:
        self.finishing = False  # set just before the last send: a late disconnect is harmless
        self.disconnected = False


async def watch_disconnect(receive: Receive, task: asyncio.Task, guard: Guard) -> None:
    # After the body is read, the server's receive() only returns once the client is gone
    # (or the response is complete, which `finishing` covers).
    while (await receive())["type"] != "http.disconnect":
        pass
    if not guard.finishing:
        guard.disconnected = True
        task.cancel()


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None if the client disconnected first."""
    message = await receive()
    if message["type"] != "http.request":
        return None
    body = message.get("body", b"")
    if not message.get("more_body"):
        return body
    parts = [body]
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def transport_of(send: Send) -> Any:
    """The asyncio transport of uvicorn's connection (its `send` is a bound method), or None."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    return transport if hasattr(transport, "abort") else None


async def drop_connection(send: Send, receive: Receive, reset: bool) -> None:
    """Close the connection without finishing the HTTP response.

    ASGI has no message for this, and raising from the app doesn't do it either (uvicorn then
    answers 500 if nothing was sent yet, and logs a traceback). So this reaches for the
    server's transport, which uvicorn's `send` is bound to. ``reset``: SO_LINGER 0 first, so
    the kernel sends a TCP RST (the client reads ECONNRESET) instead of a FIN (an early EOF).
    Under another server, raises ConnectionResetError, for the server to drop the connection.
    """
    transport = transport_of(send)
    if transport is None:
        raise ConnectionResetError("simulated connection drop")
    if reset:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # then a FIN: still a dropped connection
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    else:
        transport.close()  # what was sent still goes out first, then the FIN
    # Return once the server has seen the connection go: it then neither answers 500 nor logs
    # "returned without completing response".
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wait_disconnect(receive), 5)


async def send_raw(send: Send, status: int, headers: list, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, obj: Any) -> None:
    body = json_bytes(obj)
    await send_raw(send, status, json_headers(body), body)


async def send_error(
    send: Send, status: int, message: str, type_: str, code: str | None, param: str | None = None
) -> None:
    body = error_body(message, type_, code, param)
    await send_raw(send, status, json_headers(body), body)


async def send_model_not_found(send: Send, model: str) -> None:
    await send_error(
        send, 404, f"The model `{model}` does not exist", "invalid_request_error", "model_not_found"
    )
