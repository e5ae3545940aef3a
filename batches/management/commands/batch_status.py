"""`manage.py batch_status`: every batch, newest first, with its progress and window."""

from typing import Any

from django.core.management.base import BaseCommand

from batches.selectors import batch_progress


class Command(BaseCommand):
    help = "List batches with their progress and the window they run in."

    def handle(self, *args: Any, **options: Any) -> None:
        rows = batch_progress()
        if not rows:
            self.stdout.write("No batches.")
            return
        self.stdout.write(
            f"{'batch':<32} {'application':<16} {'status':<12} {'done':>13} "
            f"{'failed':>7} {'running':>8}  window"
        )
        for r in rows:
            done = f"{r['completed'] + r['failed']}/{r['total']}"
            self.stdout.write(
                f"{r['id']:<32} {r['application']:<16} {r['status']:<12} {done:>13} "
                f"{r['failed']:>7} {r['running']:>8}  {r['windows']}"
            )
