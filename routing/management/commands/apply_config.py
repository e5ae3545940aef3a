from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import Actor
from routing.catalog.config_file import ConfigError
from routing.catalog.services import config_apply


class Command(BaseCommand):
    help = "Create or update upstreams, deployments, routes, teams, applications and members "
    help += "from a TOML file. Idempotent; a bad file changes nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")

    def handle(self, *args: object, file: str, **options: object) -> None:
        try:
            text = Path(file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from None
        try:
            diff = config_apply(text=text, actor=Actor.command("apply_config"))
        except ConfigError as exc:
            raise CommandError(f"{file}: {exc}") from None
        self.stdout.write(f"{file}: {diff.report.summary()}")
