"""Fault injection: one independent draw per configured fault of a model, and the answer each
kind gives (see FAULT_KINDS in config.py). A part of `Simulator`, kept apart to read alone."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable

from simulator.config import SLOT_FAULTS
from simulator.requests import Plan
from simulator.responses import (
    AUTH_MESSAGE,
    CONTEXT_LENGTH_MESSAGE,
    GARBAGE_BODY,
    SERVER_ERROR_MESSAGE,
    Responses,
)
from simulator.state import ModelState
from simulator.wire import (
    SSE_HEADERS,
    Guard,
    Receive,
    Scope,
    Send,
    drop_connection,
    error_body,
    json_headers,
    send_model_not_found,
    send_raw,
    transport_of,
    wait_disconnect,
    watch_disconnect,
)

FixedAnswer = tuple[int, list, bytes]  # status, headers, body


def fixed_fault_answers(
    capacity_body: bytes, rate_body: bytes
) -> dict[str, tuple[int, list, bytes]]:
    """(status, headers, body) of each fault whose answer never changes, encoded once."""
    return {
        kind: (status, json_headers(body), body)
        for kind, status, body in (
            ("capacity", 503, capacity_body),
            ("rate_limit_bare", 429, rate_body),
            ("auth", 401, error_body(AUTH_MESSAGE, "invalid_request_error", "invalid_api_key")),
            ("server_error", 500, error_body(SERVER_ERROR_MESSAGE, "server_error", None)),
            ("garbage", 200, GARBAGE_BODY),
        )
    }


def context_length_bodies() -> dict[str, bytes]:
    """The context_length fault's body per kind of request, naming the field that is long."""
    return {
        kind: error_body(
            CONTEXT_LENGTH_MESSAGE, "invalid_request_error", "context_length_exceeded", param
        )
        for kind, param in (("chat", "messages"), ("completion", "prompt"), ("embedding", "input"))
    }


class FaultInjection:
    """The fault half of `Simulator` (a mixin: it answers with the simulator's own parts)."""

    _rng: random.Random
    _latency: float
    _token_latency: float
    _rate_body: bytes
    _fault_retry_after: float
    _fault_bodies: dict[str, FixedAnswer]
    _context_length_bodies: dict[str, bytes]
    responses: Responses
    draw_latency: Callable[[], float]
    draw_token_latency: Callable[[], float]

    def _draw_fault(self, plan: tuple[tuple[str, float], ...]) -> str | None:
        """One independent draw per configured fault, in FAULT_KINDS order; the first wins."""
        rng = self._rng.random
        for kind, probability in plan:
            if rng() < probability:
                return kind
        return None

    async def _inject(
        self,
        fault: str,
        state: ModelState,
        plan: Plan,
        model: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        if fault == "stream_cut" and not plan.stream:
            fault = "reset"  # nothing to cut: drop the connection, counted as stream_cut
            state.injected["stream_cut"] += 1
        elif fault not in SLOT_FAULTS:
            state.injected[fault] += 1
        if fault == "reset":
            await drop_connection(send, receive, reset=True)
        elif fault == "rate_limit":
            seconds = state.retry_after
            if seconds is None:
                seconds = self._fault_retry_after
            headers = json_headers(
                self._rate_body,
                [
                    (b"retry-after", b"%d" % math.ceil(seconds)),
                    (b"retry-after-ms", b"%d" % round(seconds * 1000)),
                ],
            )
            await send_raw(send, 429, headers, self._rate_body)
        elif fault == "context_length":
            body = self._context_length_bodies[plan.kind]
            await send_raw(send, 400, json_headers(body), body)
        elif fault == "not_found":
            await send_model_not_found(send, model)
        elif fault == "garbage" and plan.stream:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": b"data: " + GARBAGE_BODY + b"\n\n"})
        elif fault in SLOT_FAULTS:
            await self._slot_fault(fault, state, plan, model, scope, receive, send)
        else:
            await send_raw(send, *self._fault_bodies[fault])

    async def _slot_fault(
        self,
        fault: str,
        state: ModelState,
        plan: Plan,
        model: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """`hang` / `stream_cut`: admitted like a real request, holding a slot while they run."""
        if state.in_flight >= state.capacity:
            state.capacity_errors += 1
            await send_raw(send, 503, self._capacity_headers, self._capacity_body)
            return
        state.injected[fault] += 1
        key = "-"
        for name, value in scope["headers"]:
            if name == b"authorization":
                key = value[-12:].decode("latin-1")
                break
        state.acquire(key)
        watcher: asyncio.Task | None = None
        task = asyncio.current_task()
        assert task is not None
        try:
            if fault == "hang":
                try:
                    await wait_disconnect(receive)  # the slot is held until the client gives up
                except asyncio.CancelledError:
                    # uvicorn cancels what still runs 2 s into a shutdown: end as a dropped
                    # connection rather than a 500 and a traceback.
                    if transport_of(send) is None:
                        raise
                    task.uncancel()
                    await drop_connection(send, receive, reset=False)
                return
            guard = Guard()
            watcher = asyncio.get_running_loop().create_task(watch_disconnect(receive, task, guard))
            try:
                await self._stream_cut(send, receive, plan, model, guard)
            except asyncio.CancelledError:
                if not guard.disconnected or task.uncancel() > 0:
                    raise
        finally:
            state.release(key)
            if watcher is not None:
                watcher.cancel()

    async def _stream_cut(
        self, send: Send, receive: Receive, plan: Plan, model: str, guard: Guard
    ) -> None:
        """The first half of a streamed answer, then the connection drops (no last chunk)."""
        first, token, _ = self.responses.stream(plan, model)
        if self._latency:
            await asyncio.sleep(self.draw_latency())
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        sent = plan.tokens // 2
        if self._token_latency:
            if first:
                await send({"type": "http.response.body", "body": first, "more_body": True})
            for _ in range(sent):
                await asyncio.sleep(self.draw_token_latency())
                await send({"type": "http.response.body", "body": token, "more_body": True})
        else:
            body = first + token * sent
            await send({"type": "http.response.body", "body": body, "more_body": True})
        guard.finishing = True  # our own disconnect, not the client's
        await drop_connection(send, receive, reset=False)
