"""OpenAI-compatible upstream simulator: the model provider used by tests, the demo and benchmarks.

A plain ASGI3 application (no Django, no framework) so it is never the bottleneck: constant
responses are encoded once, streamed chunks are encoded once per request, and the only
per-request work is a dict lookup, a few counters and one ``json.dumps``.

Faults of every upstream error class can be injected per model, by probability (``--fault``),
over time (``--schedule``) or live (``POST /admin/models/NAME``): see ``FAULT_KINDS``.

Run it with ``python -m routing.simulator --port 9100 --model big:4`` or, inside the project,
``python manage.py simulate_upstream`` (same flags).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import json
import math
import os
import random
import socket
import struct
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

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
CONTEXT_LENGTH_MESSAGE = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted in "
    "9000 tokens."
)
AUTH_MESSAGE = "Incorrect API key provided."
SERVER_ERROR_MESSAGE = "The server had an error while processing your request. Sorry about that!"
GARBAGE_BODY = b"<html>upstream proxy error</html>"

# Injectable faults, one per upstream error class (see DESIGN.md "Error classes"). A model's
# faults are drawn in this order, one independent draw each; the first that fires answers.
FAULT_KINDS: tuple[str, ...] = (
    "capacity",  # 503 "at capacity"
    "rate_limit",  # 429 with retry-after / retry-after-ms
    "rate_limit_bare",  # 429 without any retry-after
    "context_length",  # 400 context_length_exceeded
    "auth",  # 401 invalid_api_key
    "not_found",  # 404 model_not_found
    "server_error",  # 500 server_error
    "garbage",  # 200 whose body is not JSON (nor JSON events when streaming)
    "reset",  # TCP reset instead of any HTTP response
    "hang",  # holds a slot and never answers, until the client goes away
    "stream_cut",  # streaming: half the tokens, then the connection drops; else like reset
)
# These hold a slot (in_flight) while they run, like a real request; the others answer at once,
# before capacity admission.
_SLOT_FAULTS = frozenset({"hang", "stream_cut"})

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


class FaultSpec(NamedTuple):
    """One ``--fault``: inject ``kind`` into ``model``'s answers with ``probability``."""

    model: str
    kind: str
    probability: float
    retry_after: float | None = None  # rate_limit only: seconds sent in retry-after(-ms)


class ScheduledFault(NamedTuple):
    """A schedule entry setting one fault's probability (0 removes it) at ``at`` seconds."""

    at: float
    model: str
    kind: str
    probability: float
    retry_after: float | None = None


# A schedule entry: (at_s, model, capacity) or a ScheduledFault.
ScheduleEntry = tuple[float, str, int] | ScheduledFault


def _fault_kind(kind: str, context: str) -> str:
    kind = kind.strip()
    if kind not in FAULT_KINDS:
        raise ValueError(
            f"{context}: unknown fault kind {kind!r} (one of {', '.join(FAULT_KINDS)})"
        )
    return kind


def _probability(value: Any, what: str) -> float:
    return _number(value, what, float, 0, 1)


def _fault_value(value: str, kind: str, context: str) -> tuple[float, float | None]:
    """``"0.5"`` or ``"0.5:3"`` (rate_limit only) -> (probability, retry_after)."""
    probability, sep, param = value.partition(":")
    p = _probability(probability.strip(), f"{context}: probability")
    if not sep:
        return p, None
    if kind != "rate_limit":
        raise ValueError(f"{context}: only rate_limit takes a parameter (:RETRY_AFTER_SECONDS)")
    return p, _number(param.strip(), f"{context}: retry-after", float, 0, 86400)


def parse_fault(spec: str) -> FaultSpec:
    """``"big:rate_limit=0.5:3"`` -> ``FaultSpec("big", "rate_limit", 0.5, 3.0)``.

    MODEL:KIND=PROBABILITY[:RETRY_AFTER]; the kind is after the *last* colon before ``=``, so
    model names may contain colons ("llama3:8b:server_error=1").
    """
    head, eq, value = spec.strip().rpartition("=")
    name, sep, kind = head.rpartition(":")
    context = f"invalid fault {spec!r}"
    if not eq or not sep:
        raise ValueError(
            f"{context}: expected MODEL:KIND=PROBABILITY[:RETRY_AFTER], e.g. big:server_error=1"
        )
    name = _model_name(name, context)
    kind = _fault_kind(kind, context)
    probability, retry_after = _fault_value(value, kind, context)
    return FaultSpec(name, kind, probability, retry_after)


