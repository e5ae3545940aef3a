"""The Batch API end to end: the official openai SDK against a real gateway, real runners
(`manage.py run_batches` subprocesses) and the simulator."""

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support import wait_until
from tests.support.batches import chat_lines, upload

FINAL = {"completed", "failed", "expired", "cancelled"}


def _poll(client: openai.OpenAI, batch_id: str, statuses: set[str], timeout: float = 60) -> Any:
    return wait_until(
        lambda: (b := client.batches.retrieve(batch_id)).status in statuses and b,
        timeout=timeout,
        every=0.2,
    )


def _lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    text = client.files.content(file_id).text
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_batch_runs_to_completed_with_every_line_once_and_audited(
    batch_client, start_runner, tmp_path: Path, call_record
) -> None:
    from routing.models import CallRecord

    client = batch_client()
    start_runner()
    file_id = upload(client, chat_lines(30), tmp_path)
    batch = client.batches.create(
        input_file_id=file_id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"job": "nightly summaries"},
    )
    assert batch.status == "validating" and batch.metadata == {"job": "nightly summaries"}

    done = _poll(client, batch.id, FINAL)
    assert done.status == "completed", done
    assert done.request_counts.total == 30
    assert done.request_counts.completed == 30 and done.request_counts.failed == 0
    assert done.error_file_id is None
    out = _lines(client, done.output_file_id)
    assert Counter(o["custom_id"] for o in out) == Counter(f"req-{i}" for i in range(30))
    for o in out:
        assert o["error"] is None and o["response"]["status_code"] == 200
        assert o["response"]["body"]["choices"][0]["message"]["content"]
    # Every line went through the live path as class batch, and the audit says who served it.
    records = wait_until(
        lambda: len(rows := list(CallRecord.objects.filter(batch_id=batch.id))) == 30 and rows
    )
    assert {r.custom_id for r in records} == {f"req-{i}" for i in range(30)}
    assert {r.served_deployment for r in records} == {"small"}
    assert {r.priority for r in records} == {"batch"}
    assert {o["response"]["request_id"] for o in out} == {r.request_id for r in records}
    # Listed, and the output file is the application's own.
    assert batch.id in [b.id for b in client.batches.list(limit=100)]
    assert done.output_file_id in [f.id for f in client.files.list()]


def test_a_bad_file_fails_with_line_numbered_errors_and_sends_nothing(
    batch_client, start_runner, tmp_path: Path, simulator
) -> None:
    client = batch_client()
    start_runner()
    lines = chat_lines(4)
    lines[1]["custom_id"] = "req-0"  # duplicate
    lines[2]["url"] = "/v1/embeddings"  # mismatched URL
    lines[3]["body"]["model"] = "secret"  # a route this application may not use
    raw = b"".join(json.dumps(line).encode() + b"\n" for line in lines) + b"{not json\n"
    path = tmp_path / "bad.jsonl"
    path.write_bytes(raw)
    before = simulator.stats("small")["requests"]
    file_id = client.files.create(file=path.open("rb"), purpose="batch").id
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    failed = _poll(client, batch.id, FINAL)
    assert failed.status == "failed"
    errors = {(e.line, e.code) for e in failed.errors.data}
    assert errors == {
        (2, "duplicate_custom_id"),
        (3, "mismatched_endpoint"),
        (4, "model_not_allowed"),
        (5, "invalid_json_line"),
    }
    assert all(f"Line {e.line}" in e.message for e in failed.errors.data)
    assert simulator.stats("small")["requests"] == before  # nothing was sent


