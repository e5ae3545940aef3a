"""Production settings: `manage.py check --deploy` is clean with the documented SLUICE_*
environment (deploy/), and PostgreSQL through PgBouncer gets no server-side statements."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

from config.database_url import parse_database_url
from tests.support import ROOT

PRODUCTION = {
    "SLUICE_HTTPS": "1",
    "SLUICE_SECRET_KEY": secrets.token_urlsafe(50),
    "SLUICE_ALLOWED_HOSTS": "sluice.example.com",
    "DATABASE_URL": "postgres://sluice:pw@127.0.0.1:6432/sluice",
    "SLUICE_DB_PGBOUNCER": "1",
}


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    environ.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=environ | env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_deploy_is_clean_with_the_production_environment():
    done = _check_deploy(PRODUCTION)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_check_deploy_warns_without_it():
    done = _check_deploy({k: v for k, v in PRODUCTION.items() if k != "SLUICE_HTTPS"})
    assert done.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in done.stderr


def test_https_without_a_secret_key_refuses_to_start():
    done = _check_deploy({k: v for k, v in PRODUCTION.items() if k != "SLUICE_SECRET_KEY"})
    assert done.returncode != 0
    assert "set SLUICE_SECRET_KEY" in done.stderr


def test_through_pgbouncer_psycopg_prepares_nothing_and_no_cursor_is_named():
    url = "postgres://sluice@127.0.0.1:6432/sluice"
    direct = parse_database_url(url, base_dir=Path("."))
    bounced = parse_database_url(url, base_dir=Path("."), pgbouncer=True, pool_max_size=4)
    assert "prepare_threshold" not in direct["OPTIONS"]
    assert not direct["DISABLE_SERVER_SIDE_CURSORS"]
    assert bounced["OPTIONS"]["prepare_threshold"] is None
    assert bounced["DISABLE_SERVER_SIDE_CURSORS"]
    assert bounced["OPTIONS"]["pool"]["max_size"] == 4
