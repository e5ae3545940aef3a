"""A worker killed with `kill -9` right after answering loses no audit row: the calls it
answered but had not written are in its spool file, and the next worker to start on the
host writes them as it starts (once, whatever it finds already written)."""

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.support import free_port, start_process, wait_until

HI = [{"role": "user", "content": "Remember me."}]


def _worker(database: str, spool: Path, *, flush_seconds: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = os.environ | {
        "DATABASE_URL": database,
        "SLUICE_SECRET_KEY": "test-" + uuid.uuid4().hex,
        "SLUICE_AUDIT_FLUSH_SECONDS": flush_seconds,
        "SLUICE_AUDIT_SPOOL_DIR": str(spool),
        "SLUICE_REDIS_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
    }
    url = f"http://127.0.0.1:{port}"
    args = ["config.asgi:application", "--port", str(port), "--log-level", "warning"]
    proc = start_process([sys.executable, "-m", "uvicorn", *args], url=f"{url}/healthz", env=env)
    return proc, url


def _call(url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "smart", "messages": HI},
        timeout=30,
    )


def test_calls_answered_by_a_worker_killed_before_writing_them_are_recorded(
    e2e_database: str, issue_key, committed_db: None, tmp_path: Path, call_record: Any
):
    from quotas.models import UsageRollup
    from routing.models import CallRecord

    key = issue_key()
    # A worker that would write its batch only after 60 s: killed long before.
    doomed, url = _worker(e2e_database, tmp_path, flush_seconds="60")
    try:
        answers = [wait_until(lambda: (r := _call(url, key.plaintext)).status_code == 200 and r)]
        answers += [_call(url, key.plaintext) for _ in range(4)]
        assert [a.status_code for a in answers] == [200] * 5
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
    ids = [a.headers["x-sluice-request-id"] for a in answers]
    assert not CallRecord.objects.filter(request_id__in=ids).exists()
    assert list(tmp_path.rglob("*.jsonl"))  # the spool holds them

    heir, url = _worker(e2e_database, tmp_path, flush_seconds="0.05")
    try:
        # Before any call of its own: a worker takes in the spool of the dead as it starts
        # (one that never gets a call, its traffic gone elsewhere, writes them too).
        for request_id in ids:
            record = call_record(request_id)
            assert (record.outcome, record.status_code) == ("success", 200)
        wait_until(lambda: not list(tmp_path.rglob("*.jsonl")))  # written, then removed
        assert _call(url, key.plaintext).status_code == 200
        usage = UsageRollup.objects.filter(key_prefix=key.prefix)
        # Each call counted once.
        wait_until(lambda: sum(row.requests for row in usage.all()) == 6)
    finally:
        heir.terminate()
        heir.wait(timeout=10)