def test_cancel_stops_new_lines_within_seconds(
    batch_client, start_runner, tmp_path: Path, lag_simulator
) -> None:
    client = batch_client()
    start_runner()
    file_id = upload(client, chat_lines(200, model="lag"), tmp_path)
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    wait_until(lambda: client.batches.retrieve(batch.id).request_counts.completed >= 6, timeout=30)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    started = time.monotonic()
    cancelled = _poll(client, batch.id, FINAL, timeout=10)
    assert cancelled.status == "cancelled"
    assert time.monotonic() - started < 5
    sent = lag_simulator.stats("lag")["requests"]
    time.sleep(1)
    assert lag_simulator.stats("lag")["requests"] == sent  # nothing new went out
    out = _lines(client, cancelled.output_file_id)
    err = _lines(client, cancelled.error_file_id)
    assert 6 <= len(out) < 200
    assert {e["error"]["code"] for e in err} == {"batch_cancelled"}
    ids = [o["custom_id"] for o in out + err]
    assert sorted(ids) == sorted(f"req-{i}" for i in range(200))  # each exactly once


def test_a_batch_past_its_completion_window_expires_with_its_finished_lines(
    batch_client, start_runner, tmp_path: Path
) -> None:
    client = batch_client()
    start_runner()
    file_id = upload(client, chat_lines(200, model="lag"), tmp_path)
    batch = client.batches.create(
        input_file_id=file_id,
        endpoint="/v1/chat/completions",
        completion_window="5s",  # Sluice takes shorter windows than OpenAI's 24h
    )
    expired = _poll(client, batch.id, FINAL, timeout=20)
    assert expired.status == "expired"
    assert expired.expired_at is not None
    out = _lines(client, expired.output_file_id)
    err = _lines(client, expired.error_file_id)
    assert 0 < len(out) < 200
    assert all(o["response"]["status_code"] == 200 for o in out)
    assert {e["error"]["code"] for e in err} == {"batch_expired"}
    assert sorted(o["custom_id"] for o in out + err) == sorted(f"req-{i}" for i in range(200))


def test_outside_its_window_a_batch_sends_nothing_until_the_window_opens(
    batch_client, start_runner, tmp_path: Path, lag_simulator, committed_db
) -> None:
    from datetime import UTC, datetime, timedelta

    from accounts.models import Application

    now = datetime.now(UTC)
    closed = f"{(now + timedelta(hours=2)):%H:00}-{(now + timedelta(hours=3)):%H:00}"
    Application.objects.filter(slug="nightly").update(batch_windows=closed)
    try:
        client = batch_client("nightly")
        start_runner()
        before = lag_simulator.stats("lag")["requests"]
        file_id = upload(client, chat_lines(10, model="lag"), tmp_path)
        batch = client.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        _poll(client, batch.id, {"in_progress"} | FINAL, timeout=10)
        time.sleep(2)
        waiting = client.batches.retrieve(batch.id)
        assert waiting.status == "in_progress"
        assert waiting.request_counts.completed == 0
        assert lag_simulator.stats("lag")["requests"] == before
        Application.objects.filter(slug="nightly").update(batch_windows="any")
        assert _poll(client, batch.id, FINAL, timeout=30).status == "completed"
    finally:
        Application.objects.filter(slug="nightly").update(batch_windows="")


def test_a_window_closing_mid_batch_stops_new_lines_and_lets_in_flight_ones_finish(
    batch_client, start_runner, tmp_path: Path, lag_simulator, committed_db
) -> None:
    from datetime import UTC, datetime, timedelta

    from accounts.models import Application
    from batches.models import BatchLine
    from routing.models import CallRecord

    client = batch_client("nightly")
    start_runner()
    file_id = upload(client, chat_lines(200, model="lag"), tmp_path)
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    try:
        wait_until(
            lambda: client.batches.retrieve(batch.id).request_counts.completed >= 6, timeout=30
        )
        now = datetime.now(UTC)
        closed = f"{(now + timedelta(hours=2)):%H:00}-{(now + timedelta(hours=3)):%H:00}"
        Application.objects.filter(slug="nightly").update(batch_windows=closed)
        # Lines in flight finish; then nothing runs and nothing more is sent.
        wait_until(
            lambda: not BatchLine.objects.filter(batch_id=batch.id, state="running").exists(),
            timeout=10,
        )
        stopped = client.batches.retrieve(batch.id)
        sent = lag_simulator.stats("lag")["requests"]
        time.sleep(1.5)
        assert lag_simulator.stats("lag")["requests"] == sent
        later = client.batches.retrieve(batch.id)
        assert later.status == "in_progress"
        assert later.request_counts.completed == stopped.request_counts.completed < 200
        assert not CallRecord.objects.filter(batch_id=batch.id, outcome="client_cancelled")
    finally:
        Application.objects.filter(slug="nightly").update(batch_windows="")
    assert _poll(client, batch.id, FINAL, timeout=60).status == "completed"


