"""A batch acts for the key that created it: when that key is revoked or expires, or its
member is deactivated, while the batch runs, its next lines stop at once (within the key
cache's SLUICE_KEY_CACHE_SECONDS, 2 s) and fail with 401; nothing more goes upstream."""

import json
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support import wait_until
from tests.support.batches import chat_lines, upload

FINAL = {"completed", "failed", "expired", "cancelled"}


def _deactivate(email: str, prefix: str) -> None:
    from accounts.models import Member
    from accounts.services import Actor, member_set_active

    member = Member.objects.select_related("user").get(user__email=email)
    member_set_active(actor=Actor.command("test"), member=member, active=False)


def _revoke(email: str, prefix: str) -> None:
    from accounts.services import key_revoke

    key_revoke(prefix=prefix)


def _expire(email: str, prefix: str) -> None:
    """Rotated with a grace of one second: the old key expires as time passes (no change is
    published when it does: every use checks the expiry of the cached key)."""
    from accounts.models import ApiKey
    from accounts.services import Actor, key_rotate

    key_rotate(
        actor=Actor.command("test"),
        key=ApiKey.objects.get(prefix=prefix),
        grace=timedelta(seconds=1),
    )


@pytest.mark.parametrize(
    "stop", [_deactivate, _revoke, _expire], ids=["deactivated", "revoked", "expired"]
)
def test_a_batch_stops_when_its_key_or_member_stops(
    batch_gateway: Any,
    batch_env: dict[str, str],
    issue_key: Callable[..., Any],
    start_runner: Callable[..., Any],
    lag_simulator: Any,
    tmp_path: Path,
    stop: Callable[[str, str], None],
) -> None:
    key = issue_key(application="batchapp")
    client = openai.OpenAI(base_url=f"{batch_gateway.url}/v1", api_key=key.plaintext, max_retries=0)
    start_runner()
    file_id = upload(client, chat_lines(300, model="lag"), tmp_path)
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    wait_until(lambda: client.batches.retrieve(batch.id).request_counts.completed >= 6, timeout=30)
    stop(key.email, key.prefix)
    stopped = time.monotonic()
    time.sleep(3.5)  # the key cache (2 s) plus the calls already in flight (300 ms each)
    sent = lag_simulator.stats("lag")["requests"]
    time.sleep(2)
    assert lag_simulator.stats("lag")["requests"] == sent, "lines still reach the upstream"

    # The batch ends by itself: the lines not sent fail with the key's 401.
    from batches.models import Batch

    done = wait_until(
        lambda: (b := Batch.objects.get(pk=batch.id)).status in FINAL and b, timeout=20
    )
    assert done.status == "completed", done.status
    assert time.monotonic() - stopped < 25
    errors = [
        json.loads(line)
        for line in _content(batch_env, done.error_file_id).splitlines()
        if line.strip()
    ]
    assert len(errors) > 200, len(errors)
    assert {e["response"]["status_code"] for e in errors} == {401}
    assert {e["response"]["body"]["error"]["code"] for e in errors} == {"invalid_api_key"}


def _content(batch_env: dict[str, str], file_id: str | None) -> str:
    """The error file, read from the gateway's storage (the key that could read it through
    the API is stopped)."""
    from batches.models import BatchFile

    assert file_id is not None
    stored = BatchFile.objects.get(pk=file_id).storage_name
    return (Path(batch_env["SLUICE_BATCH_FILES_DIR"]) / stored).read_text()
