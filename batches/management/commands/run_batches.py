"""`manage.py run_batches`: a batch runner. Run as many as you like, on any host: they
share the work through the database (batches/services.py)."""

import asyncio
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from batches.runner import run_until
from core.background import settle_background
from routing.observability.audit import audit_writer
from routing.request_path.upstream import close_sessions


class Command(BaseCommand):
    help = "Run the Batch API's lines (Ctrl-C or SIGTERM stops it; its lines go back)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--max-in-flight", type=int, default=64, help="Lines this runner runs at once, at most."
        )

    def handle(self, *args: Any, max_in_flight: int, **options: Any) -> None:
        asyncio.run(self._main(max_in_flight))

    async def _main(self, max_in_flight: int) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await run_until(stop, max_in_flight=max_in_flight)
        finally:
            await settle_background(5.0)  # the slots of abandoned lines go back now
            await audit_writer.flush()
            await close_sessions()
