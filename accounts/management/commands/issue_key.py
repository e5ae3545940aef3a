from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import AccountError, Actor, key_issue


class Command(BaseCommand):
    help = "Issue an API key for a member and an application. The key is printed once, alone "
    help += "on the last line; only its hash is stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--member", required=True, help="the member's email")
        parser.add_argument("--application", required=True, help="the application's slug")
        parser.add_argument("--name", default="", help="a label for the key")
        parser.add_argument("--expires-days", type=int, default=None)

    def handle(self, *args: object, **options: object) -> None:
        try:
            key, plaintext = key_issue(
                member_email=str(options["member"]),
                application_slug=str(options["application"]),
                name=str(options["name"]),
                expires_days=options["expires_days"],  # type: ignore[arg-type]
                actor=Actor.command("issue_key"),
            )
        except AccountError as exc:
            raise CommandError(str(exc)) from None
        expiry = key.expires_at.isoformat() if key.expires_at else "never"
        self.stderr.write(
            f"Key {key.prefix} for {options['member']} / {options['application']} "
            f"(expires: {expiry}). It is shown once; store it now."
        )
        self.stdout.write(plaintext)
