"""Where batch files live: Django's storage named "batches" (settings.STORAGES), a local
folder by default, any storage backend in production."""

import secrets

from django.core.files.storage import Storage, storages


def batch_storage() -> Storage:
    return storages["batches"]


def new_file_id() -> str:
    return f"file-{secrets.token_hex(12)}"


def new_batch_id() -> str:
    return f"batch_{secrets.token_hex(12)}"


def storage_name(application_id: int, file_id: str) -> str:
    return f"{application_id}/{file_id}.jsonl"
