"""OpenAI's Files and Batches endpoints (the parts the Batch API needs). Thin: reads in
selectors.py, writes in services.py; every query is scoped to the key's application."""

import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.multipartparser import MultiPartParserError
from django.http.response import HttpResponseBase

from accounts.authentication import Principal, authenticate, presented_key
from batches import selectors, services
from batches.models import BatchFile
from batches.objects import batch_object, file_object, list_object
from core.db import db_read, db_write, released
from core.errors import GatewayError, bad_request

View = Callable[..., Awaitable[HttpResponseBase]]


def _json(body: dict[str, Any], status: int = 200) -> HttpResponse:
    return HttpResponse(json.dumps(body), status=status, content_type="application/json")


def _api(*methods: str) -> Callable[[View], View]:
    """Method check, key check, and errors in OpenAI's shape."""

    def wrap(view: View) -> View:
        @functools.wraps(view)
        async def run(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            try:
                if request.method not in methods:
                    allowed = ", ".join(methods)
                    error = GatewayError(
                        405,
                        f"{request.method} is not allowed here; use {allowed}.",
                        code="method_not_allowed",
                    )
                    error.headers["Allow"] = allowed
                    raise error
                principal = await authenticate(presented_key(request.headers))
                return await view(request, principal, *args, **kwargs)
            except GatewayError as error:
                return error.response()

        return run

    return wrap


def _not_found(kind: str, object_id: str) -> GatewayError:
    return GatewayError(404, f"No {kind} with id {object_id}.", code=f"{kind}_not_found")


def _page_args(request: HttpRequest) -> tuple[str | None, int]:
    raw = request.GET.get("limit", "20")
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise bad_request("'limit' must be an integer from 1 to 100.", param="limit")
    return request.GET.get("after") or None, int(raw)


# --- files ---------------------------------------------------------------------------------


@_api("GET", "POST")
async def files(request: HttpRequest, principal: Principal) -> HttpResponseBase:
    if request.method == "GET":
        after, limit = _page_args(request)
        items, more = await db_read(
            selectors.files_list,
            application_id=principal.application_id,
            purpose=request.GET.get("purpose"),
            after=after,
            limit=limit,
        )
        return _json(list_object([file_object(f) for f in items], more))
    created = await sync_to_async(_upload, thread_sensitive=False)(request, principal)
    return _json(file_object(created))


def _upload(request: HttpRequest, principal: Principal) -> BatchFile:
    try:
        purpose, upload = request.POST.get("purpose"), request.FILES.get("file")
    except MultiPartParserError as exc:
        raise bad_request(f"The upload is not valid multipart/form-data: {exc}.") from None
    if upload is None:
        raise bad_request("You must provide a 'file' (multipart/form-data).", param="file")
    if not purpose:
        raise bad_request("You must provide 'purpose'.", param="purpose")
    expires_after = services.expires_after_seconds(
        request.POST.get("expires_after[anchor]"), request.POST.get("expires_after[seconds]")
    )
    return released(services.file_create)(
        principal=principal,
        upload=upload,
        filename=upload.name or "",
        purpose=purpose,
        expires_after=expires_after,
    )


async def _file_of(principal: Principal, file_id: str) -> BatchFile:
    found = await db_read(
        selectors.file_get, application_id=principal.application_id, file_id=file_id
    )
    if found is None:
        raise _not_found("file", file_id)
    return found


@_api("GET", "DELETE")
async def file_detail(request: HttpRequest, principal: Principal, file_id: str) -> HttpResponseBase:
    found = await _file_of(principal, file_id)
    if request.method == "GET":
        return _json(file_object(found))
    await db_write(services.file_delete, file=found)
    return _json({"id": file_id, "object": "file", "deleted": True})


@_api("GET")
async def file_content(
    request: HttpRequest, principal: Principal, file_id: str
) -> HttpResponseBase:
    found = await _file_of(principal, file_id)
    chunks = services.iter_content(found)
    read = sync_to_async(next, thread_sensitive=False)
    try:
        first = await read(chunks, b"")
    except OSError:
        raise _not_found("file", file_id) from None

    async def relay() -> AsyncIterator[bytes]:
        chunk = first
        while chunk:
            yield chunk
            chunk = await read(chunks, b"")

    return StreamingHttpResponse(relay(), content_type="application/jsonl")


# --- batches -------------------------------------------------------------------------------


async def _batch_body(batch: Any) -> dict[str, Any]:
    counts = await db_read(selectors.line_counts, [batch.id])
    return batch_object(batch, counts.get(batch.id, {}))


@_api("GET", "POST")
async def batches(request: HttpRequest, principal: Principal) -> HttpResponseBase:
    if request.method == "GET":
        after, limit = _page_args(request)
        items, more = await db_read(
            selectors.batches_list,
            application_id=principal.application_id,
            after=after,
            limit=limit,
        )
        counts = await db_read(selectors.line_counts, [b.id for b in items])
        return _json(list_object([batch_object(b, counts.get(b.id, {})) for b in items], more))
    try:
        body = json.loads(request.body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    batch = await db_write(
        services.batch_create,
        principal=principal,
        input_file_id=body.get("input_file_id"),
        endpoint=body.get("endpoint"),
        completion_window=body.get("completion_window"),
        metadata=body.get("metadata"),
    )
    return _json(await _batch_body(batch))


async def _batch_of(principal: Principal, batch_id: str) -> Any:
    found = await db_read(
        selectors.batch_get, application_id=principal.application_id, batch_id=batch_id
    )
    if found is None:
        raise _not_found("batch", batch_id)
    return found


@_api("GET")
async def batch_detail(
    request: HttpRequest, principal: Principal, batch_id: str
) -> HttpResponseBase:
    return _json(await _batch_body(await _batch_of(principal, batch_id)))


@_api("POST")
async def batch_cancel(
    request: HttpRequest, principal: Principal, batch_id: str
) -> HttpResponseBase:
    batch = await db_write(services.batch_cancel, batch=await _batch_of(principal, batch_id))
    return _json(await _batch_body(batch))
