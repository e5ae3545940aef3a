"""A runner's database work on its host runs at the runner's priority: the PostgreSQL backend
serving each of its connections is lowered as the runner is, and never a process that is not
that backend (batches/priority.py)."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest
from django.db import connection

from batches import priority
from batches.priority import backend_on_this_host, session_share

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db

SCRIPT = """
import os, django
django.setup()
from django.db import connection
from batches.priority import lower_backends, session_share

lower_backends(5)
connection.ensure_connection()
pid = connection.connection.info.backend_pid
print(os.getpriority(os.PRIO_PROCESS, pid), session_share(pid))
"""


def _postgres() -> dict:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's backends")
    return connection.get_connection_params()


def _socket_dir() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW unix_socket_directories")
        first = cursor.fetchone()[0].split(",")[0].strip()
    if not first or not Path(first).is_dir():
        pytest.skip("no Unix socket for PostgreSQL on this host")
    return first


def _hosts() -> list[str]:
    return ["127.0.0.1", _socket_dir()]


def test_the_backend_at_the_other_end_of_the_socket_is_found_over_tcp_and_unix_sockets():
    params = _postgres()
    for host in _hosts():
        with psycopg.connect(**(params | {"host": host})) as raw:
            assert backend_on_this_host(raw) == raw.info.backend_pid


def _posing(raw: psycopg.Connection, pid: int) -> SimpleNamespace:
    """Connection `raw`, claiming to be served by process `pid`."""
    return SimpleNamespace(info=SimpleNamespace(backend_pid=pid), pgconn=raw.pgconn)


def test_a_process_not_at_the_other_end_of_the_socket_is_never_taken_for_the_backend():
    params = _postgres()
    tcp, unix = _hosts()
    with (
        psycopg.connect(**(params | {"host": tcp})) as ours,
        psycopg.connect(**(params | {"host": tcp})) as other,
    ):
        # Over TCP the backend's title names our end's port: another backend's does not.
        for pid in (other.info.backend_pid, os.getpid()):
            assert backend_on_this_host(_posing(ours, pid)) is None
    with psycopg.connect(**(params | {"host": unix})) as ours:
        # Over a Unix socket: a process that is not a child of the server at the other end.
        assert backend_on_this_host(_posing(ours, os.getpid())) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering another user's process takes root")
def test_a_runners_backend_runs_at_the_runners_lower_priority():
    _postgres()
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    priority, group = done.stdout.split()
    assert int(priority) == 5
    # Where the kernel keeps a session share for backends (each leads a session), theirs too.
    connection.ensure_connection()
    shared = session_share(connection.connection.info.backend_pid) is not None
    assert group == ("5" if shared else "None")


def test_a_backend_it_may_not_lower_is_left_as_it_is_and_said_once(monkeypatch, caplog):
    # Lowering another user's process takes root, which this test runs as: the refusal a
    # runner of its own user meets is the kernel's EPERM, raised here in its place.
    params = _postgres()

    def refused(tid: int, by: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(priority, "lower_task", refused)
    lower = priority._Lower(5)
    with psycopg.connect(**(params | {"host": "127.0.0.1"})) as raw:
        pid = raw.info.backend_pid
        before = os.getpriority(os.PRIO_PROCESS, pid)
        with caplog.at_level("INFO", logger="sluice.batches"):
            for _ in range(2):
                lower(None, connection=SimpleNamespace(vendor="postgresql", connection=raw))
        assert os.getpriority(os.PRIO_PROCESS, pid) == before
    said = [r.getMessage() for r in caplog.records if "keep their priority" in r.getMessage()]
    assert said == [
        "the database backends serving this runner keep their priority: "
        "[Errno 1] Operation not permitted"
    ]


def test_a_connection_whose_backend_cannot_be_told_still_opens(caplog):
    # A connection already closed has no socket to look at: the lowering gives up, quietly
    # but once in the log, and never fails the connection it was called for.
    params = _postgres()
    raw = psycopg.connect(**(params | {"host": "127.0.0.1"}))
    raw.close()
    with caplog.at_level("INFO", logger="sluice.batches"):
        priority._Lower(5)(None, connection=SimpleNamespace(vendor="postgresql", connection=raw))
    assert [r.getMessage() for r in caplog.records if "keep their priority" in r.getMessage()]
