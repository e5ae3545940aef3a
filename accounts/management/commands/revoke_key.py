from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import AccountError, Actor, key_revoke


class Command(BaseCommand):
    help = "Revoke an API key by its public prefix (sk-sluice-…). Every worker refuses it "
    help += "within a few seconds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: object, prefix: str, **options: object) -> None:
        try:
            key = key_revoke(prefix=prefix, actor=Actor.command("revoke_key"))
        except AccountError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Revoked {key.prefix} at {key.revoked_at.isoformat()}")