def test_a_runner_killed_mid_batch_loses_and_duplicates_nothing(
    batch_client, start_runner, tmp_path: Path
) -> None:
    client = batch_client()
    first = start_runner()
    file_id = upload(client, chat_lines(60, model="lag"), tmp_path)
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    wait_until(lambda: client.batches.retrieve(batch.id).request_counts.completed >= 6, timeout=30)
    first.send_signal(signal.SIGKILL)  # its claimed lines stay "running" until their leases end
    first.wait()
    assert client.batches.retrieve(batch.id).request_counts.completed < 60
    start_runner()
    done = _poll(client, batch.id, FINAL, timeout=60)
    assert done.status == "completed"
    out = _lines(client, done.output_file_id)
    assert sorted(o["custom_id"] for o in out) == sorted(f"req-{i}" for i in range(60))
    from batches.models import BatchLine

    # The dead runner's lines were taken again once their leases ran out.
    assert BatchLine.objects.filter(batch_id=batch.id, claims__gt=1).exists()


def test_keys_see_only_their_own_applications_files_and_batches(
    batch_client, tmp_path: Path
) -> None:
    mine, other = batch_client("batchapp"), batch_client("nightly")
    file_id = upload(mine, chat_lines(2), tmp_path)
    batch = mine.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    with pytest.raises(openai.NotFoundError):
        other.files.retrieve(file_id)
    with pytest.raises(openai.NotFoundError):
        other.files.content(file_id)
    with pytest.raises(openai.NotFoundError):
        other.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        other.batches.cancel(batch.id)
    with pytest.raises(openai.NotFoundError):
        other.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert batch.id not in [b.id for b in other.batches.list()]
    assert file_id not in [f.id for f in other.files.list()]
    assert mine.files.retrieve(file_id).purpose == "batch"
    assert mine.batches.cancel(batch.id).status in ("cancelling", "cancelled")


def test_bad_requests_get_openai_shaped_errors(batch_client, batch_gateway, tmp_path) -> None:
    import httpx

    client = batch_client()
    with pytest.raises(openai.BadRequestError) as bad:
        client.batches.create(
            input_file_id="file-nope", endpoint="/v1/moderations", completion_window="24h"
        )
    assert bad.value.body["param"] == "endpoint"
    file_id = upload(client, chat_lines(1), tmp_path)
    with pytest.raises(openai.BadRequestError) as bad:
        client.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="2d"
        )
    assert bad.value.body["param"] == "completion_window"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=f"{batch_gateway.url}/v1", api_key="sk-sluice-nope", max_retries=0
        ).batches.list()
    raw = httpx.post(
        f"{batch_gateway.url}/v1/files",
        headers={"Authorization": f"Bearer {client.api_key}"},
        content=b"not multipart",
    )
    assert raw.status_code == 400 and set(raw.json()["error"]) == {
        "message",
        "type",
        "code",
        "param",
    }
    deleted = client.files.delete(file_id)
    assert deleted.deleted and deleted.id == file_id
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(file_id)


