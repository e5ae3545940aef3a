"""The daily usage rollup, made from the hourly one: per batch as the audit writer upserts
(`daily_rows`), and from the whole hourly table at once (`daily_rollups_rebuild`, also the
migration that brought the daily table in)."""

from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

from django.db import connections, router, transaction
from django.db.models import Max, Model, Sum
from django.db.models.functions import TruncDate

from quotas.models import ROLLUP_COUNTS, DailyUsageRollup, UsageRollup

_KEY = ("key_prefix", "route", "deployment")
_OWNERS = ("member_id", "application_id", "team_id")


def daily_rows(hourly: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hourly rollup rows (as the audit writer builds them) added up per UTC day, key, route
    and deployment, in key order (so writers lock rows alike, as for the hourly rows)."""
    days: dict[tuple[date, str, str, str], dict[str, Any]] = {}
    for row in hourly:
        day = row["hour"].astimezone(UTC).date()
        key = (day, *(row[c] for c in _KEY))
        found = days.get(key)
        if found is None:
            found = days[key] = {"day": day, **{c: row[c] for c in (*_KEY, *_OWNERS)}}
            found.update(dict.fromkeys(ROLLUP_COUNTS, 0))
            found["cost"] = Decimal(0)
        for name in ROLLUP_COUNTS:
            found[name] += row[name]
    return [days[k] for k in sorted(days)]


def insert_daily_from_hourly(
    hourly: type[Model], daily: type[Model], *, using: str, since: date | None = None
) -> None:
    """INSERT … SELECT: the hourly rows (from the UTC day `since`) summed per UTC day into
    the daily table, in the database. The models are parameters so the migration can pass
    its historical ones."""
    rows = hourly._default_manager.using(using).all()  # type: ignore[attr-defined]
    if since is not None:
        rows = rows.filter(hour__gte=datetime.combine(since, time(), UTC))
    # A key belongs to one member, application and team: Max picks that one.
    grouped = (
        rows.annotate(utc_day=TruncDate("hour", tzinfo=UTC))
        .values("utc_day", *_KEY)
        .annotate(
            **{f"o_{c}": Max(c) for c in _OWNERS},
            **{f"s_{c}": Sum(c) for c in ROLLUP_COUNTS},
        )
        .order_by()
    )
    select, params = grouped.query.sql_with_params()
    connection = connections[using]
    q = connection.ops.quote_name
    columns = ["day", *_KEY, *_OWNERS, *ROLLUP_COUNTS]
    aliases = ["utc_day", *_KEY, *(f"o_{c}" for c in _OWNERS), *(f"s_{c}" for c in ROLLUP_COUNTS)]
    # The grouped query as a subquery, its columns picked by name: the SELECT list's order
    # is Django's business.
    sql = (
        f"INSERT INTO {q(daily._meta.db_table)} ({', '.join(q(c) for c in columns)}) "
        f"SELECT {', '.join(q(a) for a in aliases)} FROM ({select}) grouped"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def daily_rollups_rebuild(*, since: date | None = None) -> int:
    """Recompute the daily rollups from the hourly ones (all days, or from the UTC day
    `since`), in one transaction; the number of daily rows now in that range. For a
    database filled by other means than the audit writer, or hourly rows written while the
    daily table did not exist yet (workers of an older version during an upgrade)."""
    using = router.db_for_write(DailyUsageRollup)
    with transaction.atomic(using=using):
        if connections[using].vendor == "postgresql":
            # Writers wait until the rebuild commits, then add their calls to the rebuilt
            # rows; their hourly rows are in the rebuild only if they committed before.
            with connections[using].cursor() as cursor:
                table = connections[using].ops.quote_name(DailyUsageRollup._meta.db_table)
                cursor.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
        stale = DailyUsageRollup.objects.using(using).all()
        if since is not None:
            stale = stale.filter(day__gte=since)
        stale.delete()
        insert_daily_from_hourly(UsageRollup, DailyUsageRollup, using=using, since=since)
        fresh = DailyUsageRollup.objects.using(using).all()
        return (fresh.filter(day__gte=since) if since else fresh).count()
