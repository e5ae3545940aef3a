from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.config_file import ConfigError, apply_config, load_config


class Command(BaseCommand):
    help = "Create or update upstreams, deployments, routes, teams, applications and members "
    help += "from a TOML file. Idempotent; a bad file changes nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file")

    def handle(self, *args: object, file: str, **options: object) -> None:
        try:
            report = apply_config(load_config(file))
        except ConfigError as exc:
            raise CommandError(f"{file}: {exc}") from None
        self.stdout.write(f"{file}: {report.summary()}")
