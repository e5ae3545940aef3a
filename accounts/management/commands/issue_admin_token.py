from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import AccountError, Actor, management_token_issue


class Command(BaseCommand):
    help = "Issue a management API token (/api/v1/). Without --user it is an admin token "
    help += "(global, or of --team); with --user it acts with that user's roles. The token "
    help += "is printed once, alone on the last line; only its hash is stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", default=None, help="the team's slug (scope the token)")
        parser.add_argument("--user", default=None, help="the email of the user it acts as")
        parser.add_argument("--name", default="", help="a label for the token")
        parser.add_argument("--expires-days", type=int, default=None)

    def handle(self, *args: object, **options: object) -> None:
        try:
            token, plaintext = management_token_issue(
                actor=Actor.command("issue_admin_token"),
                name=str(options["name"]),
                user_email=options["user"],  # type: ignore[arg-type]
                team_slug=options["team"],  # type: ignore[arg-type]
                expires_days=options["expires_days"],  # type: ignore[arg-type]
            )
        except AccountError as exc:
            raise CommandError(str(exc)) from None
        scope = f"team {token.team.slug}" if token.team else "global"
        who = token.user.email if token.user else "admin"
        expiry = token.expires_at.isoformat() if token.expires_at else "never"
        self.stderr.write(
            f"Management token {token.prefix} ({scope}, acts as {who}, expires: {expiry}). "
            "It is shown once; store it now."
        )
        self.stdout.write(plaintext)
