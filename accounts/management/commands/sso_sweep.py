from argparse import ArgumentTypeError
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from accounts.services import Actor
from accounts.sso_services import sso_sweep


def _days(value: str) -> int:
    days = int(value) if value.isdigit() else 0
    if days < 1:
        raise ArgumentTypeError("a whole number of days, at least 1")
    return days


class Command(BaseCommand):
    help = (
        "Members who sign in through the OpenID provider and have not for --idle-days: "
        "listed, or with --apply deactivated and their keys revoked (one admin action each). "
        "A member who left the company never signs in again; run this daily from cron."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--idle-days", type=_days, default=30)
        parser.add_argument("--apply", action="store_true", help="change them (default: list)")

    def handle(self, *args: object, idle_days: int, apply: bool, **options: Any) -> None:
        swept = sso_sweep(idle_days=idle_days, apply=apply, actor=Actor.command("sso_sweep"))
        verb = "deactivated" if apply else "would deactivate"
        for s in swept:
            self.stdout.write(
                f"{verb} {s.email} (last sign-in {s.last_login_at:%Y-%m-%d}), "
                f"{s.keys_revoked} key(s) {'revoked' if apply else 'to revoke'}"
            )
        if not swept:
            self.stdout.write(f"nobody has been away for {idle_days} days")
        elif not apply:
            self.stdout.write("nothing changed: run again with --apply")
