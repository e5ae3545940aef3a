"""The file and batch objects in OpenAI's shape, as the SDK parses them."""

from datetime import datetime
from typing import Any

from batches.models import Batch, BatchFile


def _ts(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


def file_object(f: BatchFile) -> dict[str, Any]:
    return {
        "id": f.id,
        "object": "file",
        "bytes": f.bytes,
        "created_at": _ts(f.created_at),
        "filename": f.filename,
        "purpose": f.purpose,
        "status": "processed",
        "status_details": None,
        "expires_at": _ts(f.expires_at),
    }


def batch_object(b: Batch, counts: dict[str, int]) -> dict[str, Any]:
    return {
        "id": b.id,
        "object": "batch",
        "endpoint": b.endpoint,
        "errors": None if not b.errors else {"object": "list", "data": b.errors},
        "input_file_id": b.input_file_id,
        "completion_window": b.completion_window,
        "status": b.status,
        "output_file_id": b.output_file_id,
        "error_file_id": b.error_file_id,
        "created_at": _ts(b.created_at),
        "in_progress_at": _ts(b.in_progress_at),
        "expires_at": _ts(b.expires_at),
        "finalizing_at": _ts(b.finalizing_at),
        "completed_at": _ts(b.completed_at),
        "failed_at": _ts(b.failed_at),
        "expired_at": _ts(b.expired_at),
        "cancelling_at": _ts(b.cancelling_at),
        "cancelled_at": _ts(b.cancelled_at),
        "request_counts": {
            "total": b.total,
            "completed": counts.get("completed", 0),
            "failed": counts.get("failed", 0),
        },
        "metadata": b.metadata,
    }


def list_object(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
