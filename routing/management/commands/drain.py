from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import Actor
from routing.catalog.services import RoutingError, deployment_drain


class Command(BaseCommand):
    help = "Take a deployment out of service for a drill (traffic flows down the chain), or "
    help += "bring it back with --undo. Every worker sees it within a few seconds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("deployment")
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--minutes", type=float)
        group.add_argument("--undo", action="store_true")
        parser.add_argument("--reason", default="", help="why (shown in the console)")

    def handle(
        self,
        *args: object,
        deployment: str,
        minutes: float | None,
        undo: bool,
        reason: str,
        **options: object,
    ) -> None:
        if minutes is not None and not 0 < minutes <= 7 * 24 * 60:
            raise CommandError("--minutes must be between 0 and one week")
        try:
            drained = deployment_drain(
                name=deployment,
                minutes=None if undo else minutes,
                reason=reason,
                actor=Actor.command("drain"),
            )
        except RoutingError as exc:
            raise CommandError(str(exc)) from None
        if drained.drained_until is None:
            self.stdout.write(f"{deployment} is back in service")
        else:
            self.stdout.write(f"{deployment} drained until {drained.drained_until.isoformat()}")
