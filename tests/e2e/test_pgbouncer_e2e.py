"""PostgreSQL through a real PgBouncer in transaction mode (Debian's package), with
SLUICE_DB_PGBOUNCER=1: the migrations run through it on an empty database, and a gateway
serves calls through it (keys read, audit rows written) with fewer server connections than
clients, so consecutive statements of one client land on different server connections."""

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.db import connection

from tests.support import ROOT, free_port, start_gateway, wait_until

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
HI = [{"role": "user", "content": "Through the bouncer."}]


def _skip_reason() -> str | None:
    if connection.vendor != "postgresql":
        return "PgBouncer sits in front of PostgreSQL: run with DATABASE_URL=postgres://…"
    if not os.path.exists(PGBOUNCER):
        return "pgbouncer is not installed (apt-get install -y pgbouncer)"
    return None


@pytest.fixture
def bouncer(django_db_setup: None) -> Iterator[int]:
    """PgBouncer on a free port, every database of the test server behind it."""
    reason = _skip_reason()
    if reason:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    s = connection.settings_dict
    port = free_port()
    # PgBouncer refuses to run as root: it then runs as postgres, who must read its files.
    folder = Path(tempfile.mkdtemp(prefix="sluice-pgbouncer-"))
    folder.chmod(0o755)
    (folder / "userlist.txt").write_text(f'"{s["USER"]}" "{s["PASSWORD"] or ""}"\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={s['HOST'] or '127.0.0.1'} port={s['PORT'] or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'userlist.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 2\nmax_client_conn = 200\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    for path in folder.iterdir():
        path.chmod(0o644)
    args = [PGBOUNCER, *(["-u", "postgres"] if os.geteuid() == 0 else [])]
    proc = subprocess.Popen([*args, str(folder / "pgbouncer.ini")], stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: proc.poll() is None and _answers(port, s["USER"], s["NAME"]))
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def _answers(port: int, user: str, database: str) -> bool:
    import psycopg

    try:
        psycopg.connect(host="127.0.0.1", port=port, user=user, dbname=database).close()
    except psycopg.OperationalError:
        return False
    return True


def _url(port: int, database: str) -> str:
    user = connection.settings_dict["USER"]
    return f"postgres://{user}@127.0.0.1:{port}/{database}"


def test_migrations_run_through_pgbouncer_on_an_empty_database(bouncer: int, committed_db):
    fresh = f"{connection.settings_dict['NAME']}_bouncer_{uuid.uuid4().hex[:6]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{fresh}"')
    try:
        env = os.environ | {"DATABASE_URL": _url(bouncer, fresh), "SLUICE_DB_PGBOUNCER": "1"}
        done = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        import psycopg

        s = connection.settings_dict
        with psycopg.connect(
            host=s["HOST"] or "127.0.0.1", port=s["PORT"] or 5432, user=s["USER"], dbname=fresh
        ) as direct:
            tables = {r[0] for r in direct.execute("SELECT tablename FROM pg_tables").fetchall()}
        assert {"django_migrations", "routing_callrecord", "accounts_apikey"} <= tables
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{fresh}" WITH (FORCE)')


def test_a_gateway_serves_calls_through_pgbouncer(
    bouncer: int, e2e_database: str, issue_key, call_record
):
    gateway = start_gateway(
        _url(bouncer, connection.settings_dict["NAME"]),
        extra_env={"SLUICE_DB_PGBOUNCER": "1", "SLUICE_DB_POOL_MAX_SIZE": "4"},
    )
    handle = next(gateway)
    try:
        keys = [issue_key().plaintext for _ in range(4)]  # each first seen: read from the DB

        def call(n: int) -> httpx.Response:
            return httpx.post(
                f"{handle.url}/v1/chat/completions",
                headers={"authorization": f"Bearer {keys[n % len(keys)]}"},
                json={"model": "fast", "messages": HI},
                timeout=30,
            )

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(call, range(16)))
        assert [a.status_code for a in answers] == [200] * 16
        for answer in answers[::4]:
            assert call_record(answer.headers["x-sluice-request-id"]).outcome == "success"
        assert httpx.get(f"{handle.url}/healthz").json()["checks"]["database"] == "ok"
    finally:
        next(gateway, None)