def test_a_limit_that_says_no_makes_lines_wait_not_fail(
    batch_client, start_runner, tmp_path: Path
) -> None:
    from routing.models import CallRecord

    client = batch_client("limited")  # 2 calls in flight at most; the runner starts up to 6
    start_runner()
    file_id = upload(client, chat_lines(12, model="lag"), tmp_path)
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = _poll(client, batch.id, FINAL, timeout=60)
    assert done.status == "completed"
    assert done.request_counts.completed == 12 and done.request_counts.failed == 0

    # The runner's audit writer flushes in the background: wait for the twelfth success row.
    def outcomes() -> Counter[str] | None:
        rows = CallRecord.objects.filter(batch_id=batch.id).values_list("outcome", flat=True)
        counts = Counter(rows)
        return counts if counts["success"] == 12 else None

    counts = wait_until(outcomes)
    assert counts["concurrency_limited"] > 0  # the limit did say no, and the lines waited


def test_two_runners_share_a_batch_and_send_each_line_once(
    batch_client, start_runner, tmp_path: Path, lag_simulator
) -> None:
    from routing.models import CallRecord

    client = batch_client()
    start_runner()
    start_runner()
    before = lag_simulator.stats("lag")["served"]
    file_id = upload(client, chat_lines(40, model="lag"), tmp_path)
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = _poll(client, batch.id, FINAL, timeout=60)
    assert done.status == "completed"
    assert sorted(o["custom_id"] for o in _lines(client, done.output_file_id)) == sorted(
        f"req-{i}" for i in range(40)
    )
    # No line answered twice. (Without Redis each runner counts the deployment's slots on
    # its own, so together they may overfill it: "at capacity" answers, retried, are not
    # counted in `served`.)
    assert lag_simulator.stats("lag")["served"] - before == 40
    records = wait_until(
        lambda: len(r := list(CallRecord.objects.filter(batch_id=batch.id))) >= 40 and r
    )
    assert Counter(r.custom_id for r in records if r.outcome == "success") == Counter(
        f"req-{i}" for i in range(40)
    )


def test_a_poison_file_fails_its_own_batch_and_another_teams_batch_still_runs(
    batch_client, start_runner, tmp_path: Path
) -> None:
    """One line nested 100,000 deep and one with a 5,000-digit integer: team A's batch fails
    with line-numbered errors; team B's batch, queued behind it, completes within seconds;
    the runner logs no traceback."""
    attacker, bystander = batch_client("batchapp"), batch_client("rivalapp", team="rival")
    runner = start_runner()
    deep = "[" * 100_000 + "]" * 100_000
    good = chat_lines(1)[0]
    raw = (
        json.dumps(good)
        + "\n"
        + '{"custom_id": "deep", "method": "POST", "url": "/v1/chat/completions", "body": '
        + deep
        + "}\n"
        + '{"custom_id": "huge", "method": "POST", "url": "/v1/chat/completions", "body": '
        + '{"model": "fast", "messages": [{"role": "user", "content": "x"}], "seed": '
        + "9" * 5_000
        + "}}\n"
    )
    path = tmp_path / "poison.jsonl"
    path.write_text(raw)
    poison = attacker.batches.create(
        input_file_id=attacker.files.create(file=path.open("rb"), purpose="batch").id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    innocent = bystander.batches.create(
        input_file_id=upload(bystander, chat_lines(3), tmp_path),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    started = time.monotonic()
    done = _poll(bystander, innocent.id, FINAL, timeout=20)
    assert done.status == "completed" and done.request_counts.completed == 3
    assert time.monotonic() - started < 10
    failed = _poll(attacker, poison.id, FINAL, timeout=10)
    assert failed.status == "failed"
    assert {(e.line, e.code) for e in failed.errors.data} == {
        (2, "invalid_json_line"),
        (3, "invalid_json_line"),
    }
    assert all(f"Line {e.line}" in e.message for e in failed.errors.data)
    assert runner.poll() is None  # the runner is alive
    log = (tmp_path / "runner-0.log").read_text()
    assert "Traceback" not in log and len(log) < 10_000, log[-2000:]
