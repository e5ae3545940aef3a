from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import Actor
from quotas.models import Scope
from quotas.services import LimitError, limit_set


class Command(BaseCommand):
    help = "Set the limits of a key (public prefix), application (slug), member (email) or "
    help += "team (slug). Options not given stay as they are; 0 removes one limit, --clear all."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("scope", choices=Scope.values)
        parser.add_argument("name")
        parser.add_argument("--rpm", type=int, help="requests per minute")
        parser.add_argument("--tpm", type=int, help="tokens per minute")
        parser.add_argument("--concurrency", type=int, help="requests in flight")
        parser.add_argument("--daily-tokens", type=int)
        parser.add_argument("--monthly-tokens", type=int)
        parser.add_argument("--monthly-cost", type=float, help="USD per month")
        parser.add_argument("--clear", action="store_true")

    def handle(self, *args: object, **o: object) -> None:
        try:
            limit = limit_set(
                scope=str(o["scope"]),
                name=str(o["name"]),
                clear=bool(o["clear"]),
                actor=Actor.command("set_limit"),
                requests_per_minute=o["rpm"],
                tokens_per_minute=o["tpm"],
                max_concurrency=o["concurrency"],
                tokens_per_day=o["daily_tokens"],
                tokens_per_month=o["monthly_tokens"],
                cost_per_month=o["monthly_cost"],
            )
        except LimitError as exc:
            raise CommandError(str(exc)) from None
        if limit is None:
            self.stdout.write(f"{o['scope']} {o['name']}: no limits")
            return
        shown = {
            "rpm": limit.requests_per_minute,
            "tpm": limit.tokens_per_minute,
            "concurrency": limit.max_concurrency,
            "daily tokens": limit.tokens_per_day,
            "monthly tokens": limit.tokens_per_month,
            "monthly cost": limit.cost_per_month,
        }
        text = ", ".join(f"{k} {v}" for k, v in shown.items() if v is not None) or "none"
        self.stdout.write(f"{o['scope']} {o['name']}: {text}")