def parse_schedule(spec: str) -> list[ScheduleEntry]:
    """Timed changes, sorted by time (entries at the same time keep their written order).

    ``"30:big=0,90:big=4"`` -> ``[(30.0, "big", 0), (90.0, "big", 4)]`` (capacities), and
    ``"10:big!server_error=1"`` -> ``[ScheduledFault(10.0, "big", "server_error", 1.0)]`` (a
    fault's probability; 0 removes it; ``10:big!rate_limit=1:3`` also sets its retry-after).
    """
    entries: list[ScheduleEntry] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        context = f"invalid schedule entry {item!r}"
        at, sep, rest = item.partition(":")
        name, eq, value = rest.rpartition("=")
        if not sep or not eq:
            raise ValueError(
                f"{context}: expected SECONDS:MODEL=CAPACITY or "
                "SECONDS:MODEL!FAULT=PROBABILITY, e.g. 30:big=0 or 10:big!server_error=1"
            )
        when = _number(at.strip(), f"{context}: time", float, 0)
        if "!" in name:
            name, _, kind = name.rpartition("!")
            name = _model_name(name, context)
            kind = _fault_kind(kind, context)
            probability, retry_after = _fault_value(value, kind, context)
            entries.append(ScheduledFault(when, name, kind, probability, retry_after))
        else:
            name = _model_name(name, context)
            cap = _number(value.strip(), f"{context}: capacity", int, 0)
            entries.append((when, name, cap))
    entries.sort(key=lambda e: e[0])
    return entries


