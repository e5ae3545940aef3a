"""`manage.py run_batches`: a batch runner. Run as many as you like, on any host: they
share the work through the database (batches/services.py).

It lowers its own CPU priority first (`--nice`, 19 by default: the lowest): beside gateway
workers on the same host, the kernel gives them the CPU before the runner, so the batch
takes the CPU they leave, as it takes the deployment slots they leave (bench/
batch_interactive.py: with 10, interactive p99 beside a batch was 1.5x the one without;
with 19, 1.2x; as is, 7x). The PostgreSQL backends serving it on the same host are lowered
as much, where it may (batches/priority.py).

It also leaves a share of the host's CPU idle (`--cpu-headroom`, SLUICE_BATCH_CPU_HEADROOM):
priority does not reach the servers both share, and a batch running flat out kept
interactive calls waiting for them (batches/headroom.py).

Its event loop is uvloop's where it is installed (uvicorn[standard] brings it), as the
gateway's is: a line's call is the same live request path, whose timers, tasks and
sockets cost less CPU there than on asyncio's own loop. For the same reason it collects
garbage as a worker does (core/gc_schedule.py): young objects less often, the whole heap on
a clock.
"""

import argparse
import asyncio
import signal
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from batches.priority import lower_backends, lower_threads
from batches.runner import run_until
from core.background import settle_background
from core.gc_schedule import hand_back, take_over
from routing.observability.audit import audit_writer
from routing.request_path.upstream import close_sessions, prepare_clients

NICE = 19


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed; None: asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _share(text: str | float) -> float:
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0 <= share <= 0.9:
        raise argparse.ArgumentTypeError(f"a share of the CPU from 0 to 0.9, not {text!r}")
    return share


class Command(BaseCommand):
    help = "Run the Batch API's lines (Ctrl-C or SIGTERM stops it; its lines go back)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--max-in-flight", type=int, default=64, help="Lines this runner runs at once, at most."
        )
        parser.add_argument(
            "--nice",
            type=int,
            default=NICE,
            choices=range(20),
            metavar="0-19",
            help=f"Lower the runner's CPU priority by this much (default {NICE}; 0: as is).",
        )
        parser.add_argument(
            "--cpu-headroom",
            type=_share,
            metavar="0-0.9",
            help=(
                "Share of the host's CPU the runner leaves idle, pacing its lines when the host "
                "is busier (default: SLUICE_BATCH_CPU_HEADROOM, 0.7; 0: as the slots allow)."
            ),
        )

    def handle(
        self, *args: Any, max_in_flight: int, nice: int, cpu_headroom: float | None, **options: Any
    ) -> None:
        if cpu_headroom is None:
            try:
                cpu_headroom = _share(settings.SLUICE_BATCH_CPU_HEADROOM)
            except argparse.ArgumentTypeError as error:
                raise CommandError(f"SLUICE_BATCH_CPU_HEADROOM: {error}") from None
        lower_threads(nice)
        lower_backends(nice)
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(self._main(max_in_flight, cpu_headroom))

    async def _main(self, max_in_flight: int, cpu_headroom: float = 0.0) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        prepare_clients()  # not at the first line's connection, holding the loop for every line
        clock = take_over(full_every=settings.SLUICE_GC_FULL_SECONDS)
        try:
            await run_until(stop, max_in_flight=max_in_flight, cpu_headroom=cpu_headroom)
        finally:
            if clock is not None:
                clock.cancel()
            await settle_background(5.0)  # the slots of abandoned lines go back now
            await audit_writer.flush()
            await close_sessions()
            hand_back()
