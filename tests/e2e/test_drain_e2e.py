"""SIGTERM mid-stream: the worker stops taking calls, lets the stream finish (or cuts it at
SLUICE_DRAIN_SECONDS), writes the call's audit row and exits within the bound."""

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from routing.observability.audit_spool import Spool
from tests.support import start_gateway, wait_until

HI = [{"role": "user", "content": "Tell me a long story."}]
# The slow simulator streams 40 chunks 50 ms apart: two seconds of answer.


def _stream(url: str, key: str, chunks: list[bytes], first: threading.Event) -> httpx.Response:
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "slow", "messages": HI, "stream": True},
        timeout=30,
    ) as response:
        try:
            for chunk in response.iter_raw():
                chunks.append(chunk)
                first.set()
        except httpx.HTTPError:
            pass  # cut: the test reads what arrived
    first.set()
    return response


def _new_call_refused(url: str, key: str) -> bool:
    """A new connection is refused, or answered 503 `worker_draining` with Retry-After."""
    try:
        answer = httpx.post(
            f"{url}/v1/chat/completions",
            headers={"authorization": f"Bearer {key}"},
            json={"model": "fast", "messages": HI},
            timeout=5,
        )
    except httpx.ConnectError:
        return True
    return (
        answer.status_code == 503
        and answer.json()["error"]["code"] == "worker_draining"
        and "retry-after" in answer.headers
    )


def _drain(
    database: str, key: str, *, drain_seconds: float, workers: int = 1
) -> tuple[httpx.Response, bytes, float, bool]:
    """Start a gateway, begin a stream, SIGTERM the worker once the first chunk arrived:
    the stream's response and bytes, how long the process took to exit, and whether a new
    call was refused meanwhile."""
    gateway = start_gateway(
        database, workers=workers, extra_env={"SLUICE_DRAIN_SECONDS": str(drain_seconds)}
    )
    handle = next(gateway)
    chunks: list[bytes] = []
    first = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        result["response"] = _stream(handle.url, key, chunks, first)

    streamer = threading.Thread(target=run)
    streamer.start()
    try:
        assert first.wait(10) and chunks, "the stream never began"
        proc_pid = handle.pid
        signalled = time.monotonic()
        os.kill(proc_pid, signal.SIGTERM)
        # uvicorn's supervisor (--workers 2) holds the listening socket until it exits: a new
        # connection waits in its backlog, unanswered (docs/deploy.md: a worker per port).
        refused = workers > 1 or wait_until(lambda: _new_call_refused(handle.url, key), timeout=2)
        wait_until(lambda: not _alive(proc_pid), timeout=drain_seconds + 10, every=0.05)
        exited = time.monotonic() - signalled
        streamer.join(10)
    finally:
        next(gateway, None)  # stops it if the test failed before it exited
    return result["response"], b"".join(chunks), exited, refused


def _spooled(request_id: str) -> list[str]:
    folder = Path(settings.SLUICE_AUDIT_SPOOL_DIR)
    held = request_id.encode()
    return [p.name for p in folder.glob("*/*.jsonl") if any(held in x for x in Spool.read(p))]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("workers", [1, 2], ids=["one worker", "uvicorn supervising two"])
def test_sigterm_lets_a_stream_finish_then_exits_with_its_audit_row(
    e2e_database: str, issue_key, call_record, workers: int
):
    key = issue_key()
    response, body, exited, refused = _drain(
        e2e_database, key.plaintext, drain_seconds=10, workers=workers
    )
    assert response.status_code == 200
    assert body.rstrip().endswith(b"data: [DONE]")  # the whole stream arrived
    assert refused
    assert exited < 10
    record = call_record(response.headers["x-sluice-request-id"])
    assert (record.outcome, record.status_code, record.stream) == ("success", 200, True)
    assert record.tokens_out > 0


def test_a_stream_longer_than_the_drain_bound_is_cut_at_it_and_still_audited(
    e2e_database: str, issue_key, call_record
):
    key = issue_key()
    response, body, exited, refused = _drain(e2e_database, key.plaintext, drain_seconds=0.5)
    assert response.status_code == 200
    assert b"data: [DONE]" not in body  # cut before its end
    assert refused
    assert exited < 0.5 + 3  # the bound, and the time to write the rows and stop
    request_id = response.headers["x-sluice-request-id"]
    try:
        record = call_record(request_id)
    except AssertionError:
        # Which of two faults: the row left in a spool file (for a later worker to write),
        # or the call never recorded.
        spooled = _spooled(request_id)
        raise AssertionError(f"no audit row; spool files with the call: {spooled}") from None
    assert record.stream and record.outcome != "success"
