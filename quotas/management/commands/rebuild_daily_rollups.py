from datetime import date

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_date

from quotas.rollups import daily_rollups_rebuild


def _day(value: str) -> date:
    try:
        day = parse_date(value)
    except ValueError:
        day = None
    if day is None:
        raise CommandError(f"{value!r} is not a day: use YYYY-MM-DD.")
    return day


class Command(BaseCommand):
    help = "Make the daily usage rollups again from the hourly ones (all days, or from a UTC "
    help += "day on): after hourly rows were written without their days, say by workers of an "
    help += "older version still running while an upgrade migrated."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", metavar="YYYY-MM-DD", help="first UTC day to rebuild")

    def handle(self, *args: object, since: str | None, **options: object) -> None:
        first = _day(since) if since else None
        rows = daily_rollups_rebuild(since=first)
        where = f"from {first:%Y-%m-%d}" if first else "all days"
        self.stdout.write(f"rebuilt the daily usage rollups ({where}): {rows} rows")
