"""``manage.py simulate_upstream``: run the OpenAI-compatible upstream simulator.

Only parses arguments; everything else lives in :mod:`simulator`, which the benchmarks
also run without Django (``python -m simulator``, same flags).
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import simulator


class Command(BaseCommand):
    help = (
        "Run the OpenAI-compatible upstream simulator (plain ASGI app on uvicorn; granian "
        "with --http2)."
    )
    # The simulator touches neither the database nor the project's models.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        simulator.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        ns = argparse.Namespace(**options)
        try:
            config = simulator.config_from_args(ns)
            host, port = simulator.bind_from_args(ns)
            backlog = simulator.backlog_from_args(ns)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(simulator.describe(config, host, port))
        self.stdout.flush()
        if options["http2"]:
            simulator.serve_http2(ns, host, port, backlog)
        else:
            simulator.serve(config, host, port, backlog)
