"""What the simulator serves and how it misbehaves: models and capacities, latencies, faults,
the schedule; parsed from flags and checked, each bad value named in the error."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

DEFAULT_MODELS: dict[str, int] = {"big": 4, "medium": 16, "small": 64}
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9100

# Injectable faults, one per upstream error class (docs/routing.md). A model's
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
SLOT_FAULTS = frozenset({"hang", "stream_cut"})


def checked_number(
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


def checked_model_name(name: str, context: str) -> str:
    name = name.strip()
    if not name or not name.isprintable() or any(c.isspace() for c in name) or "/" in name:
        raise ValueError(
            f"{context}: model name must be non-empty, printable, without spaces or '/'"
        )
    return name


# The API a model answers in: chat (and completions, embeddings), `/v1/messages` for
# anthropic, `/v1/responses` for openai-responses.
SHAPES = ("openai", "anthropic", "openai-responses")


def split_shape(spec: str) -> tuple[str, str]:
    """``"claude-x:4:anthropic"`` -> ``("claude-x:4", "anthropic")``; no shape: openai;
    ``"gpt-r:4:openai-responses"`` answers on /v1/responses."""
    head, sep, last = spec.strip().rpartition(":")
    if sep and last in SHAPES:
        return head, last
    return spec, "openai"


def parse_model_spec(spec: str) -> tuple[str, int]:
    """``"big:4"`` -> ``("big", 4)``. The capacity is after the *last* colon ("llama3:8b:4")."""
    name, sep, capacity = spec.strip().rpartition(":")
    if not sep:
        raise ValueError(f"invalid model spec {spec!r}: expected NAME:CAPACITY, e.g. big:4")
    name = checked_model_name(name, f"invalid model spec {spec!r}")
    cap = checked_number(capacity.strip(), f"invalid model spec {spec!r}: capacity", int, 0)
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


def checked_fault_kind(kind: str, context: str) -> str:
    kind = kind.strip()
    if kind not in FAULT_KINDS:
        raise ValueError(
            f"{context}: unknown fault kind {kind!r} (one of {', '.join(FAULT_KINDS)})"
        )
    return kind


def checked_probability(value: Any, what: str) -> float:
    return checked_number(value, what, float, 0, 1)


def _fault_value(value: str, kind: str, context: str) -> tuple[float, float | None]:
    """``"0.5"`` or ``"0.5:3"`` (rate_limit only) -> (probability, retry_after)."""
    probability, sep, param = value.partition(":")
    p = checked_probability(probability.strip(), f"{context}: probability")
    if not sep:
        return p, None
    if kind != "rate_limit":
        raise ValueError(f"{context}: only rate_limit takes a parameter (:RETRY_AFTER_SECONDS)")
    return p, checked_number(param.strip(), f"{context}: retry-after", float, 0, 86400)


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
    name = checked_model_name(name, context)
    kind = checked_fault_kind(kind, context)
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
        when = checked_number(at.strip(), f"{context}: time", float, 0)
        if "!" in name:
            name, _, kind = name.rpartition("!")
            name = checked_model_name(name, context)
            kind = checked_fault_kind(kind, context)
            probability, retry_after = _fault_value(value, kind, context)
            entries.append(ScheduledFault(when, name, kind, probability, retry_after))
        else:
            name = checked_model_name(name, context)
            cap = checked_number(value.strip(), f"{context}: capacity", int, 0)
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
    # Each gap between chunks drawn within this fraction either side of token_latency_ms: a
    # slow model trickling tokens (one every 0.5-1 s: 750 ms, spread 1/3).
    token_latency_spread: float = 0.0
    output_tokens: int = 16
    rate_limit_probability: float = 0.0
    retry_after: int | None = None  # seconds; None sends the 429 without Retry-After
    schedule: list[ScheduleEntry] = field(default_factory=list)
    seed: int | None = None  # seeds every random draw (rate limits, faults, latencies)
    faults: list[FaultSpec] = field(default_factory=list)
    anthropic_models: frozenset[str] = frozenset()  # answer on /v1/messages, Messages-shaped
    responses_models: frozenset[str] = frozenset()  # answer on /v1/responses

    def __post_init__(self) -> None:
        for name, cap in self.models.items():
            checked_model_name(name, "models")
            checked_number(cap, f"capacity of model {name!r}", int, 0)
        checked_number(self.latency_ms, "latency_ms", float, 0)
        checked_number(self.latency_spread, "latency_spread", float, 0, 1)
        checked_number(self.token_latency_ms, "token_latency_ms", float, 0)
        checked_number(self.token_latency_spread, "token_latency_spread", float, 0, 1)
        checked_number(self.output_tokens, "output_tokens", int, 0)
        checked_number(self.rate_limit_probability, "rate_limit_probability", float, 0, 1)
        if self.retry_after is not None:
            checked_number(self.retry_after, "retry_after", int, 0)
        for entry in self.schedule:
            checked_number(entry[0], "schedule time", float, 0)
            checked_model_name(entry[1], "schedule")
            if isinstance(entry, ScheduledFault):
                self._check_fault(entry.kind, entry.probability, entry.retry_after, "schedule")
            else:
                checked_number(entry[2], f"scheduled capacity of model {entry[1]!r}", int, 0)
        for fault in self.faults:
            if fault.model not in self.models:
                raise ValueError(f"faults: model {fault.model!r} is not served")
            self._check_fault(fault.kind, fault.probability, fault.retry_after, "faults")

    @staticmethod
    def _check_fault(kind: str, probability: float, retry_after: float | None, what: str) -> None:
        checked_fault_kind(kind, what)
        checked_probability(probability, f"{what}: probability of {kind}")
        if retry_after is not None:
            if kind != "rate_limit":
                raise ValueError(f"{what}: only rate_limit takes a retry-after")
            checked_number(retry_after, f"{what}: retry-after", float, 0, 86400)
