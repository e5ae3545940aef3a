"""Fill a bench database with a realistic audit trail: what the console and the reports meet
after a month of a busy team.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench \\
        .venv/bin/python bench/seed_audit.py [--calls 1000000] [--rollups 100000] [--reset]

Migrates the database, applies config/demo.toml when it has no deployments, and adds three
teams (`seed-*`) of members, applications and keys, then:
  - `--calls` CallRecord rows over the last `--days` (30) days: a working-day rhythm (busy
    afternoons, quiet nights and weekends), a few heavy members and many light ones, every
    route and deployment, outcomes from success to capacity exhaustion (the `big`
    deployment fills up at peak hours), fallbacks down the chains;
  - Attempt rows (one per upstream try) for `--attempt-share` (30 %) of the calls;
  - UsageRollup rows: the calls added up per hour, key, route and deployment, as the audit
    writer does, topped up to `--rollups` with older months whose calls were pruned (rollups
    outlive the calls);
  - DailyUsageRollup rows: those hours added up per UTC day (quotas/rollups.py's rebuild,
    as the audit writer would have written them).
Two console logins come with it: bench-admin@example.com (staff) and
bench-member@example.com (the heaviest member), both with the password `--password`.

PostgreSQL is filled with COPY (psycopg 3), SQLite with bulk_create batches. `--reset` empties
the audit tables first (this is a bench database, never a real one). Field lists are read
from the models, so columns added later get their defaults.
"""

import argparse
import os
import random
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, models, transaction  # noqa: E402

from accounts.keys import key_generate  # noqa: E402
from accounts.models import ApiKey, Application, Member, Team  # noqa: E402
from quotas.models import DailyUsageRollup, UsageRollup  # noqa: E402
from quotas.rollups import daily_rollups_rebuild  # noqa: E402
from routing.models import Attempt, CallRecord, Deployment, Outcome, Route  # noqa: E402

try:  # the rollups' latency histogram (absent from older schemas)
    from quotas.models import latency_field
except ImportError:  # pragma: no cover - older schema
    latency_field = None

BATCH = 50_000
# Share of calls per outcome (the rest succeed); capacity exhaustion rises at peak hours.
OUTCOMES = [
    (Outcome.RATE_LIMITED, 0.015),
    (Outcome.BUDGET_EXCEEDED, 0.003),
    (Outcome.CONCURRENCY_LIMITED, 0.004),
    (Outcome.INVALID_REQUEST, 0.006),
    (Outcome.UPSTREAM_CLIENT_ERROR, 0.004),
    (Outcome.UPSTREAM_ERROR, 0.006),
    (Outcome.UPSTREAM_TIMEOUT, 0.003),
    (Outcome.CLIENT_CANCELLED, 0.004),
]
REFUSED = {
    Outcome.RATE_LIMITED,
    Outcome.BUDGET_EXCEEDED,
    Outcome.CONCURRENCY_LIMITED,
    Outcome.INVALID_REQUEST,
}
STATUS = {
    Outcome.SUCCESS: 200,
    Outcome.RATE_LIMITED: 429,
    Outcome.BUDGET_EXCEEDED: 429,
    Outcome.CONCURRENCY_LIMITED: 429,
    Outcome.INVALID_REQUEST: 400,
    Outcome.UPSTREAM_CLIENT_ERROR: 400,
    Outcome.UPSTREAM_ERROR: 502,
    Outcome.UPSTREAM_TIMEOUT: 504,
    Outcome.CLIENT_CANCELLED: 499,
    Outcome.CAPACITY_EXHAUSTED: 503,
}
ENDPOINTS = [("chat.completions", 0.85), ("completions", 0.05), ("embeddings", 0.10)]
DEGRADED = {
    "anthropic": "thinking: no chat equivalent: not sent on",
    "openai-responses": "client_metadata: no chat equivalent: not sent on (kept in the audit)",
}
# Who sends a chat call: (user agent, the protocol it speaks, its endpoint, share). The
# coding agents speak their own protocols; the SDK and scripts speak chat completions.
CLIENTS = [
    ("OpenAI/Python 2.8.1", "openai", "chat.completions", 0.45),
    ("codex_exec/0.171.0 (Debian 12; x86_64) xterm", "openai-responses", "responses", 0.2),
    ("claude-cli/2.1.332 (external, sdk-cli)", "anthropic", "messages", 0.2),
    ("Agents/Python 0.24.0", "openai-responses", "responses", 0.05),
    ("python-httpx/0.28.1", "openai", "chat.completions", 0.1),
]


