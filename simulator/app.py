"""The simulator as an ASGI3 app: paths, the schedule, admission by capacity, the answers.

No framework, so it is never the bottleneck: constant responses are encoded once, streamed
chunks once per request shape, and the only per-request work is a dict lookup, a few counters
and one ``json.dumps``.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import math
import random
import struct
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from simulator.admin import admin_changes
from simulator.anthropic import (
    MessagesOut,
    anthropic_error,
    read_messages_request,
    wants_thinking,
)
from simulator.config import ScheduledFault, SimulatorConfig, checked_model_name
from simulator.faults import FaultInjection, context_length_bodies, fixed_fault_answers
from simulator.openai_responses import ResponsesOut, read_responses_request
from simulator.requests import BadRequest, Plan, plan_chat, plan_completion, plan_embedding
from simulator.responses import (
    CAPACITY_MESSAGE,
    EMBEDDING_DIM,
    RATE_LIMIT_MESSAGE,
    Responses,
    embedding_vector,
)
from simulator.script import (
    Turn,
    chat_answer,
    chat_stream,
    chat_turn,
    messages_turn,
    responses_turn,
)
from simulator.state import ModelState
from simulator.wire import (
    SSE_HEADERS,
    Guard,
    Receive,
    Scope,
    Send,
    error_body,
    json_bytes,
    json_headers,
    read_body,
    send_error,
    send_json,
    send_model_not_found,
    send_raw,
    watch_disconnect,
)


class Simulator(FaultInjection):
    """ASGI3 app simulating an OpenAI-compatible provider with per-model capacity."""

    def __init__(self, config: SimulatorConfig | None = None) -> None:
        self.config = config = config or SimulatorConfig()
        self.models: dict[str, ModelState] = {
            name: ModelState(name, cap) for name, cap in config.models.items()
        }
        self._rng = random.Random(config.seed)
        self._rl_probability = config.rate_limit_probability
        self._latency = config.latency_ms / 1000
        self._spread = config.latency_spread
        self._token_latency = config.token_latency_ms / 1000
        self._token_spread = config.token_latency_spread
        self.responses = Responses()
        self._schedule_task: asyncio.Task | None = None
        self.http_versions: Counter[str] = Counter()  # requests served, by HTTP version
        self._restart_clock()

        # Constant responses, encoded once.
        self._capacity_body = error_body(CAPACITY_MESSAGE, "server_error", "model_at_capacity")
        self._capacity_headers = json_headers(self._capacity_body)
        self._rate_body = error_body(RATE_LIMIT_MESSAGE, "rate_limit_error", "rate_limit_exceeded")
        retry = (
            ()
            if config.retry_after is None
            else [(b"retry-after", str(config.retry_after).encode())]
        )
        self._rate_headers = json_headers(self._rate_body, retry)
        self._fault_retry_after = 1.0 if config.retry_after is None else float(config.retry_after)
        self._fault_bodies = fixed_fault_answers(self._capacity_body, self._rate_body)
        self._context_length_bodies = context_length_bodies()
        for fault in config.faults:
            self.set_fault(fault.model, fault.kind, fault.probability, fault.retry_after)

        self._post_routes: dict[str, Callable[[dict], Plan]] = {
            path: functools.partial(plan, output_tokens=config.output_tokens)
            for path, plan in (
                ("/v1/chat/completions", plan_chat),
                ("/v1/completions", plan_completion),
                ("/v1/embeddings", plan_embedding),
            )
        }

    # -- schedule ---------------------------------------------------------------------------

    def _restart_clock(self) -> None:
        self.started = time.monotonic()
        self._pending = [(self.started + e[0], e) for e in self.config.schedule]
        self._next_due = self._pending[0][0] if self._pending else math.inf

    def apply_schedule(self, now: float | None = None) -> None:
        """Apply every scheduled change whose time has come (cheap when none is due)."""
        now = time.monotonic() if now is None else now
        while self._pending and self._pending[0][0] <= now:
            _, entry = self._pending.pop(0)
            if isinstance(entry, ScheduledFault):
                if entry.model in self.models:
                    self.set_fault(entry.model, entry.kind, entry.probability, entry.retry_after)
            else:
                self.set_capacity(entry[1], entry[2])
        self._next_due = self._pending[0][0] if self._pending else math.inf

    async def _run_schedule(self) -> None:
        # Applies changes on time even with no traffic; requests also apply them lazily, so the
        # schedule works when the server runs without lifespan.
        while self._pending:
            await asyncio.sleep(max(0.0, self._next_due - time.monotonic()))
            self.apply_schedule()

    # -- state ------------------------------------------------------------------------------

    def set_capacity(self, name: str, capacity: int) -> ModelState:
        state = self.models.get(name)
        if state is None:
            state = self.models[name] = ModelState(name, capacity)
        else:
            state.capacity = capacity
        return state

    def set_fault(
        self, name: str, kind: str, probability: float, retry_after: float | None = None
    ) -> ModelState:
        """Set one fault's probability on an existing model (0 removes it)."""
        state = self.models[name]
        state.set_faults({**state.faults, kind: probability})
        if retry_after is not None:
            state.retry_after = retry_after
        return state

    def reset_stats(self) -> None:
        for state in self.models.values():
            state.reset()
        self.http_versions.clear()

    def stats(self) -> dict[str, Any]:
        return {
            "uptime_s": round(time.monotonic() - self.started, 3),
            "models": {name: state.stats() for name, state in self.models.items()},
            "http_versions": dict(self.http_versions),  # requests by HTTP version ("2": --http2)
        }

    # -- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            self.http_versions[scope.get("http_version", "1.1")] += 1
            if time.monotonic() >= self._next_due:
                self.apply_schedule()
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1000})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._restart_clock()  # schedule times count from when the server is up
                if self._pending:
                    self._schedule_task = asyncio.get_running_loop().create_task(
                        self._run_schedule()
                    )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._schedule_task is not None:
                    self._schedule_task.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        if method == "POST":
            planner = self._post_routes.get(path)
            if planner is not None:
                await self._completion(scope, receive, send, planner)
                return
            if path == "/v1/messages":
                await self._messages(scope, receive, send)
                return
            if path == "/v1/responses":
                await self._responses(scope, receive, send)
                return
            if path == "/stats/reset":
                self.reset_stats()
                await send_json(send, 200, self.stats())
                return
            if path.startswith("/admin/models/"):
                await self._admin_model(path[len("/admin/models/") :], receive, send)
                return
        elif method == "GET":
            if path == "/stats":
                await send_json(send, 200, self.stats())
                return
            if path == "/v1/models":
                data = [self._model_obj(name) for name in self.models]
                await send_json(send, 200, {"object": "list", "data": data})
                return
            if path.startswith("/v1/models/"):
                name = path[len("/v1/models/") :]
                if name in self.models:
                    await send_json(send, 200, self._model_obj(name))
                else:
                    await send_model_not_found(send, name)
                return
        await send_error(
            send, 404, f"Invalid URL ({method} {path})", "invalid_request_error", "unknown_url"
        )

    def _model_obj(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": 1700000000, "owned_by": "simulator"}

    async def _admin_model(self, name: str, receive: Receive, send: Send) -> None:
        body = await read_body(receive)
        if body is None:
            return
        try:
            name = checked_model_name(name, "URL")
        except ValueError as exc:
            await send_error(send, 400, str(exc), "invalid_request_error", "invalid_model")
            return
        try:
            req = json.loads(body)
        except ValueError:
            req = None
        try:
            capacity, faults, retry_after = admin_changes(req)
        except BadRequest as exc:
            code = f"invalid_{exc.param}" if exc.param else "invalid_body"
            await send_error(send, 400, exc.message, "invalid_request_error", code, exc.param)
            return
        if capacity is None and name not in self.models:
            await send_model_not_found(send, name)  # creating a model takes a capacity
            return
        state = self.set_capacity(name, capacity) if capacity is not None else self.models[name]
        if faults is not None:
            state.set_faults(faults)
        if retry_after is not ...:
            state.retry_after = retry_after
        await send_json(send, 200, {"name": name, **state.stats()})

    # -- the model endpoints ----------------------------------------------------------------

    async def _messages(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Anthropic's Messages API, for the models in Anthropic shape (simulator/anthropic.py)."""
        req, replay = await read_messages_request(receive, send)
        if req is None:
            return
        if req["model"] not in self.config.anthropic_models:
            error = anthropic_error(404, "not_found_error", f"model: {req['model']}")
            await send_raw(send, 404, json_headers(error), error)
            return
        out = MessagesOut(send, thinking=wants_thinking(req))
        chat = self._post_routes["/v1/chat/completions"]
        await self._completion(scope, replay, out.send, chat, turn=messages_turn(req))

    async def _responses(self, scope: Scope, receive: Receive, send: Send) -> None:
        """OpenAI's Responses API, for the models in Responses shape
        (simulator/openai_responses.py)."""
        req, replay = await read_responses_request(receive, send)
        if req is None:
            return
        if req["model"] not in self.config.responses_models:
            await send_model_not_found(send, req["model"])
            return
        out = ResponsesOut(send)
        chat = self._post_routes["/v1/chat/completions"]
        await self._completion(scope, replay, out.send, chat, turn=responses_turn(req))

    async def _completion(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        planner: Callable[[dict], Plan],
        turn: Turn | None = None,
    ) -> None:
        """`turn`: a scripted answer (simulator/script.py) read from a Messages or
        Responses request before it was turned into this chat request."""
        body = await read_body(receive)
        if body is None:
            return
        try:
            req = json.loads(body)
        except ValueError:  # includes UnicodeDecodeError
            req = None
        if not isinstance(req, dict):
            await send_error(
                send,
                400,
                "We could not parse the JSON body of your request. (HINT: the OpenAI API "
                "expects a JSON object.)",
                "invalid_request_error",
                "invalid_json",
            )
            return
        model = req.get("model")
        if not isinstance(model, str) or not model:
            await send_error(
                send,
                400,
                "You must provide a model parameter.",
                "invalid_request_error",
                None,
                "model",
            )
            return
        state = self.models.get(model)
        if state is None:
            await send_model_not_found(send, model)
            return
        if turn is None and plan_chat is getattr(planner, "func", None):
            turn = chat_turn(req)
        try:
            plan = planner(req)
        except BadRequest as exc:
            await send_error(
                send, 400, exc.message, "invalid_request_error", "invalid_value", exc.param
            )
            return

        # Admission.
        state.requests += 1
        for name, value in scope["headers"]:
            if name == b"traceparent":
                state.traceparents.append(value.decode("latin-1")[:128])
        if state.fault_plan and (fault := self._draw_fault(state.fault_plan)) is not None:
            await self._inject(fault, state, plan, model, scope, receive, send)
            return
        if state.in_flight >= state.capacity:
            state.capacity_errors += 1
            await send_raw(send, 503, self._capacity_headers, self._capacity_body)
            return
        if self._rl_probability and self._rng.random() < self._rl_probability:
            state.rate_limited += 1
            await send_raw(send, 429, self._rate_headers, self._rate_body)
            return

        key = "-"
        for name, value in scope["headers"]:
            if name == b"authorization":
                key = value[-12:].decode("latin-1")
                break
        state.acquire(key)
        task: asyncio.Task | None = None
        watcher: asyncio.Task | None = None
        guard: Guard | None = None
        try:
            if self._latency or (plan.stream and self._token_latency and plan.tokens):
                # Only answers that wait need a watcher: a disconnect must cancel the work and
                # free the slot instead of holding it until the sleep ends.
                guard = Guard()
                task = asyncio.current_task()
                assert task is not None
                watcher = asyncio.get_running_loop().create_task(
                    watch_disconnect(receive, task, guard)
                )
            if turn is not None:
                await self._scripted(send, plan, model, turn)
            elif plan.stream:
                await self._stream(send, plan, model, guard)
            else:
                await self._answer(send, plan, model, guard)
            state.served += 1
        except asyncio.CancelledError:
            # Swallow only our own cancellation (client gone); anything else propagates.
            if guard is None or not guard.disconnected or task is None or task.uncancel() > 0:
                raise
            state.cancelled += 1
        finally:
            state.release(key)
            if watcher is not None:
                watcher.cancel()

    async def _scripted(self, send: Send, plan: Plan, model: str, turn: Turn) -> None:
        if self._latency:
            await asyncio.sleep(self.draw_latency())
        ids = self.responses.ids_for(True)
        answer = chat_answer(turn, model, json.loads(ids[0]), int(time.time()), plan.prompt_tokens)
        if plan.stream:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": chat_stream(answer)})
        else:
            body = json_bytes(answer)
            await send_raw(send, 200, json_headers(body), body)

    def draw_latency(self) -> float:
        """Seconds before this answer starts."""
        if not self._spread:
            return self._latency
        return self._latency * (1 + self._spread * (2 * self._rng.random() - 1))

    def draw_token_latency(self) -> float:
        """Seconds before the next streamed chunk."""
        if not self._token_spread:
            return self._token_latency
        return self._token_latency * (1 + self._token_spread * (2 * self._rng.random() - 1))

    async def _answer(self, send: Send, plan: Plan, model: str, guard: Guard | None) -> None:
        if self._latency:
            await asyncio.sleep(self.draw_latency())
        if plan.kind == "embedding":
            data = []
            for i, raw in enumerate(plan.inputs):
                vector: Any = embedding_vector(raw)
                if plan.base64:
                    vector = base64.b64encode(struct.pack(f"<{EMBEDDING_DIM}f", *vector)).decode()
                data.append({"object": "embedding", "index": i, "embedding": vector})
            body = json_bytes(
                {
                    "object": "list",
                    "data": data,
                    "model": model,
                    "usage": {
                        "prompt_tokens": plan.prompt_tokens,
                        "total_tokens": plan.prompt_tokens,
                    },
                }
            )
        else:
            body = self.responses.answer(plan, model)
        if guard is not None:
            guard.finishing = True
        await send_raw(send, 200, json_headers(body), body)

    async def _stream(self, send: Send, plan: Plan, model: str, guard: Guard | None) -> None:
        first, token, last = self.responses.stream(plan, model)
        if self._latency:
            await asyncio.sleep(self.draw_latency())
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        delay = self._token_latency
        if not delay:
            # Nothing to wait for between events: one write instead of one per event (the same
            # bytes on the wire; a per-event send costs more than the rest of the request).
            if guard is not None:
                guard.finishing = True
            await send({"type": "http.response.body", "body": first + token * plan.tokens + last})
            return
        if first:
            await send({"type": "http.response.body", "body": first, "more_body": True})
        for _ in range(plan.tokens):
            await asyncio.sleep(self.draw_token_latency() if self._token_spread else delay)
            await send({"type": "http.response.body", "body": token, "more_body": True})
        if guard is not None:
            guard.finishing = True
        await send({"type": "http.response.body", "body": last, "more_body": False})
