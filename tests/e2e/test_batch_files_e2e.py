"""Batch files through the official SDK: OpenAI's `expires_after`, and each application's
share of the storage (SLUICE_BATCH_APP_MAX_FILES, SLUICE_BATCH_APP_MAX_BYTES)."""

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import openai
import pytest
from django.utils import timezone

from tests.support import GatewayHandle, start_gateway, wait_until
from tests.support.batches import chat_lines, jsonl

MAX_FILES = 3
MAX_BYTES = 4000


@pytest.fixture(scope="module")
def quota_gateway(
    e2e_database: str, batch_apps: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[GatewayHandle, Path]]:
    files_dir = tmp_path_factory.mktemp("quota-files")
    env = {
        "SLUICE_BATCH_FILES_DIR": str(files_dir),
        "SLUICE_BATCH_APP_MAX_FILES": str(MAX_FILES),
        "SLUICE_BATCH_APP_MAX_BYTES": str(MAX_BYTES),
        "SLUICE_REDIS_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
    }
    for handle in start_gateway(e2e_database, extra_env=env):
        yield handle, files_dir


@pytest.fixture
def client_for(
    quota_gateway: tuple[GatewayHandle, Path], issue_key: Callable[..., Any]
) -> Callable[[str], openai.OpenAI]:
    def make(application: str) -> openai.OpenAI:
        from accounts.models import Application
        from batches.models import BatchFile

        BatchFile.objects.filter(application=Application.objects.get(slug=application)).delete()
        key = issue_key(application=application)
        return openai.OpenAI(
            base_url=f"{quota_gateway[0].url}/v1", api_key=key.plaintext, max_retries=0
        )

    return make


def _upload(client: openai.OpenAI, n: int = 2, **kwargs: Any) -> Any:
    return client.files.create(file=("b.jsonl", jsonl(chat_lines(n))), purpose="batch", **kwargs)


def test_expires_after_is_kept_and_an_expired_file_is_gone(
    client_for: Callable[[str], openai.OpenAI], quota_gateway: tuple[GatewayHandle, Path]
) -> None:
    from batches.models import BatchFile

    client = client_for("nightly")
    made = _upload(client, expires_after={"anchor": "created_at", "seconds": 3600})
    assert made.expires_at == made.created_at + 3600
    default = _upload(client)
    assert default.expires_at == default.created_at + 30 * 24 * 3600  # OpenAI's default
    # An hour later (the clock moved by hand): gone from the API at once, and its storage
    # freed by the application's next upload.
    stored = quota_gateway[1] / BatchFile.objects.get(pk=made.id).storage_name
    assert stored.exists()
    BatchFile.objects.filter(pk=made.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(made.id)
    assert made.id not in [f.id for f in client.files.list()]
    _upload(client)
    assert not stored.exists() and not BatchFile.objects.filter(pk=made.id).exists()


@pytest.mark.parametrize(
    "expires_after",
    [
        {"anchor": "created_at", "seconds": 60},
        {"anchor": "created_at", "seconds": 40 * 24 * 3600},
        {"anchor": "last_active_at", "seconds": 3600},
    ],
)
def test_a_bad_expires_after_is_a_400_naming_it(
    client_for: Callable[[str], openai.OpenAI], expires_after: dict[str, Any]
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        _upload(client_for("nightly"), expires_after=expires_after)
    assert refused.value.body["param"] == "expires_after"


def test_an_application_keeps_at_most_its_quota_of_files(
    client_for: Callable[[str], openai.OpenAI],
) -> None:
    client = client_for("batchapp")
    made = [_upload(client, 1) for _ in range(MAX_FILES)]
    with pytest.raises(openai.BadRequestError) as refused:
        _upload(client, 1)
    assert refused.value.body["code"] == "file_quota_exceeded"
    assert f"limit of {MAX_FILES}" in refused.value.body["message"]
    # Another application has its own share; deleting a file makes room.
    _upload(client_for("limited"), 1)
    client.files.delete(made[0].id)
    _upload(client, 1)


def test_an_application_keeps_at_most_its_quota_of_bytes(
    client_for: Callable[[str], openai.OpenAI],
) -> None:
    client = client_for("batchapp")
    first = _upload(client, 10)  # about 1.3 KB
    assert first.bytes < MAX_BYTES / 2
    _upload(client, 10)
    with pytest.raises(openai.BadRequestError) as refused:
        _upload(client, 10)
    assert refused.value.body["code"] == "file_quota_exceeded"
    assert f"limit of {MAX_BYTES}" in refused.value.body["message"]


def test_a_large_upload_leaves_no_temporary_file_and_no_traceback(
    e2e_database: str, batch_apps: dict[str, str], issue_key: Callable[..., Any], tmp_path: Path
) -> None:
    """An upload larger than Django keeps in memory goes through a temporary file: stored
    (the storage moves the file) or refused (over the application's share), the file is
    gone once the answer is sent, and the worker's log holds no traceback for it."""
    from accounts.models import Application
    from batches.models import BatchFile

    BatchFile.objects.filter(application=Application.objects.get(slug="batchapp")).delete()
    big = jsonl(chat_lines(30_000))  # ~3.5 MB: over FILE_UPLOAD_MAX_MEMORY_SIZE (2.5 MB)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {
        "TMPDIR": str(temporary),
        "SLUICE_BATCH_FILES_DIR": str(tmp_path / "files"),
        "SLUICE_BATCH_APP_MAX_BYTES": str(len(big) + 1000),  # room for one of them
    }
    key = issue_key(application="batchapp")
    with (tmp_path / "gateway.log").open("w+b") as log:
        runs = start_gateway(e2e_database, extra_env=env, stderr=log)
        gateway = next(runs)
        try:
            client = openai.OpenAI(
                base_url=f"{gateway.url}/v1", api_key=key.plaintext, max_retries=0
            )
            stored = client.files.create(file=("big.jsonl", big), purpose="batch")
            assert stored.bytes == len(big)
            with pytest.raises(openai.BadRequestError) as refused:  # over the share
                client.files.create(file=("big.jsonl", big), purpose="batch")
            assert refused.value.body["code"] == "file_quota_exceeded"
            wait_until(lambda: not list(temporary.iterdir()), timeout=5)  # closed after sending
        finally:
            next(runs, None)  # stops the gateway
        log.seek(0)
        output = log.read().decode(errors="replace")
    assert "Traceback" not in output and "Exception ignored" not in output, output[-2000:]
