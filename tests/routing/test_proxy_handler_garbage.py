"""The proxy's ASGI handler leaves no reference cycles behind a call: under load, cyclic
garbage a call meant full collections of tens of milliseconds that stalled every call on
the worker (bench/overhead.py prints the event-loop lag)."""

import asyncio
import gc

from routing.request_path.proxy_handler import ProxyHandler


async def _one_call(handler: ProxyHandler, path: str) -> int:
    answered = asyncio.Event()
    sent: list[dict] = []
    first = True

    async def receive() -> dict:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await answered.wait()  # as uvicorn: a disconnect once the answer is out
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()

    scope = {
        "type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
        "query_string": b"", "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000), "scheme": "http",
        "root_path": "", "http_version": "1.1", "asgi": {"version": "3.0"},
    }  # fmt: skip
    await handler(scope, receive, send)
    await asyncio.sleep(0)  # the disconnect watcher ends
    return sent[0]["status"]


async def test_calls_leave_no_cyclic_garbage() -> None:
    handler = ProxyHandler()
    await _one_call(handler, "/v1/no-such-endpoint")  # warm: caches, lazy imports
    gc.collect()
    gc.disable()
    try:
        statuses = [await _one_call(handler, "/v1/no-such-endpoint") for _ in range(50)]
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert statuses == [404] * 50
    assert unreachable < 50  # fewer objects than calls: no cycle per call
