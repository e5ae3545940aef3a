"""OpenAI-compatible upstream simulator: the model provider used by tests, the demo and benchmarks.

A plain ASGI3 application (no Django, no framework) so it is never the bottleneck: constant
responses are encoded once, streamed chunks are encoded once per request, and the only
per-request work is a dict lookup, a few counters and one ``json.dumps``.

Run it with ``python -m routing.simulator --port 9100 --model big:4`` or, inside the project,
``python manage.py simulate_upstream`` (same flags).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import math
import os
import random
import struct
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_MODELS: dict[str, int] = {"big": 4, "medium": 16, "small": 64}
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9100
EMBEDDING_DIM = 8
MAX_CHOICES = 128  # OpenAI's own limit for `n`; also stops a request from asking for 10^9 choices

CAPACITY_MESSAGE = "Selected model is at capacity. Please try a different model."
RATE_LIMIT_MESSAGE = "Rate limit reached for requests (simulated). Please try again later."

# One shared encoder: compact separators and no per-call keyword processing.
_encode = json.JSONEncoder(separators=(",", ":")).encode


def _json(obj: Any) -> bytes:
    return _encode(obj).encode()


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    """Encode an error exactly as OpenAI shapes it."""
    return _json({"error": {"message": message, "type": type_, "code": code, "param": param}})


_CT_JSON = (b"content-type", b"application/json")
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]
_DONE = b"data: [DONE]\n\n"

# Responses of one shape (kind, model, choices, tokens) differ only by id, timestamp and prompt
# usage: they are encoded once with these markers and filled in with bytes.replace.
# Control characters can't occur in a (validated, printable) model name or in the generated
# text, so the encoded markers (quotes included) can't collide with anything else.
_MARK_ID_STR, _MARK_TS_STR, _MARK_PT_STR, _MARK_TT_STR = "\x00id", "\x00ts", "\x00pt", "\x00tt"


_MARK_ID, _MARK_TS, _MARK_PT, _MARK_TT = (
    _json(m) for m in (_MARK_ID_STR, _MARK_TS_STR, _MARK_PT_STR, _MARK_TT_STR)
)


def _json_headers(body: bytes, extra: Iterable[tuple[bytes, bytes]] = ()) -> list:
    return [_CT_JSON, (b"content-length", b"%d" % len(body)), *extra]


# --------------------------------------------------------------------------------------------
# Configuration and argument parsing (shared by `python -m` and the management command)
# --------------------------------------------------------------------------------------------


def _number(
    value: Any, what: str, kind: type, minimum: float | None = None, maximum: float | None = None
) -> Any:
    """Convert ``value`` (str or number) to ``kind`` and range-check it, naming ``what``."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        number = kind(value)
    except (TypeError, ValueError):
        noun = "an integer" if kind is int else "a number"
        raise ValueError(f"{what} must be {noun}, got {value!r}") from None
    if kind is float and not math.isfinite(number):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    if minimum is not None and number < minimum:
        raise ValueError(f"{what} must be >= {minimum:g}, got {value!r}")
    if maximum is not None and number > maximum:
        raise ValueError(f"{what} must be <= {maximum:g}, got {value!r}")
    return number


def _model_name(name: str, context: str) -> str:
    name = name.strip()
    if not name or not name.isprintable() or any(c.isspace() for c in name) or "/" in name:
        raise ValueError(
            f"{context}: model name must be non-empty, printable, without spaces or '/'"
        )
    return name


def parse_model_spec(spec: str) -> tuple[str, int]:
    """``"big:4"`` -> ``("big", 4)``. The capacity is after the *last* colon ("llama3:8b:4")."""
    name, sep, capacity = spec.strip().rpartition(":")
    if not sep:
        raise ValueError(f"invalid model spec {spec!r}: expected NAME:CAPACITY, e.g. big:4")
    name = _model_name(name, f"invalid model spec {spec!r}")
    cap = _number(capacity.strip(), f"invalid model spec {spec!r}: capacity", int, 0)
    return name, cap


