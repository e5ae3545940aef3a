"""CSV downloads: UTF-8 with a header row, cells that a spreadsheet would run as a formula
neutralised, and big exports streamed from an async iterator (Django under ASGI collects a
sync iterator into memory first)."""

import csv
import io
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpResponse, StreamingHttpResponse

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value: Any) -> Any:
    """A text cell starting like a formula gets a leading apostrophe (OWASP's advice), so
    `=HYPERLINK(...)` in a key name reads as text in Excel or Sheets. Numbers stay numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return neutralise(value)


def csv_bytes(rows: Iterable[Iterable[Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerows([_cell(v) for v in row] for row in rows)
    return out.getvalue().encode("utf-8")


def csv_response(filename: str, header: list[str], rows: Iterable[Iterable[Any]]) -> HttpResponse:
    """A small CSV built at once (reports: one row per group)."""
    response = HttpResponse(csv_bytes([header, *rows]), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def csv_stream(
    filename: str, header: list[str], batches: Iterator[list[tuple[Any, ...]]]
) -> StreamingHttpResponse:
    """Stream `batches` (a sync iterator of row lists, e.g. keyset-paged queries), each
    fetched on a worker thread and sent as it is written: memory holds one batch."""

    async def chunks() -> AsyncIterator[bytes]:
        yield csv_bytes([header])
        done = object()
        fetch = sync_to_async(lambda: next(batches, done))
        while (rows := await fetch()) is not done:
            yield csv_bytes(rows)  # type: ignore[arg-type]

    response = StreamingHttpResponse(chunks(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
