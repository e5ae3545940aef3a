from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import Actor
from routing.observability.retention import audit_prune


class Command(BaseCommand):
    help = "Delete audited calls and their attempts older than DAYS, in small batches "
    help += "(usage rollups are kept, so reports over old periods still work)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            type=float,
            default=None,
            metavar="DAYS",
            help="default: SLUICE_AUDIT_RETENTION_DAYS",
        )
        parser.add_argument("--batch-size", type=int, default=5000)
        parser.add_argument(
            "--pause", type=float, default=0.0, help="seconds to sleep between batches"
        )

    def handle(
        self,
        *args: object,
        older_than: float | None,
        batch_size: int,
        pause: float,
        **options: object,
    ) -> None:
        days = older_than if older_than is not None else settings.SLUICE_AUDIT_RETENTION_DAYS
        if days is None:
            raise CommandError("Give --older-than DAYS or set SLUICE_AUDIT_RETENTION_DAYS.")
        try:
            pruned = audit_prune(
                older_than_days=days,
                batch_size=batch_size,
                pause_seconds=pause,
                actor=Actor.command("prune_audit"),
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"deleted {pruned.calls} calls and {pruned.attempts} attempts created before "
            f"{pruned.cutoff:%Y-%m-%d %H:%M} UTC (usage rollups kept)"
        )
