"""Migrations: accounts' depend on no app above it, a new database migrates from zero, and a
database migrated before routing took the application/route grant over keeps its grants.
Each runs `manage.py` on a scratch database of the suite's backend (SQLite, or PostgreSQL
when DATABASE_URL names one)."""

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db.migrations.loader import MigrationLoader

from tests.support import ROOT

OLD_SETTINGS = "tests.old_migrations.settings"


def test_accounts_and_quotas_migrations_depend_on_no_app_above_them() -> None:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    allowed = {
        "accounts": {"accounts", "auth", "contenttypes", "__setting__"},
        "quotas": {"quotas", "accounts", "auth", "contenttypes", "__setting__"},
    }
    checked = 0
    for (app, name), migration in loader.disk_migrations.items():
        if app in allowed:
            checked += 1
            above = {dep[0] for dep in migration.dependencies} - allowed[app]
            assert not above, f"{app}.{name} depends on {sorted(above)}"
    assert checked >= 3


@pytest.fixture
def scratch_database_url(tmp_path) -> Iterator[str]:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres", "pgsql")):
        yield f"sqlite:///{tmp_path}/scratch.sqlite3"
        return
    import psycopg

    parts = urlsplit(url)
    name = f"{parts.path.strip('/') or 'sluice'}_migrations_{uuid.uuid4().hex[:8]}"
    server = urlunsplit(("postgresql", parts.netloc, "/postgres", "", ""))
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(url: str, *args: str, settings: str = "config.settings") -> str:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": settings}
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


GRANTS = """
import json
from accounts.models import Application
print(json.dumps({a.slug: sorted(a.routes.values_list("name", flat=True))
                  for a in Application.objects.order_by("slug")}))
"""


def grants(url: str) -> dict[str, list[str]]:
    return json.loads(manage(url, "shell", "-c", GRANTS).strip().splitlines()[-1])


def test_a_new_database_migrates_from_zero_and_grants_work(scratch_database_url) -> None:
    out = manage(scratch_database_url, "migrate")
    assert "Applying routing.0003_route_applications... OK" in out
    manage(
        scratch_database_url,
        "shell",
        "-c",
        "from accounts.models import Application, Team\n"
        "from routing.models import Route\n"
        "team = Team.objects.create(slug='t', name='t')\n"
        "app = Application.objects.create(team=team, slug='a', name='a')\n"
        "app.routes.set([Route.objects.create(name='r1'), Route.objects.create(name='r2')])\n"
        "Route.objects.get(name='r1').applications.add("
        "Application.objects.create(team=team, slug='b', name='b'))\n",
    )
    assert grants(scratch_database_url) == {"a": ["r1", "r2"], "b": ["r1"]}


def test_a_database_migrated_before_keeps_its_grants(scratch_database_url) -> None:
    url = scratch_database_url
    # The history as it was: accounts/0002 made the grant table, depending on routing/0001.
    out = manage(url, "migrate", "accounts", "0002", settings=OLD_SETTINGS)
    assert "Applying routing.0001_initial... OK" in out  # the loop this change removed
    manage(url, "migrate", "routing", "0002", settings=OLD_SETTINGS)
    manage(
        url,
        "shell",
        "-c",
        "from django.db import connection\n"
        "from django.db.migrations.loader import MigrationLoader\n"
        # The models as that history left them (today's have fields it never made).
        "apps = MigrationLoader(connection).project_state().apps\n"
        "Application = apps.get_model('accounts', 'Application')\n"
        "Team = apps.get_model('accounts', 'Team')\n"
        "Route = apps.get_model('routing', 'Route')\n"
        "team = Team.objects.create(slug='t', name='t')\n"
        "app = Application.objects.create(team=team, slug='a', name='a')\n"
        "Application.objects.create(team=team, slug='none', name='none')\n"
        "routes = [Route.objects.create(name=n) for n in ('r1', 'r2', 'r3')]\n"
        "with connection.cursor() as c:\n"
        "    for r in routes[:2]:\n"
        "        c.execute('INSERT INTO accounts_application_routes (application_id, route_id)'\n"
        "                  ' VALUES (%s, %s)', [app.pk, r.pk])\n",
        settings=OLD_SETTINGS,
    )
    out = manage(url, "migrate")
    assert "Applying routing.0003_route_applications... OK" in out
    assert grants(url) == {"a": ["r1", "r2"], "none": []}
    manage(
        url,
        "shell",
        "-c",
        "from accounts.models import Application\n"
        "Application.objects.get(slug='none').routes.add(*Application.objects.get(slug='a')"
        ".routes.all())\n",
    )
    assert grants(url) == {"a": ["r1", "r2"], "none": ["r1", "r2"]}


HOURLY_ROWS = """
from datetime import UTC, datetime
from django.db import connection
from django.db.migrations.loader import MigrationLoader
Hourly = MigrationLoader(connection).project_state().apps.get_model('quotas', 'UsageRollup')
for day, hour, prefix, n in ((1, 0, 'k1', 2), (1, 23, 'k1', 3), (1, 5, 'k2', 7), (2, 0, 'k1', 11)):
    Hourly.objects.create(hour=datetime(2026, 11, day, hour, tzinfo=UTC), key_prefix=prefix,
                          route='smart', deployment='big', member_id=4, team_id=9, requests=n,
                          cost='0.10000001', latency_le_500ms=n)
"""

DAILY_ROWS = """
import json
from quotas.models import DailyUsageRollup
print(json.dumps(sorted(
    [str(r.day), r.key_prefix, r.requests, str(r.cost), r.latency_le_500ms, r.member_id, r.team_id]
    for r in DailyUsageRollup.objects.all())))
"""


def test_the_daily_rollup_migration_fills_the_days_from_existing_hours(
    scratch_database_url,
) -> None:
    url = scratch_database_url
    manage(url, "migrate", "quotas", "0004")
    manage(url, "shell", "-c", HOURLY_ROWS)
    out = manage(url, "migrate")
    assert "Applying quotas.0005_daily_usage_rollup... OK" in out
    daily = json.loads(manage(url, "shell", "-c", DAILY_ROWS).strip().splitlines()[-1])
    assert daily == [
        ["2026-11-01", "k1", 5, "0.20000002", 5, 4, 9],
        ["2026-11-01", "k2", 7, "0.10000001", 7, 4, 9],
        ["2026-11-02", "k1", 11, "0.10000001", 11, 4, 9],
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(("table", "at_least"), [("routing_callrecord", 6), ("routing_attempt", 2)])
def test_no_index_of_the_audit_tables_is_the_start_of_another(table: str, at_least: int) -> None:
    """Every index of a call's rows is written on every call: one whose columns begin
    another's (a unique constraint's too) serves no lookup the longer one does not.
    (PostgreSQL's `_like` indexes serve prefix searches under any collation: not counted.)"""
    from django.db import connection

    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, table)
    indexes = {
        name: tuple(c["columns"])
        for name, c in found.items()
        if (c["index"] or c["unique"]) and not c["primary_key"] and not name.endswith("_like")
    }
    assert len(indexes) >= at_least
    covered = [
        (name, other)
        for name, columns in indexes.items()
        for other, longer in indexes.items()
        if other != name and longer[: len(columns)] == columns
    ]
    assert covered == []
