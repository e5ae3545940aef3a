"""OpenAI-compatible upstream simulator: the model provider used by tests, the demo and benchmarks.

A plain ASGI3 application (no Django, no framework) so it is never the bottleneck; it imports
none of Sluice's apps and is not installed with them. Faults of every upstream error class can
be injected per model, by probability (``--fault``), over time (``--schedule``) or live
(``POST /admin/models/NAME``): see ``FAULT_KINDS``.

Run it with ``python -m simulator --port 9100 --model big:4`` or, inside the project,
``python manage.py simulate_upstream`` (same flags).

Modules: ``config`` (flags' values, checked), ``state`` (per model), ``requests`` (a request
read into a plan), ``responses`` (answers, encoded once), ``faults`` (injection), ``admin``
(the live-change API's body), ``wire`` (ASGI plumbing), ``app`` (the ASGI app), ``cli``.
"""

from simulator.app import Simulator
from simulator.cli import (
    add_arguments,
    backlog_from_args,
    bind_from_args,
    config_from_args,
    describe,
    main,
    serve,
    serve_http2,
)
from simulator.config import (
    FAULT_KINDS,
    FaultSpec,
    ScheduledFault,
    SimulatorConfig,
    parse_fault,
    parse_model_spec,
    parse_schedule,
)
from simulator.responses import CAPACITY_MESSAGE

__all__ = [
    "CAPACITY_MESSAGE",
    "FAULT_KINDS",
    "FaultSpec",
    "ScheduledFault",
    "Simulator",
    "SimulatorConfig",
    "add_arguments",
    "backlog_from_args",
    "bind_from_args",
    "config_from_args",
    "describe",
    "main",
    "parse_fault",
    "parse_model_spec",
    "parse_schedule",
    "serve",
    "serve_http2",
]
