"""The command line: flags shared by `python -m simulator` and `manage.py simulate_upstream`,
the start-up line, and the server (uvicorn; granian with `--http2`)."""

from __future__ import annotations

import argparse
import json
import os

from simulator import collector
from simulator.app import Simulator
from simulator.config import (
    DEFAULT_HOST,
    DEFAULT_MODELS,
    DEFAULT_PORT,
    FAULT_KINDS,
    FaultSpec,
    ScheduledFault,
    SimulatorConfig,
    checked_number,
    parse_fault,
    parse_model_spec,
    parse_schedule,
    split_shape,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI flags, shared by ``python -m simulator`` and ``manage.py simulate_upstream``.

    Values are parsed as strings and validated by :func:`config_from_args`, so both entry points
    report bad input the same way (ValueError -> parser error / CommandError).
    """
    parser.add_argument("--host", default=DEFAULT_HOST, help="bind address (default %(default)s)")
    parser.add_argument("--port", default=str(DEFAULT_PORT), help="bind port (default %(default)s)")
    parser.add_argument(
        "--backlog",
        default="2048",
        help="listen backlog (default %(default)s, uvicorn's; the kernel caps it at "
        "net.core.somaxconn): raise it for thousands of connections opened at once",
    )
    parser.add_argument(
        "--http2",
        action="store_true",
        help="serve HTTP/2 without TLS (prior knowledge) beside HTTP/1.1 on the same port, "
        "through granian: for an upstream set to `http2`",
    )
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME:CAPACITY[:anthropic|:openai-responses]",
        help="a served model and its max requests in flight (0 = always full); `:anthropic` "
        "serves it on /v1/messages in Anthropic shape, `:openai-responses` on /v1/responses; "
        "repeatable; "
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
    parser.add_argument(
        "--token-latency-spread",
        default="0",
        metavar="F",
        help="each gap between chunks drawn uniformly within F (0..1) of --token-latency-ms "
        "either side (slow trickle streams: --token-latency-ms 750 --token-latency-spread 0.33)",
    )
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
    anthropic: set[str] = set()
    responses: set[str] = set()
    for spec in specs:
        spec, shape = split_shape(str(spec))
        name, cap = parse_model_spec(spec)
        if name in models:
            raise ValueError(f"--model {name!r} given more than once")
        models[name] = cap
        if shape == "anthropic":
            anthropic.add(name)
        elif shape == "openai-responses":
            responses.add(name)
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
        anthropic_models=frozenset(anthropic),
        responses_models=frozenset(responses),
        latency_ms=checked_number(args.latency_ms, "--latency-ms", float, 0),
        latency_spread=checked_number(args.latency_spread, "--latency-spread", float, 0, 1),
        token_latency_ms=checked_number(args.token_latency_ms, "--token-latency-ms", float, 0),
        token_latency_spread=checked_number(
            args.token_latency_spread, "--token-latency-spread", float, 0, 1
        ),
        output_tokens=checked_number(args.output_tokens, "--output-tokens", int, 0, 1_000_000),
        rate_limit_probability=checked_number(
            args.rate_limit_probability, "--rate-limit-probability", float, 0, 1
        ),
        retry_after=None
        if retry_after is None
        else checked_number(retry_after, "--retry-after", int, 0),
        schedule=schedule,
        seed=None if seed is None else checked_number(seed, "--seed", int),
        faults=faults,
    )


def bind_from_args(args: argparse.Namespace) -> tuple[str, int]:
    host = str(args.host).strip()
    if not host:
        raise ValueError("--host must not be empty")
    return host, checked_number(args.port, "--port", int, 1, 65535)


def backlog_from_args(args: argparse.Namespace) -> int:
    return checked_number(getattr(args, "backlog", 2048), "--backlog", int, 1, 1_000_000)


def describe(config: SimulatorConfig, host: str, port: int) -> str:
    """The one line printed at start-up."""
    models = ", ".join(f"{n} (capacity {c})" for n, c in config.models.items()) or "no models"
    extras = [
        f"latency {config.latency_ms:g} ms"
        + (f" ± {config.latency_spread:.0%}" if config.latency_spread else ""),
        f"token latency {config.token_latency_ms:g} ms"
        + (f" ± {config.token_latency_spread:.0%}" if config.token_latency_spread else ""),
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


def serve(
    config: SimulatorConfig,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    backlog: int = 2048,
) -> None:
    # Imported here so the module (and its tests' in-process use) doesn't need the server stack.
    import uvicorn

    collector.settle()
    uvicorn.run(
        Simulator(config),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        loop="uvloop",
        http="httptools",
        backlog=backlog,
        lifespan="on",
        proxy_headers=False,  # nothing sits in front of the simulator: skip the middleware
        server_header=False,
        # A `hang` fault never ends by itself: don't let one block Ctrl-C / SIGTERM for ever.
        timeout_graceful_shutdown=2,
    )


_FLAGS = "SLUICE_SIMULATOR_FLAGS"  # the parsed flags, for granian's worker to build the app


def serve_http2(args: argparse.Namespace, host: str, port: int, backlog: int) -> None:
    """Granian (HTTP/1.1 and cleartext HTTP/2 on one port) in one worker process, which
    builds the app from the same flags (`granian_app`)."""
    from granian import Granian

    os.environ[_FLAGS] = json.dumps(vars(args), default=str)
    Granian(
        "simulator.cli:granian_app",
        factory=True,
        interface="asgi",
        address=host,
        port=port,
        backlog=backlog,
        backpressure=1_000_000,  # granian's own default (the backlog) would queue calls past it
        http="auto",
        workers=1,
        loop="uvloop",
        log_enabled=False,
        workers_kill_timeout=2,
    ).serve()


def granian_app() -> Simulator:
    collector.settle()  # in granian's worker process
    return Simulator(config_from_args(argparse.Namespace(**json.loads(os.environ[_FLAGS]))))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m simulator",
        description="OpenAI-compatible upstream simulator (plain ASGI, served by uvicorn; "
        "by granian with --http2).",
    )
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        host, port = bind_from_args(args)
        backlog = backlog_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    print(describe(config, host, port), flush=True)
    if args.http2:
        serve_http2(args, host, port, backlog)
    else:
        serve(config, host, port, backlog)


if __name__ == "__main__":
    main()