def hour_weight(at: datetime) -> float:
    """Busy working-day afternoons, quiet nights and weekends (UTC stands for local time)."""
    h = at.hour
    day = 1.0 if h < 7 else 3.0 if h < 9 else 8.0 if h < 18 else 4.0 if h < 22 else 1.5
    if 13 <= h <= 16:
        day = 10.0
    return day * (0.35 if at.weekday() >= 5 else 1.0)


def peak_pressure(at: datetime) -> float:
    """0 at night to 1 on a weekday afternoon: how full the big model is."""
    return min(1.0, max(0.0, (hour_weight(at) - 1.0) / 9.0))


class Catalog:
    """Teams, members, keys, routes and deployments the calls are spread over."""

    def __init__(self, rng: random.Random, *, members: int, password: str) -> None:
        self.rng = rng
        if not Deployment.objects.exists():
            call_command("apply_config", str(ROOT / "config" / "demo.toml"), verbosity=0)
        self.routes = {
            r.name: [rd.deployment.name for rd in r.chain.select_related("deployment")]
            for r in Route.objects.all()
        }
        self.deployments = {d.name: d for d in Deployment.objects.all()}
        self.keys = self._people(members, password)
        # Zipf-like: a few members make most of the calls.
        self.key_weights = [1.0 / (rank + 1) ** 0.9 for rank in range(len(self.keys))]

    def _people(self, count: int, password: str) -> list[ApiKey]:
        User = get_user_model()
        route_names = list(self.routes)
        with transaction.atomic():
            admin, _ = User.objects.get_or_create(
                username="bench-admin@example.com",
                defaults={
                    "email": "bench-admin@example.com",
                    "is_staff": True,
                    "is_superuser": True,
                },
            )
            admin.set_password(password)
            admin.save()
            teams = [
                Team.objects.get_or_create(slug=f"seed-{n}", defaults={"name": f"Seed team {n}"})[0]
                for n in ("north", "south", "east")
            ]
            apps = []
            for team in teams:
                for kind in ("chat", "nightly", "search"):
                    app, created = Application.objects.get_or_create(
                        slug=f"{team.slug}-{kind}",
                        defaults={
                            "team": team,
                            "name": f"{team.name} {kind}",
                            "default_priority": "batch" if kind == "nightly" else "interactive",
                        },
                    )
                    if created:
                        app.routes.set(Route.objects.filter(name__in=route_names))
                    apps.append(app)
            keys: list[ApiKey] = []
            for i in range(count):
                email = "bench-member@example.com" if i == 0 else f"seed-{i:03d}@example.com"
                user, _ = User.objects.get_or_create(username=email, defaults={"email": email})
                if i == 0:
                    user.set_password(password)
                    user.save()
                team = teams[i % len(teams)]
                member, _ = Member.objects.get_or_create(
                    user=user, defaults={"team": team, "role": "admin" if i == 3 else "member"}
                )
                mine = list(member.api_keys.all())
                team_apps = [a for a in apps if a.team_id == member.team_id]
                for n in range(len(mine), 1 + i % 3):
                    new = key_generate()
                    mine.append(
                        ApiKey.objects.create(
                            member=member,
                            application=team_apps[n % len(team_apps)],
                            name=f"seed key {n}",
                            prefix=new.prefix,
                            secret_hash=new.secret_hash,
                        )
                    )
                keys.extend(mine)
            for key in keys:
                # Read once here, not once per call.
                key.team_id = key.application.team_id
                key.email = key.member.user.email
                key.app_slug = key.application.slug
                key.priority = key.application.default_priority
        return keys


def _columns(model: type[models.Model]) -> list[models.Field]:
    return [f for f in model._meta.concrete_fields if not isinstance(f, models.AutoField)]


def _defaults(fields: list[models.Field]) -> dict[str, Any]:
    # A text column without a default (e.g. batch_id) is "" in Django, never NULL.
    return {
        f.attname: (
            f.get_default() if f.has_default() or (f.empty_strings_allowed and not f.null) else None
        )
        for f in fields
    }