def parse_schedule(spec: str) -> list[tuple[float, str, int]]:
    """``"30:big=0,90:big=4"`` -> ``[(30.0, "big", 0), (90.0, "big", 4)]``, sorted by time."""
    entries: list[tuple[float, str, int]] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        at, sep, rest = item.partition(":")
        name, eq, capacity = rest.rpartition("=")
        if not sep or not eq:
            raise ValueError(
                f"invalid schedule entry {item!r}: expected SECONDS:MODEL=CAPACITY, e.g. 30:big=0"
            )
        when = _number(at.strip(), f"invalid schedule entry {item!r}: time", float, 0)
        name = _model_name(name, f"invalid schedule entry {item!r}")
        cap = _number(capacity.strip(), f"invalid schedule entry {item!r}: capacity", int, 0)
        entries.append((when, name, cap))
    entries.sort(key=lambda e: e[0])  # stable: same-time entries keep their written order
    return entries


@dataclass
class SimulatorConfig:
    models: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_MODELS))
    latency_ms: float = 0.0  # before answering, and before the first streamed chunk
    token_latency_ms: float = 0.0  # between streamed token chunks
    output_tokens: int = 16
    rate_limit_probability: float = 0.0
    retry_after: int | None = None  # seconds; None sends the 429 without Retry-After
    schedule: list[tuple[float, str, int]] = field(default_factory=list)  # (at_s, model, cap)
    seed: int | None = None

    def __post_init__(self) -> None:
        for name, cap in self.models.items():
            _model_name(name, "models")
            _number(cap, f"capacity of model {name!r}", int, 0)
        _number(self.latency_ms, "latency_ms", float, 0)
        _number(self.token_latency_ms, "token_latency_ms", float, 0)
        _number(self.output_tokens, "output_tokens", int, 0)
        _number(self.rate_limit_probability, "rate_limit_probability", float, 0, 1)
        if self.retry_after is not None:
            _number(self.retry_after, "retry_after", int, 0)
        for when, name, cap in self.schedule:
            _number(when, "schedule time", float, 0)
            _model_name(name, "schedule")
            _number(cap, f"scheduled capacity of model {name!r}", int, 0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI flags, shared by ``python -m routing.simulator`` and ``manage.py simulate_upstream``.

    Values are parsed as strings and validated by :func:`config_from_args`, so both entry points
    report bad input the same way (ValueError -> parser error / CommandError).
    """
    parser.add_argument("--host", default=DEFAULT_HOST, help="bind address (default %(default)s)")
    parser.add_argument("--port", default=str(DEFAULT_PORT), help="bind port (default %(default)s)")
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME:CAPACITY",
        help="a served model and its max requests in flight (0 = always full); repeatable; "
        "default: " + " ".join(f"{n}:{c}" for n, c in DEFAULT_MODELS.items()),
    )
    parser.add_argument("--latency-ms", default="0", help="delay before answering / first chunk")
    parser.add_argument("--token-latency-ms", default="0", help="delay between streamed chunks")
    parser.add_argument("--output-tokens", default="16", help="completion tokens per answer")
    parser.add_argument(
        "--rate-limit-probability",
        default="0",
        metavar="P",
        help="probability (0..1) of answering an admitted request with 429",
    )
    parser.add_argument(
        "--retry-after",
        default=None,
        metavar="S",
        help="Retry-After seconds sent with 429 (omitted if not given)",
    )
    parser.add_argument(
        "--schedule",
        default="",
        metavar="T:MODEL=CAP,...",
        help='capacity changes at T seconds after start, e.g. "30:big=0,90:big=4"',
    )
    parser.add_argument("--seed", default=None, help="seed for the rate-limit randomness")


def config_from_args(args: argparse.Namespace) -> SimulatorConfig:
    """Build a config from parsed flags; raises ValueError with a flag-named message."""
    specs = args.models or [f"{n}:{c}" for n, c in DEFAULT_MODELS.items()]
    models: dict[str, int] = {}
    for spec in specs:
        name, cap = parse_model_spec(str(spec))
        if name in models:
            raise ValueError(f"--model {name!r} given more than once")
        models[name] = cap
    retry_after = args.retry_after
    seed = args.seed
    return SimulatorConfig(
        models=models,
        latency_ms=_number(args.latency_ms, "--latency-ms", float, 0),
        token_latency_ms=_number(args.token_latency_ms, "--token-latency-ms", float, 0),
        output_tokens=_number(args.output_tokens, "--output-tokens", int, 0, 1_000_000),
        rate_limit_probability=_number(
            args.rate_limit_probability, "--rate-limit-probability", float, 0, 1
        ),
        retry_after=None if retry_after is None else _number(retry_after, "--retry-after", int, 0),
        schedule=parse_schedule(str(args.schedule or "")),
        seed=None if seed is None else _number(seed, "--seed", int),
    )


def bind_from_args(args: argparse.Namespace) -> tuple[str, int]:
    host = str(args.host).strip()
    if not host:
        raise ValueError("--host must not be empty")
    return host, _number(args.port, "--port", int, 1, 65535)


def describe(config: SimulatorConfig, host: str, port: int) -> str:
    """The one line printed at start-up."""
    models = ", ".join(f"{n} (capacity {c})" for n, c in config.models.items()) or "no models"
    extras = [
        f"latency {config.latency_ms:g} ms",
        f"token latency {config.token_latency_ms:g} ms",
        f"{config.output_tokens} output tokens",
    ]
    if config.rate_limit_probability:
        extras.append(f"429 probability {config.rate_limit_probability:g}")
    if config.schedule:
        extras.append(f"{len(config.schedule)} scheduled capacity change(s)")
    return f"Upstream simulator serving {models} on http://{host}:{port}/v1 ({', '.join(extras)})"


def serve(config: SimulatorConfig, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    # Imported here so the module (and its tests' in-process use) doesn't need the server stack.
    import uvicorn

    uvicorn.run(
        Simulator(config),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        proxy_headers=False,  # nothing sits in front of the simulator: skip the middleware
        server_header=False,
    )


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class ModelState:
    name: str
    capacity: int  # max requests in flight; 0 = always full
    in_flight: int = 0
    requests: int = 0  # every request naming this model, admitted or not
    served: int = 0  # answers sent to the end
    peak_in_flight: int = 0
    capacity_errors: int = 0  # 503s
    rate_limited: int = 0  # 429s
    cancelled: int = 0  # admitted, then the client went away before the answer was complete
    # Keyed by the last 12 chars of the Authorization header: enough to tell keys apart in
    # tests without ever holding (or logging) a whole secret.
    per_key_in_flight: dict[str, int] = field(default_factory=dict)
    per_key_peak: dict[str, int] = field(default_factory=dict)

    def acquire(self, key: str) -> None:
        self.in_flight += 1
        if self.in_flight > self.peak_in_flight:
            self.peak_in_flight = self.in_flight
        n = self.per_key_in_flight.get(key, 0) + 1
        self.per_key_in_flight[key] = n
        if n > self.per_key_peak.get(key, 0):
            self.per_key_peak[key] = n

    def release(self, key: str) -> None:
        self.in_flight -= 1
        n = self.per_key_in_flight[key] - 1
        if n:
            self.per_key_in_flight[key] = n
        else:
            del self.per_key_in_flight[key]

    def reset(self) -> None:
        """Zero the counters; capacity and what is in flight now stay (peaks restart from it)."""
        self.requests = self.served = self.cancelled = 0
        self.capacity_errors = self.rate_limited = 0
        self.peak_in_flight = self.in_flight
        self.per_key_peak = dict(self.per_key_in_flight)

    def stats(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "in_flight": self.in_flight,
            "requests": self.requests,
            "served": self.served,
            "cancelled": self.cancelled,
            "peak_in_flight": self.peak_in_flight,
            "capacity_errors": self.capacity_errors,
            "rate_limited": self.rate_limited,
            "in_flight_per_key": dict(self.per_key_in_flight),
            "peak_in_flight_per_key": dict(self.per_key_peak),
        }


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(slots=True)
class _Plan:
    """What to answer, decided (and validated) before admission."""

    kind: str  # "chat" | "completion" | "embedding"
    prompt_tokens: int
    tokens: int = 0  # completion tokens per choice
    choices: int = 1
    stream: bool = False
    include_usage: bool = False
    inputs: list[bytes] = field(default_factory=list)  # embeddings: one entry per input
    base64: bool = False


class _Guard:
    """Shared between a request and its disconnect watcher."""

    __slots__ = ("disconnected", "finishing")

    def __init__(self) -> None:
        self.finishing = False  # set just before the last send: a late disconnect is harmless
        self.disconnected = False


async def _watch_disconnect(receive: Receive, task: asyncio.Task, guard: _Guard) -> None:
    # After the body is read, the server's receive() only returns once the client is gone
    # (or the response is complete, which `finishing` covers).
    while (await receive())["type"] != "http.disconnect":
        pass
    if not guard.finishing:
        guard.disconnected = True
        task.cancel()


async def _read_body(receive: Receive) -> bytes | None:
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


def _text_tokens(text: str) -> int:
    return len(text) // 4


def _opt_int(req: dict, name: str, minimum: int, maximum: int | None = None) -> int | None:
    value = req.get(name)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        bound = f" and <= {maximum}" if maximum is not None else ""
        raise _BadRequest(f"'{name}' must be an integer >= {minimum}{bound}", name)
    return value


def _embedding(data: bytes) -> list[float]:
    # Deterministic per input, unit length, cheap: 8 nibbles of a CRC.
    h = zlib.crc32(data)
    raw = [((h >> (4 * i)) & 0xF) - 7.5 for i in range(EMBEDDING_DIM)]
    norm = math.sqrt(sum(x * x for x in raw))
    return [round(x / norm, 6) for x in raw]


# --------------------------------------------------------------------------------------------
# The ASGI application
# --------------------------------------------------------------------------------------------


class Simulator:
    """ASGI3 app simulating an OpenAI-compatible provider with per-model capacity."""

    def __init__(self, config: SimulatorConfig | None = None) -> None:
        self.config = config = config or SimulatorConfig()
        self.models: dict[str, ModelState] = {
            name: ModelState(name, cap) for name, cap in config.models.items()
        }
        self._rng = random.Random(config.seed)
        self._rl_probability = config.rate_limit_probability
        self._latency = config.latency_ms / 1000
        self._token_latency = config.token_latency_ms / 1000
        self._ids = itertools.count(1)
        run = os.urandom(3).hex().encode()  # ids stay unique across restarts
        self._chat_id_prefix = b"chatcmpl-sim-" + run
        self._cmpl_id_prefix = b"cmpl-sim-" + run
        self._templates: dict[tuple, Any] = {}
        self._schedule_task: asyncio.Task | None = None
        self._restart_clock()

        # Constant responses, encoded once.
        self._capacity_body = error_body(CAPACITY_MESSAGE, "server_error", "model_at_capacity")
        self._capacity_headers = _json_headers(self._capacity_body)
        self._rate_body = error_body(RATE_LIMIT_MESSAGE, "rate_limit_error", "rate_limit_exceeded")
        retry = (
            ()
            if config.retry_after is None
            else [(b"retry-after", str(config.retry_after).encode())]
        )
        self._rate_headers = _json_headers(self._rate_body, retry)

        self._post_routes: dict[str, Callable[[dict], _Plan]] = {
            "/v1/chat/completions": self._plan_chat,
            "/v1/completions": self._plan_completion,
            "/v1/embeddings": self._plan_embedding,
        }

    # -- schedule ---------------------------------------------------------------------------

    def _restart_clock(self) -> None:
        self.started = time.monotonic()
        self._pending = [(self.started + at, name, cap) for at, name, cap in self.config.schedule]
        self._next_due = self._pending[0][0] if self._pending else math.inf

    def apply_schedule(self, now: float | None = None) -> None:
        """Apply every scheduled capacity change whose time has come (cheap when none is due)."""
        now = time.monotonic() if now is None else now
        while self._pending and self._pending[0][0] <= now:
            _, name, cap = self._pending.pop(0)
            self.set_capacity(name, cap)
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

    def reset_stats(self) -> None:
        for state in self.models.values():
            state.reset()

    def stats(self) -> dict[str, Any]:
        return {
            "uptime_s": round(time.monotonic() - self.started, 3),
            "models": {name: state.stats() for name, state in self.models.items()},
        }

    # -- ASGI -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
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
            if path == "/stats/reset":
                self.reset_stats()
                await self._send_obj(send, 200, self.stats())
                return
            if path.startswith("/admin/models/"):
                await self._admin_model(path[len("/admin/models/") :], receive, send)
                return
        elif method == "GET":
            if path == "/stats":
                await self._send_obj(send, 200, self.stats())
                return
            if path == "/v1/models":
                data = [self._model_obj(name) for name in self.models]
                await self._send_obj(send, 200, {"object": "list", "data": data})
                return
            if path.startswith("/v1/models/"):
                name = path[len("/v1/models/") :]
                if name in self.models:
                    await self._send_obj(send, 200, self._model_obj(name))
                else:
                    await self._model_not_found(send, name)
                return
        await self._send_error(
            send, 404, f"Invalid URL ({method} {path})", "invalid_request_error", "unknown_url"
        )

    def _model_obj(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": 1700000000, "owned_by": "simulator"}

    async def _admin_model(self, name: str, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        try:
            name = _model_name(name, "URL")
        except ValueError as exc:
            await self._send_error(send, 400, str(exc), "invalid_request_error", "invalid_model")
            return
        try:
            req = json.loads(body)
        except ValueError:
            req = None
        capacity = req.get("capacity") if isinstance(req, dict) else None
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            await self._send_error(
                send,
                400,
                'Body must be JSON {"capacity": <integer >= 0>}',
                "invalid_request_error",
                "invalid_capacity",
                "capacity",
            )
            return
        state = self.set_capacity(name, capacity)
        await self._send_obj(send, 200, {"name": name, **state.stats()})

    # -- responses --------------------------------------------------------------------------

    @staticmethod
    async def _send_raw(send: Send, status: int, headers: list, body: bytes) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _send_obj(self, send: Send, status: int, obj: Any) -> None:
        body = _json(obj)
        await self._send_raw(send, status, _json_headers(body), body)

    async def _send_error(
        self,
        send: Send,
        status: int,
        message: str,
        type_: str,
        code: str | None,
        param: str | None = None,
    ) -> None:
        body = error_body(message, type_, code, param)
        await self._send_raw(send, status, _json_headers(body), body)

    async def _model_not_found(self, send: Send, model: str) -> None:
        await self._send_error(
            send,
            404,
            f"The model `{model}` does not exist",
            "invalid_request_error",
            "model_not_found",
        )

    # -- the model endpoints ----------------------------------------------------------------

    async def _completion(
        self, scope: Scope, receive: Receive, send: Send, planner: Callable[[dict], _Plan]
    ) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        try:
            req = json.loads(body)
        except ValueError:  # includes UnicodeDecodeError
            req = None
        if not isinstance(req, dict):
            await self._send_error(
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
            await self._send_error(
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
            await self._model_not_found(send, model)
            return
        try:
            plan = planner(req)
        except _BadRequest as exc:
            await self._send_error(
                send, 400, exc.message, "invalid_request_error", "invalid_value", exc.param
            )
            return

        # Admission.
        state.requests += 1
        if state.in_flight >= state.capacity:
            state.capacity_errors += 1
            await self._send_raw(send, 503, self._capacity_headers, self._capacity_body)
            return
        if self._rl_probability and self._rng.random() < self._rl_probability:
            state.rate_limited += 1
            await self._send_raw(send, 429, self._rate_headers, self._rate_body)
            return

        key = "-"
        for name, value in scope["headers"]:
            if name == b"authorization":
                key = value[-12:].decode("latin-1")
                break
        state.acquire(key)
        task: asyncio.Task | None = None
        watcher: asyncio.Task | None = None
        guard: _Guard | None = None
        try:
            if self._latency or (plan.stream and self._token_latency and plan.tokens):
                # Only answers that wait need a watcher: a disconnect must cancel the work and
                # free the slot instead of holding it until the sleep ends.
                guard = _Guard()
                task = asyncio.current_task()
                assert task is not None
                watcher = asyncio.get_running_loop().create_task(
                    _watch_disconnect(receive, task, guard)
                )
            if plan.stream:
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

    def _fill(self, template: bytes, plan: _Plan, ids: tuple[bytes, bytes]) -> bytes:
        """Put this request's id, timestamp and usage into a cached template."""
        out = template.replace(_MARK_ID, ids[0]).replace(_MARK_TS, ids[1])
        if _MARK_PT in out:
            completion = plan.tokens * plan.choices
            out = out.replace(_MARK_PT, b"%d" % plan.prompt_tokens).replace(
                _MARK_TT, b"%d" % (plan.prompt_tokens + completion)
            )
        return out

    def _ids_for(self, chat: bool) -> tuple[bytes, bytes]:
        prefix = self._chat_id_prefix if chat else self._cmpl_id_prefix
        return b'"%s%08x"' % (prefix, next(self._ids)), b"%d" % time.time()

    def _template(self, key: tuple, build: Callable[[], Any]) -> Any:
        template = self._templates.get(key)
        if template is None:
            if len(self._templates) >= 4096:  # odd n / max_tokens mixes: stay bounded
                self._templates.clear()
            template = self._templates[key] = build()
        return template

    def _completion_tokens(self, req: dict) -> int:
        limit = _opt_int(req, "max_completion_tokens", 0)
        if limit is None:
            limit = _opt_int(req, "max_tokens", 0)
        out = self.config.output_tokens
        return out if limit is None else min(limit, out)

    @staticmethod
    def _stream_flags(req: dict) -> tuple[bool, bool]:
        stream = req.get("stream") is True
        options = req.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        return stream, stream and include_usage

    def _plan_chat(self, req: dict) -> _Plan:
        messages = req.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _BadRequest("'messages' must be a non-empty array", "messages")
        chars = 0
        for message in messages:
            if not isinstance(message, dict):
                raise _BadRequest("each message must be an object", "messages")
            content = message.get("content")
            if isinstance(content, str):
                chars += len(content)
            elif isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and isinstance(text := part.get("text"), str):
                        chars += len(text)
        stream, include_usage = self._stream_flags(req)
        return _Plan(
            kind="chat",
            prompt_tokens=chars // 4 + len(messages),
            tokens=self._completion_tokens(req),
            choices=_opt_int(req, "n", 1, MAX_CHOICES) or 1,
            stream=stream,
            include_usage=include_usage,
        )

    def _plan_completion(self, req: dict) -> _Plan:
        prompt = req.get("prompt")
        if isinstance(prompt, str):
            prompts, prompt_tokens = 1, _text_tokens(prompt) + 1
        elif isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
            prompts, prompt_tokens = 1, len(prompt)  # a single prompt given as token ids
        elif isinstance(prompt, list) and prompt:
            prompts, prompt_tokens = len(prompt), 0
            for p in prompt:
                if isinstance(p, str):
                    prompt_tokens += _text_tokens(p) + 1
                elif isinstance(p, list):
                    prompt_tokens += len(p)
                else:
                    raise _BadRequest("'prompt' must be a string or an array", "prompt")
        else:
            raise _BadRequest("'prompt' must be a string or a non-empty array", "prompt")
        stream, include_usage = self._stream_flags(req)
        n = _opt_int(req, "n", 1, MAX_CHOICES) or 1
        if n * prompts > MAX_CHOICES:
            raise _BadRequest(f"at most {MAX_CHOICES} choices (prompts x n) per request", "n")
        return _Plan(
            kind="completion",
            prompt_tokens=prompt_tokens,
            tokens=self._completion_tokens(req),
            choices=n * prompts,
            stream=stream,
            include_usage=include_usage,
        )

    def _plan_embedding(self, req: dict) -> _Plan:
        value = req.get("input")
        if isinstance(value, str):
            items: list = [value]
        elif isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            items = [value]  # one input given as token ids
        elif isinstance(value, list) and value:
            items = value
        else:
            raise _BadRequest("'input' must be a string or a non-empty array", "input")
        inputs: list[bytes] = []
        prompt_tokens = 0
        for item in items:
            if isinstance(item, str):
                prompt_tokens += _text_tokens(item) + 1
                inputs.append(item.encode())
            elif isinstance(item, list):
                prompt_tokens += len(item)
                inputs.append(_json(item))
            else:
                raise _BadRequest("each input must be a string or an array of tokens", "input")
        fmt = req.get("encoding_format")
        if fmt not in (None, "float", "base64"):
            raise _BadRequest("'encoding_format' must be 'float' or 'base64'", "encoding_format")
        return _Plan(
            kind="embedding", prompt_tokens=prompt_tokens, inputs=inputs, base64=fmt == "base64"
        )

    def _usage(self, plan: _Plan) -> dict[str, Any]:
        # Markers (filled per request by _fill) instead of this request's numbers, so one
        # template serves every request with the same shape.
        return {
            "prompt_tokens": _MARK_PT_STR,
            "completion_tokens": plan.tokens * plan.choices,
            "total_tokens": _MARK_TT_STR,
        }

    async def _answer(self, send: Send, plan: _Plan, model: str, guard: _Guard | None) -> None:
        if self._latency:
            await asyncio.sleep(self._latency)
        if plan.kind == "embedding":
            data = []
            for i, raw in enumerate(plan.inputs):
                vector: Any = _embedding(raw)
                if plan.base64:
                    vector = base64.b64encode(struct.pack(f"<{EMBEDDING_DIM}f", *vector)).decode()
                data.append({"object": "embedding", "index": i, "embedding": vector})
            body = _json(
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
            chat = plan.kind == "chat"
            key = (plan.kind, model, plan.choices, plan.tokens)
            template = self._template(key, lambda: self._build_answer(plan, model))
            body = self._fill(template, plan, self._ids_for(chat))
        if guard is not None:
            guard.finishing = True
        await self._send_raw(send, 200, _json_headers(body), body)

    def _build_answer(self, plan: _Plan, model: str) -> bytes:
        text = "tok " * plan.tokens
        if plan.kind == "chat":
            message = {"role": "assistant", "content": text, "refusal": None}
            choices: list[dict[str, Any]] = [
                {"index": i, "message": message, "logprobs": None, "finish_reason": "stop"}
                for i in range(plan.choices)
            ]
            extra: dict[str, Any] = {"system_fingerprint": None}
        else:
            choices = [
                {"text": text, "index": i, "logprobs": None, "finish_reason": "stop"}
                for i in range(plan.choices)
            ]
            extra = {}
        return _json(
            {
                "id": _MARK_ID_STR,
                "object": "chat.completion" if plan.kind == "chat" else "text_completion",
                "created": _MARK_TS_STR,
                "model": model,
                "choices": choices,
                "usage": self._usage(plan),
                **extra,
            }
        )

    def _build_stream(self, plan: _Plan, model: str) -> tuple[bytes, bytes, bytes]:
        """(first, per-token, last) event blocks, with markers for id / created / usage."""
        chat = plan.kind == "chat"
        base: dict[str, Any] = {
            "id": _MARK_ID_STR,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": _MARK_TS_STR,
            "model": model,
        }
        if plan.include_usage:
            base["usage"] = None  # OpenAI sends an explicit null on every chunk but the last

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return b"data: " + _json({**base, "choices": choices, **extra}) + b"\n\n"

        def per_choice(**fields: Any) -> bytes:
            # One event per choice index, like OpenAI does for n > 1.
            return b"".join(event([{"index": i, **fields}]) for i in range(plan.choices))

        if chat:
            first = per_choice(
                delta={"role": "assistant", "content": "", "refusal": None},
                logprobs=None,
                finish_reason=None,
            )
            token = per_choice(delta={"content": "tok "}, logprobs=None, finish_reason=None)
            last = per_choice(delta={}, logprobs=None, finish_reason="stop")
        else:
            first = b""
            token = per_choice(text="tok ", logprobs=None, finish_reason=None)
            last = per_choice(text="", logprobs=None, finish_reason="stop")
        if plan.include_usage:
            last += event([], usage=self._usage(plan))
        return first, token, last + _DONE

    async def _stream(self, send: Send, plan: _Plan, model: str, guard: _Guard | None) -> None:
        key = (plan.kind, model, plan.choices, plan.tokens, plan.include_usage)
        first, token, last = self._template(key, lambda: self._build_stream(plan, model))
        ids = self._ids_for(plan.kind == "chat")
        token = self._fill(token, plan, ids)
        last = self._fill(last, plan, ids)

        if self._latency:
            await asyncio.sleep(self._latency)
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        first = self._fill(first, plan, ids) if first else b""
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
            await asyncio.sleep(delay)
            await send({"type": "http.response.body", "body": token, "more_body": True})
        if guard is not None:
            guard.finishing = True
        await send({"type": "http.response.body", "body": last, "more_body": False})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m routing.simulator",
        description="OpenAI-compatible upstream simulator (plain ASGI, served by uvicorn).",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        host, port = bind_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    print(describe(config, host, port), flush=True)
    serve(config, host, port)


if __name__ == "__main__":
    main()
