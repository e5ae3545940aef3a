"""`manage.py prune_batch_files`: free the storage of batch files past their expiry (an
application's own expired files also go at its next upload). Run it daily from cron."""

from typing import Any

from django.core.management.base import BaseCommand

from batches.services import files_expired_delete


class Command(BaseCommand):
    help = "Delete batch files past their expires_at (not the input of a running batch)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"{files_expired_delete()} expired batch file(s) deleted.")