@dataclass
class SimulatorConfig:
    models: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_MODELS))
    latency_ms: float = 0.0  # before answering, and before the first streamed chunk
    # Each answer's latency is drawn uniformly within this fraction either side of
    # latency_ms: real answers vary, and equal ones keep a full model's slots in lockstep.
    latency_spread: float = 0.0
    token_latency_ms: float = 0.0  # between streamed token chunks
    output_tokens: int = 16
    rate_limit_probability: float = 0.0
    retry_after: int | None = None  # seconds; None sends the 429 without Retry-After
    schedule: list[ScheduleEntry] = field(default_factory=list)
    seed: int | None = None  # seeds every random draw (rate limits, faults, latencies)
    faults: list[FaultSpec] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name, cap in self.models.items():
            _model_name(name, "models")
            _number(cap, f"capacity of model {name!r}", int, 0)
        _number(self.latency_ms, "latency_ms", float, 0)
        _number(self.latency_spread, "latency_spread", float, 0, 1)
        _number(self.token_latency_ms, "token_latency_ms", float, 0)
        _number(self.output_tokens, "output_tokens", int, 0)
        _number(self.rate_limit_probability, "rate_limit_probability", float, 0, 1)
        if self.retry_after is not None:
            _number(self.retry_after, "retry_after", int, 0)
        for entry in self.schedule:
            _number(entry[0], "schedule time", float, 0)
            _model_name(entry[1], "schedule")
            if isinstance(entry, ScheduledFault):
                self._check_fault(entry.kind, entry.probability, entry.retry_after, "schedule")
            else:
                _number(entry[2], f"scheduled capacity of model {entry[1]!r}", int, 0)
        for fault in self.faults:
            if fault.model not in self.models:
                raise ValueError(f"faults: model {fault.model!r} is not served")
            self._check_fault(fault.kind, fault.probability, fault.retry_after, "faults")

    @staticmethod
    def _check_fault(kind: str, probability: float, retry_after: float | None, what: str) -> None:
        _fault_kind(kind, what)
        _probability(probability, f"{what}: probability of {kind}")
        if retry_after is not None:
            if kind != "rate_limit":
                raise ValueError(f"{what}: only rate_limit takes a retry-after")
            _number(retry_after, f"{what}: retry-after", float, 0, 86400)


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
    parser.add_argument(
        "--latency-spread",
        default="0",
        metavar="F",
        help="each answer's latency drawn uniformly within F (0..1) of --latency-ms either side",
    )
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
        "--fault",
        action="append",
        dest="faults",
        metavar="MODEL:KIND=P[:S]",
        help="inject a fault into MODEL's answers with probability P (0..1); repeatable; "
        f"KIND: {', '.join(FAULT_KINDS)}; S (rate_limit only): retry-after seconds "
        "(default --retry-after, else 1), e.g. big:server_error=1 big:rate_limit=0.5:3",
    )
    parser.add_argument(
        "--schedule",
        default="",
        metavar="T:MODEL=CAP|T:MODEL!KIND=P,...",
        help="changes at T seconds after start: capacities and fault probabilities, "
        'e.g. "30:big=0,90:big=4,10:big!server_error=1,40:big!server_error=0"',
    )
    parser.add_argument(
        "--seed", default=None, help="seed for the rate-limit, fault and latency draws"
    )


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
    schedule = parse_schedule(str(args.schedule or ""))
    known = set(models) | {e[1] for e in schedule if not isinstance(e, ScheduledFault)}
    faults: list[FaultSpec] = []
    seen: set[tuple[str, str]] = set()
    for spec in getattr(args, "faults", None) or []:
        fault = parse_fault(str(spec))
        if (fault.model, fault.kind) in seen:
            raise ValueError(f"--fault {fault.model}:{fault.kind} given more than once")
        seen.add((fault.model, fault.kind))
        faults.append(fault)
    for name in [f.model for f in faults] + [e[1] for e in schedule]:
        if name not in known:
            raise ValueError(f"fault for model {name!r}, which is not served (--model {name}:N)")
    return SimulatorConfig(
        models=models,
        latency_ms=_number(args.latency_ms, "--latency-ms", float, 0),
        latency_spread=_number(args.latency_spread, "--latency-spread", float, 0, 1),
        token_latency_ms=_number(args.token_latency_ms, "--token-latency-ms", float, 0),
        output_tokens=_number(args.output_tokens, "--output-tokens", int, 0, 1_000_000),
        rate_limit_probability=_number(
            args.rate_limit_probability, "--rate-limit-probability", float, 0, 1
        ),
        retry_after=None if retry_after is None else _number(retry_after, "--retry-after", int, 0),
        schedule=schedule,
        seed=None if seed is None else _number(seed, "--seed", int),
        faults=faults,
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
        f"latency {config.latency_ms:g} ms"
        + (f" ± {config.latency_spread:.0%}" if config.latency_spread else ""),
        f"token latency {config.token_latency_ms:g} ms",
        f"{config.output_tokens} output tokens",
    ]
    if config.rate_limit_probability:
        extras.append(f"429 probability {config.rate_limit_probability:g}")
    if config.faults:
        extras.append(
            "faults " + " ".join(f"{f.model}:{f.kind}={f.probability:g}" for f in config.faults)
        )
    if config.schedule:
        extras.append(f"{len(config.schedule)} scheduled change(s)")
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
        # A `hang` fault never ends by itself: don't let one block Ctrl-C / SIGTERM for ever.
        timeout_graceful_shutdown=2,
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
    # Injected faults: kind -> probability (> 0), in FAULT_KINDS order. `fault_plan` is the same
    # as a tuple, and empty when there is none: the only thing the hot path looks at.
    faults: dict[str, float] = field(default_factory=dict)
    fault_plan: tuple[tuple[str, float], ...] = ()
    retry_after: float | None = None  # for the rate_limit fault; None: --retry-after, else 1
    injected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAULT_KINDS, 0))

    def set_faults(self, faults: dict[str, float]) -> None:
        """Replace the fault table (kinds and probabilities must already be valid)."""
        self.faults = {k: float(faults[k]) for k in FAULT_KINDS if faults.get(k)}
        self.fault_plan = tuple(self.faults.items())

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
        self.injected = dict.fromkeys(FAULT_KINDS, 0)
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
            "faults": dict(self.faults),
            "retry_after": self.retry_after,
            "injected": dict(self.injected),
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


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _transport(send: Send) -> Any:
    """The asyncio transport of uvicorn's connection (its `send` is a bound method), or None."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    return transport if hasattr(transport, "abort") else None


async def _drop_connection(send: Send, receive: Receive, reset: bool) -> None:
    """Close the connection without finishing the HTTP response.

    ASGI has no message for this, and raising from the app doesn't do it either (uvicorn then
    answers 500 if nothing was sent yet, and logs a traceback). So this reaches for the
    server's transport, which uvicorn's `send` is bound to. ``reset``: SO_LINGER 0 first, so
    the kernel sends a TCP RST (the client reads ECONNRESET) instead of a FIN (an early EOF).
    Under another server, raises ConnectionResetError, for the server to drop the connection.
    """
    transport = _transport(send)
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
        await asyncio.wait_for(_wait_disconnect(receive), 5)


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
        self._spread = config.latency_spread
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
        self._fault_retry_after = 1.0 if config.retry_after is None else float(config.retry_after)
        self._fault_bodies: dict[str, tuple[int, list, bytes]] = {
            kind: (status, _json_headers(body), body)
            for kind, status, body in (
                ("capacity", 503, self._capacity_body),
                ("rate_limit_bare", 429, self._rate_body),
                ("auth", 401, error_body(AUTH_MESSAGE, "invalid_request_error", "invalid_api_key")),
                ("server_error", 500, error_body(SERVER_ERROR_MESSAGE, "server_error", None)),
                ("garbage", 200, GARBAGE_BODY),
            )
        }
        self._context_length_bodies = {
            kind: error_body(
                CONTEXT_LENGTH_MESSAGE, "invalid_request_error", "context_length_exceeded", param
            )
            for kind, param in (
                ("chat", "messages"), ("completion", "prompt"), ("embedding", "input")
            )
        }  # fmt: skip
        for fault in config.faults:
            self.set_fault(fault.model, fault.kind, fault.probability, fault.retry_after)

        self._post_routes: dict[str, Callable[[dict], _Plan]] = {
            "/v1/chat/completions": self._plan_chat,
            "/v1/completions": self._plan_completion,
            "/v1/embeddings": self._plan_embedding,
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
        try:
            capacity, faults, retry_after = self._admin_changes(req)
        except _BadRequest as exc:
            code = f"invalid_{exc.param}" if exc.param else "invalid_body"
            await self._send_error(send, 400, exc.message, "invalid_request_error", code, exc.param)
            return
        if capacity is None and name not in self.models:
            await self._model_not_found(send, name)  # creating a model takes a capacity
            return
        state = self.set_capacity(name, capacity) if capacity is not None else self.models[name]
        if faults is not None:
            state.set_faults(faults)
        if retry_after is not ...:
            state.retry_after = retry_after
        await self._send_obj(send, 200, {"name": name, **state.stats()})

    @staticmethod
    def _admin_changes(req: Any) -> tuple[int | None, dict[str, float] | None, Any]:
        """Validate an admin body: (capacity, faults, retry_after), None / ... if absent."""
        usage = (
            'Body must be a JSON object with one or more of {"capacity": <integer >= 0>, '
            '"faults": {<kind>: <probability 0..1>, ...}, "retry_after": <seconds >= 0 or null>}'
        )
        if not isinstance(req, dict) or not req:
            raise _BadRequest(usage)
        unknown = sorted(set(req) - {"capacity", "faults", "retry_after"})
        if unknown:
            raise _BadRequest(f"Unknown key {unknown[0]!r}. {usage}")
        capacity = req.get("capacity")
        if "capacity" in req and (
            isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0
        ):
            raise _BadRequest('Body must be JSON {"capacity": <integer >= 0>}', "capacity")
        faults = req.get("faults")
        if "faults" in req:
            if not isinstance(faults, dict):
                raise _BadRequest(
                    '"faults" must be an object {<kind>: <probability 0..1>}; {} clears them',
                    "faults",
                )
            for kind, probability in faults.items():
                try:
                    _fault_kind(kind, "faults")
                    if not isinstance(probability, (int, float)):
                        raise ValueError(f"faults: probability of {kind} must be a number")
                    _probability(probability, f"faults: probability of {kind}")
                except ValueError as exc:
                    raise _BadRequest(str(exc), "faults") from None
        retry_after: Any = ...
        if "retry_after" in req:
            retry_after = req["retry_after"]
            if retry_after is not None:
                if not isinstance(retry_after, (int, float)):
                    raise _BadRequest(
                        "retry_after must be a number of seconds or null", "retry_after"
                    )
                try:
                    retry_after = _number(retry_after, "retry_after", float, 0, 86400)
                except ValueError as exc:
                    raise _BadRequest(str(exc), "retry_after") from None
        return capacity, faults, retry_after

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
        if state.fault_plan and (fault := self._draw_fault(state.fault_plan)) is not None:
            await self._inject(fault, state, plan, model, scope, receive, send)
            return
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

    # -- fault injection -------------------------------------------------------------------

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
        plan: _Plan,
        model: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        if fault == "stream_cut" and not plan.stream:
            fault = "reset"  # nothing to cut: drop the connection, counted as stream_cut
            state.injected["stream_cut"] += 1
        elif fault not in _SLOT_FAULTS:
            state.injected[fault] += 1
        if fault == "reset":
            await _drop_connection(send, receive, reset=True)
        elif fault == "rate_limit":
            seconds = state.retry_after
            if seconds is None:
                seconds = self._fault_retry_after
            headers = _json_headers(
                self._rate_body,
                [
                    (b"retry-after", b"%d" % math.ceil(seconds)),
                    (b"retry-after-ms", b"%d" % round(seconds * 1000)),
                ],
            )
            await self._send_raw(send, 429, headers, self._rate_body)
        elif fault == "context_length":
            body = self._context_length_bodies[plan.kind]
            await self._send_raw(send, 400, _json_headers(body), body)
        elif fault == "not_found":
            await self._model_not_found(send, model)
        elif fault == "garbage" and plan.stream:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            await send({"type": "http.response.body", "body": b"data: " + GARBAGE_BODY + b"\n\n"})
        elif fault in _SLOT_FAULTS:
            await self._slot_fault(fault, state, plan, model, scope, receive, send)
        else:
            await self._send_raw(send, *self._fault_bodies[fault])

    async def _slot_fault(
        self,
        fault: str,
        state: ModelState,
        plan: _Plan,
        model: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """`hang` / `stream_cut`: admitted like a real request, holding a slot while they run."""
        if state.in_flight >= state.capacity:
            state.capacity_errors += 1
            await self._send_raw(send, 503, self._capacity_headers, self._capacity_body)
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
                    await _wait_disconnect(receive)  # the slot is held until the client gives up
                except asyncio.CancelledError:
                    # uvicorn cancels what still runs 2 s into a shutdown: end as a dropped
                    # connection rather than a 500 and a traceback.
                    if _transport(send) is None:
                        raise
                    task.uncancel()
                    await _drop_connection(send, receive, reset=False)
                return
            guard = _Guard()
            watcher = asyncio.get_running_loop().create_task(
                _watch_disconnect(receive, task, guard)
            )
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
        self, send: Send, receive: Receive, plan: _Plan, model: str, guard: _Guard
    ) -> None:
        """The first half of a streamed answer, then the connection drops (no last chunk)."""
        key = (plan.kind, model, plan.choices, plan.tokens, plan.include_usage)
        first, token, _ = self._template(key, lambda: self._build_stream(plan, model))
        ids = self._ids_for(plan.kind == "chat")
        first = self._fill(first, plan, ids) if first else b""
        token = self._fill(token, plan, ids)
        if self._latency:
            await asyncio.sleep(self.draw_latency())
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        sent = plan.tokens // 2
        if self._token_latency:
            if first:
                await send({"type": "http.response.body", "body": first, "more_body": True})
            for _ in range(sent):
                await asyncio.sleep(self._token_latency)
                await send({"type": "http.response.body", "body": token, "more_body": True})
        else:
            body = first + token * sent
            await send({"type": "http.response.body", "body": body, "more_body": True})
        guard.finishing = True  # our own disconnect, not the client's
        await _drop_connection(send, receive, reset=False)

    def _fill(self, template: bytes, plan: _Plan, ids: tuple[bytes, bytes]) -> bytes:
        """Put this request's id, timestamp and usage into a cached template."""
        out = template.replace(_MARK_ID, ids[0]).replace(_MARK_TS, ids[1])
        if _MARK_PT in out:
            completion = plan.tokens * plan.choices
            out = out.replace(_MARK_PT, b"%d" % plan.prompt_tokens).replace(
                _MARK_TT, b"%d" % (plan.prompt_tokens + completion)
            )
        return out

    def draw_latency(self) -> float:
        """Seconds before this answer starts."""
        if not self._spread:
            return self._latency
        return self._latency * (1 + self._spread * (2 * self._rng.random() - 1))

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
            await asyncio.sleep(self.draw_latency())
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
            await asyncio.sleep(self.draw_latency())
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