def calls(
    catalog: Catalog, *, count: int, days: int, attempt_share: float, rng: random.Random
) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]], list[tuple[str, str]]]]:
    """(call row, attempt rows, every try as (deployment, error class)), oldest first."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    hours = [now - timedelta(hours=h) for h in range(days * 24, 0, -1)]
    weights = [hour_weight(h) for h in hours]
    # Calls per hour in proportion to its weight, spread evenly inside the hour.
    total_w = sum(weights)
    per_hour = [int(count * w / total_w) for w in weights]
    per_hour[-1] += count - sum(per_hour)
    serial = 0
    for hour, n in zip(hours, per_hour, strict=True):
        pressure = peak_pressure(hour)
        picked = rng.choices(catalog.keys, catalog.key_weights, k=n)
        offsets = sorted(rng.random() * 3600 for _ in range(n))
        for key, offset in zip(picked, offsets, strict=True):
            serial += 1
            yield _one_call(
                catalog, key, hour + timedelta(seconds=offset), serial, pressure, attempt_share, rng
            )


def _one_call(
    catalog: Catalog,
    key: ApiKey,
    at: datetime,
    serial: int,
    pressure: float,
    attempt_share: float,
    rng: random.Random,
) -> tuple[dict, list[dict], list[tuple[str, str]]]:
    route = rng.choice(list(catalog.routes))
    chain = catalog.routes[route]
    endpoint = rng.choices([e for e, _ in ENDPOINTS], [w for _, w in ENDPOINTS])[0]
    agent, protocol = "", "openai"
    if endpoint == "chat.completions":
        agent, protocol, endpoint, _ = rng.choices(CLIENTS, [c[3] for c in CLIENTS])[0]
    stream = endpoint != "embeddings" and endpoint != "completions" and rng.random() < 0.4
    roll = rng.random()
    outcome = Outcome.SUCCESS
    for candidate, share in OUTCOMES:
        if roll < share:
            outcome = candidate
            break
        roll -= share
    # The first deployment of a chain is full at peak: fall back, or run out of chain.
    tries: list[tuple[str, str]] = []  # (deployment, error class or "")
    served = ""
    if outcome not in REFUSED:
        for position, deployment in enumerate(chain):
            full = rng.random() < (
                0.25 * pressure if position == 0 and len(chain) > 1 else 0.02 * pressure
            )
            if full:
                tries.append((deployment, "capacity"))
                continue
            if outcome == Outcome.UPSTREAM_ERROR:
                tries.append((deployment, "server_error"))
                continue
            if outcome == Outcome.UPSTREAM_TIMEOUT:
                tries.append((deployment, "read_timeout"))
                continue
            tries.append(
                (deployment, "bad_request" if outcome == Outcome.UPSTREAM_CLIENT_ERROR else "")
            )
            served = deployment if outcome in (Outcome.SUCCESS, Outcome.CLIENT_CANCELLED) else ""
            break
        else:
            if outcome == Outcome.SUCCESS:
                outcome = Outcome.CAPACITY_EXHAUSTED
    fell_back = bool(served) and served != chain[0]
    deployment = catalog.deployments.get(served)
    tokens_in = int(rng.lognormvariate(6.0, 1.0)) if outcome not in REFUSED else 0
    tokens_out = 0 if endpoint == "embeddings" or not served else int(rng.lognormvariate(5.0, 0.9))
    cost = Decimal(0)
    if deployment is not None:
        cost = (
            deployment.input_price_per_million * tokens_in
            + deployment.output_price_per_million * tokens_out
        ) / Decimal(1_000_000)
        cost = cost.quantize(Decimal("0.00000001"))
    latency = (
        rng.uniform(1, 15)
        if not tries
        else sum(
            rng.lognormvariate(6.3, 0.7) if err == "" else rng.uniform(5, 200) for _, err in tries
        )
    )
    queue_ms = rng.expovariate(1 / 300) * pressure if tries and rng.random() < 0.2 else None
    request_id = f"req_seed{serial:011x}{rng.getrandbits(48):012x}"
    call = {
        "request_id": request_id,
        "created_at": at,
        "member_id": key.member_id,
        "member_email": key.email,
        "application_id": key.application_id,
        "application_slug": key.app_slug,
        "key_prefix": key.prefix,
        "priority": key.priority,
        "queue_ms": queue_ms,
        "queue_position": int(queue_ms // 100) if queue_ms else None,
        "endpoint": endpoint,
        "requested_model": route,
        "served_deployment": served,
        "upstream_model": deployment.model if deployment else "",
        "stream": stream,
        "client_protocol": protocol,
        "user_agent": agent,
        "upstream_protocol": "openai" if served else "",
        # The demo's upstreams are chat kind: an agent's own protocol is translated there.
        "degraded": DEGRADED.get(protocol, "") if served else "",
        "outcome": outcome,
        "status_code": STATUS.get(outcome, 500),
        "error_message": "" if outcome == Outcome.SUCCESS else f"{outcome} (seeded)",
        "attempt_count": len(tries),
        "retries": 0,
        "fell_back": fell_back,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "cost": cost,
        "latency_ms": round(latency, 2),
        "ttfb_ms": round(latency * 0.3, 2) if stream and served else None,
        "client_ip": f"10.0.{key.member_id % 250}.{key.pk % 250}",
        "_team_id": key.team_id,
    }
    attempts = []
    if tries and rng.random() < attempt_share:
        start = at
        for number, (dep, err) in enumerate(tries, start=1):
            duration = rng.uniform(5, 200) if err else max(1.0, latency * 0.9)
            attempts.append(
                {
                    "call_id": request_id,
                    "number": number,
                    "deployment": dep,
                    "started_at": start,
                    "duration_ms": round(duration, 2),
                    "status_code": {
                        "capacity": 503,
                        "server_error": 500,
                        "read_timeout": None,
                        "bad_request": 400,
                    }.get(err, 200),
                    "error_class": err,
                    "retry_delay_ms": None,
                    "retry_reason": "",
                    "skipped": "",
                }
            )
            start += timedelta(milliseconds=duration)
    return call, attempts, tries


_ATTEMPT_COUNTER = {
    "capacity": "capacity_errors",
    "server_error": "server_errors",
    "read_timeout": "timeouts",
}


class Rollups:
    """Adds calls up per hour, key, route and deployment, the way the audit writer does."""

    def __init__(self) -> None:
        self.has_route = any(f.name == "route" for f in UsageRollup._meta.fields)
        self.rows: dict[tuple, dict[str, Any]] = {}

    def _row(self, call: dict[str, Any], deployment: str) -> dict[str, Any]:
        hour = call["created_at"].replace(minute=0, second=0, microsecond=0)
        route = call["requested_model"] if self.has_route else None
        k = (hour, call["key_prefix"], route, deployment)
        row = self.rows.get(k)
        if row is None:
            row = self.rows[k] = defaultdict(
                int,
                {
                    "hour": hour,
                    "key_prefix": call["key_prefix"],
                    "deployment": deployment,
                    "member_id": call["member_id"],
                    "application_id": call["application_id"],
                    "team_id": call["_team_id"],
                    "cost": Decimal(0),
                },
            )
            if self.has_route:
                row["route"] = route
        return row

    def add(self, call: dict[str, Any], attempts_tried: list[tuple[str, str]]) -> None:
        row = self._row(call, call["served_deployment"])
        row["requests"] += 1
        row["tokens_in"] += call["tokens_in"]
        row["tokens_out"] += call["tokens_out"]
        row["cost"] += call["cost"]
        row["fallbacks"] += call["fell_back"]
        row["errors"] += call["outcome"] != Outcome.SUCCESS
        row["rejected"] += call["outcome"] in REFUSED - {Outcome.INVALID_REQUEST}
        if call["attempt_count"] and latency_field is not None:
            row[latency_field(call["latency_ms"])] += 1
        for deployment, err in attempts_tried:
            if err in _ATTEMPT_COUNTER:
                self._row(call, deployment)[_ATTEMPT_COUNTER[err]] += 1

    def history(self, *, target: int, before: datetime, rng: random.Random) -> None:
        """Older hours whose calls were pruned: copies of this month's rows moved back by
        whole weeks (same rhythm), until there are `target` rows."""
        month = list(self.rows.values())
        weeks = 5
        while len(self.rows) < target and month:
            for row in month:
                if len(self.rows) >= target:
                    break
                old = dict(row)
                old["hour"] = row["hour"] - timedelta(weeks=weeks)
                k = (old["hour"], old["key_prefix"], old.get("route"), old["deployment"])
                if old["hour"] < before:
                    self.rows.setdefault(k, old)
            weeks += 5


class Writer:
    """COPY on PostgreSQL, bulk_create on anything else; rows as dicts by attname."""

    def __init__(self, model: type[models.Model]) -> None:
        self.model = model
        self.fields = _columns(model)
        self.defaults = _defaults(self.fields)
        self.copy = connection.vendor == "postgresql"
        self.written = 0

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        if self.copy:
            from psycopg.types.json import Jsonb

            table = connection.ops.quote_name(self.model._meta.db_table)
            cols = ", ".join(connection.ops.quote_name(f.column) for f in self.fields)
            json_cols = {f.attname for f in self.fields if isinstance(f, models.JSONField)}
            names = [f.attname for f in self.fields]
            with (
                connection.cursor() as cursor,
                cursor.cursor.copy(f"COPY {table} ({cols}) FROM STDIN") as copy,
            ):
                for row in rows:
                    copy.write_row(
                        [
                            Jsonb(row.get(n, self.defaults[n]))
                            if n in json_cols
                            else row.get(n, self.defaults[n])
                            for n in names
                        ]
                    )
        else:
            names = {f.attname for f in self.fields}
            self.model.objects.bulk_create(
                [self.model(**{k: v for k, v in r.items() if k in names}) for r in rows],
                batch_size=2000,
            )
        self.written += len(rows)


def reset() -> None:
    tables = [m._meta.db_table for m in (Attempt, CallRecord, UsageRollup, DailyUsageRollup)]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("TRUNCATE " + ", ".join(tables))
        else:
            for table in tables:
                cursor.execute(f"DELETE FROM {table}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--rollups", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--attempt-share", type=float, default=0.3)
    parser.add_argument("--members", type=int, default=30)
    parser.add_argument("--password", default="bench-pass-1")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--reset", action="store_true", help="empty the audit tables first")
    args = parser.parse_args()

    started = time.monotonic()
    db = connection.settings_dict
    print(f"database: {connection.vendor} {db['NAME']}")
    call_command("migrate", verbosity=0)
    if args.reset:
        reset()
    elif CallRecord.objects.filter(request_id__startswith="req_seed").exists():
        raise SystemExit("this database is seeded already: add --reset to start again")
    rng = random.Random(args.seed)
    catalog = Catalog(rng, members=args.members, password=args.password)
    print(
        f"catalog: {len(catalog.keys)} keys, routes {sorted(catalog.routes)}, "
        f"deployments {sorted(catalog.deployments)}"
    )

    call_writer, attempt_writer, rollup_writer = (
        Writer(CallRecord),
        Writer(Attempt),
        Writer(UsageRollup),
    )
    rollups = Rollups()
    batch_calls: list[dict] = []
    batch_attempts: list[dict] = []

    def flush() -> None:
        if not batch_calls:
            return
        with transaction.atomic():
            call_writer.write(batch_calls)
            attempt_writer.write(batch_attempts)
        batch_calls.clear()
        batch_attempts.clear()
        rate = call_writer.written / (time.monotonic() - started)
        print(
            f"  {call_writer.written:>9,} calls  {attempt_writer.written:>9,} attempts  "
            f"({rate:,.0f} calls/s)",
            flush=True,
        )

    for call, attempts, tries in calls(
        catalog, count=args.calls, days=args.days, attempt_share=args.attempt_share, rng=rng
    ):
        rollups.add(call, tries)
        batch_calls.append(call)
        batch_attempts.extend(attempts)
        if len(batch_calls) >= BATCH:
            flush()
    flush()

    from_calls = len(rollups.rows)
    oldest = min((r["hour"] for r in rollups.rows.values()), default=datetime.now(UTC))
    rollups.history(target=args.rollups, before=oldest, rng=rng)
    rows = [dict(r) for r in rollups.rows.values()]
    for start in range(0, len(rows), BATCH):
        with transaction.atomic():
            rollup_writer.write(rows[start : start + BATCH])
    daily = daily_rollups_rebuild()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for model in (CallRecord, Attempt, UsageRollup, DailyUsageRollup):
                cursor.execute(f"ANALYZE {model._meta.db_table}")

    print(
        f"usage rollups: {rollup_writer.written:,} ({from_calls:,} from these calls, "
        f"{rollup_writer.written - from_calls:,} older hours whose calls were pruned), "
        f"{daily:,} daily rollups"
    )
    print(
        f"totals in the database: {CallRecord.objects.count():,} calls, "
        f"{Attempt.objects.count():,} attempts, {UsageRollup.objects.count():,} rollups, "
        f"{DailyUsageRollup.objects.count():,} daily rollups"
    )
    print(f"logins: bench-admin@example.com / bench-member@example.com, password {args.password!r}")
    print(f"done in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
