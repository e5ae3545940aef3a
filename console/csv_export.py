"""CSV downloads: UTF-8 with a header row, cells that a spreadsheet would run as a formula
neutralised, and big exports streamed from an async iterator (Django under ASGI collects a
sync iterator into memory first)."""

import asyncio
import csv
import io
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpResponse, StreamingHttpResponse

from core.csv_cells import FORMULA_STARTS as _FORMULA_STARTS
from core.csv_cells import neutralise

__all__ = ["neutralise"]


def _prepared(rows: list[Any]) -> list[Any]:
    """Rows as the csv module writes them well: text cells neutralised, times in ISO 8601
    (None is written empty, numbers as they are). Column kinds are read from the first
    value of each column, so a batch costs one pass over its text and time cells only."""
    if not rows:
        return rows
    width = len(rows[0])
    kinds: list[type | None] = [None] * width
    for i in range(width):
        for row in rows:
            if row[i] is not None:
                kinds[i] = type(row[i])
                break
    text = [i for i, k in enumerate(kinds) if k is str]
    times = [i for i, k in enumerate(kinds) if k is not None and hasattr(k, "isoformat")]
    if not text and not times:
        return rows
    prepared = []
    for original in rows:
        row = list(original)
        for i in text:
            value = row[i]
            if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
                row[i] = "'" + value
        for i in times:
            value = row[i]
            if hasattr(value, "isoformat"):
                row[i] = value.isoformat()
        prepared.append(row)
    return prepared


def csv_bytes(rows: Iterable[Iterable[Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerows(_prepared([tuple(row) for row in rows]))
    return out.getvalue().encode("utf-8")


def csv_response(filename: str, header: list[str], rows: Iterable[Iterable[Any]]) -> HttpResponse:
    """A small CSV built at once (reports: one row per group)."""
    body = csv_bytes([header]) + csv_bytes(rows)
    response = HttpResponse(body, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def csv_stream(
    filename: str, header: list[str], batches: Iterator[list[tuple[Any, ...]]]
) -> StreamingHttpResponse:
    """Stream `batches` (a sync iterator of row lists, e.g. keyset-paged queries), each
    fetched and written on a worker thread and sent as it is ready: memory holds two
    batches at most."""

    def next_chunk() -> bytes | None:
        rows = next(batches, None)
        return None if rows is None else csv_bytes(rows)

    async def chunks() -> AsyncIterator[bytes]:
        yield csv_bytes([header])
        # Read and format on the worker thread (the event loop keeps serving calls), one
        # batch ahead of the client, so the database and the network overlap.
        fetch = sync_to_async(next_chunk)
        pending = asyncio.ensure_future(fetch())
        try:
            while (chunk := await pending) is not None:
                pending = asyncio.ensure_future(fetch())
                yield chunk
        finally:
            if not pending.done():
                pending.cancel()

    response = StreamingHttpResponse(chunks(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
