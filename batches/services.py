"""Writes of the Batch API: files, batches, and the runner's claims on lines.

Claims are what let several runners share the work without doing a line twice: a line is
taken with `SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL (runners skip each other's rows
instead of queueing behind them); on SQLite every write transaction takes the database's
write lock first (transaction_mode IMMEDIATE, config/database_url.py), which serializes
claims the same way. Every later write of a line is fenced by `claimed_by`, so a runner
whose lease ran out (killed, or stalled) cannot write over the runner that took it next.
"""

import functools
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import IO, Any

from django.conf import settings
from django.core.files.base import ContentFile, File
from django.db import connection, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from accounts.authentication import Principal
from accounts.models import Application
from accounts.services import Actor, admin_action_record
from batches.models import Batch, BatchCount, BatchFile, BatchLine
from batches.storage import batch_storage, new_batch_id, new_file_id, storage_name
from batches.validation import ENDPOINTS, check_lines, read_lines
from core import pg_arrays
from core.errors import GatewayError, bad_request
from core.refresh import invalidate
from routing.models import Route

_WINDOW = re.compile(r"(\d+)([smh])")
_UNIT = {"s": 1, "m": 60, "h": 3600}
MAX_WINDOW = timedelta(hours=24)
Status = Batch.Status
# The change said on core/refresh.py's channel when a batch is created or cancelled: the
# runners hear it and look at the batches at once (batches/runner.py).
BATCHES = "batches"


def completion_seconds(window: Any) -> int:
    """OpenAI accepts "24h"; Sluice also takes shorter windows ("90m", "30s")."""
    match = _WINDOW.fullmatch(window) if isinstance(window, str) else None
    seconds = int(match.group(1)) * _UNIT[match.group(2)] if match else 0
    if not 0 < seconds <= MAX_WINDOW.total_seconds():
        raise bad_request(
            "completion_window must be '24h' (or a shorter span such as '90m' or '30s').",
            param="completion_window",
        )
    return seconds


# --- files ---------------------------------------------------------------------------------


MIN_EXPIRY_SECONDS = 3600  # OpenAI's bounds on expires_after
MAX_EXPIRY_SECONDS = 30 * 24 * 3600
_DONE = (Status.COMPLETED, Status.FAILED, Status.EXPIRED, Status.CANCELLED)


def expires_after_seconds(anchor: Any, seconds: Any) -> int | None:
    """OpenAI's `expires_after` of an upload ({"anchor": "created_at", "seconds": N}, N from
    3600 to 2592000) as seconds; None when neither part was given."""
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise bad_request("expires_after[anchor] must be 'created_at'.", param="expires_after")
    text = str(seconds) if seconds is not None else ""
    if not text.isdigit() or not MIN_EXPIRY_SECONDS <= int(text) <= MAX_EXPIRY_SECONDS:
        raise bad_request(
            f"expires_after[seconds] must be a whole number from {MIN_EXPIRY_SECONDS} "
            f"to {MAX_EXPIRY_SECONDS}.",
            param="expires_after",
        )
    return int(text)


def _expiry(now: datetime, seconds: int | None) -> datetime | None:
    seconds = settings.SLUICE_BATCH_FILE_EXPIRY_SECONDS if seconds is None else seconds
    return now + timedelta(seconds=seconds) if seconds else None


def files_expired_delete(*, application_id: int | None = None) -> int:
    """Free the storage of files past their expiry (of one application, or all), except
    the input of a batch still running; how many went."""
    expired = BatchFile.objects.filter(expires_at__lte=timezone.now())
    if application_id is not None:
        expired = expired.filter(application_id=application_id)
    running = Batch.objects.exclude(status__in=_DONE).values("input_file_id")
    gone = 0
    for file in expired.exclude(id__in=running):
        batch_storage().delete(file.storage_name)
        file.delete()
        gone += 1
    return gone


def _check_quota(application_id: int, size: int) -> None:
    """The application's own share of the batch storage: bytes and uploaded files."""
    live = BatchFile.objects.filter(application_id=application_id)
    used = live.aggregate(total=Sum("bytes"))["total"] or 0
    uploads = live.filter(purpose=BatchFile.Purpose.BATCH).count()
    max_bytes, max_files = settings.SLUICE_BATCH_APP_MAX_BYTES, settings.SLUICE_BATCH_APP_MAX_FILES
    if uploads >= max_files:
        raise GatewayError(
            400,
            f"This application keeps {uploads} uploaded files, its limit of {max_files}: "
            "delete some (DELETE /v1/files/ID) before uploading more.",
            code="file_quota_exceeded",
            param="file",
        )
    if used + size > max_bytes:
        raise GatewayError(
            400,
            f"This application's files take {used} bytes; this one ({size}) would pass its "
            f"limit of {max_bytes}: delete some (DELETE /v1/files/ID) first.",
            code="file_quota_exceeded",
            param="file",
        )


def file_create(
    *,
    principal: Principal,
    upload: File,
    filename: str,
    purpose: str,
    expires_after: int | None = None,
) -> BatchFile:
    """Store an upload. Files past their expiry go first; the application's quota (bytes
    and files, SLUICE_BATCH_APP_MAX_*) is checked with its row locked, so two uploads at
    once cannot both pass it."""
    if purpose != BatchFile.Purpose.BATCH:
        raise bad_request("Only purpose 'batch' files can be uploaded here.", param="purpose")
    lines = 0
    upload.seek(0)
    for line in upload:
        lines += bool(line.strip())
    if lines > settings.SLUICE_BATCH_MAX_LINES:
        raise bad_request(
            f"A batch file may have at most {settings.SLUICE_BATCH_MAX_LINES} lines; "
            f"this one has {lines}.",
            param="file",
        )
    if not lines:
        raise bad_request("The file is empty.", param="file")
    upload.seek(0)
    files_expired_delete(application_id=principal.application_id)
    with transaction.atomic():
        Application.objects.select_for_update().filter(pk=principal.application_id).first()
        _check_quota(principal.application_id, upload.size)
        file_id = new_file_id()
        stored = batch_storage().save(storage_name(principal.application_id, file_id), upload)
        now = timezone.now()
        return BatchFile.objects.create(
            id=file_id,
            application_id=principal.application_id,
            member_id=principal.member_id,
            purpose=purpose,
            filename=filename[:255] or "batch.jsonl",
            bytes=upload.size,
            lines=lines,
            storage_name=stored,
            created_at=now,
            expires_at=_expiry(now, expires_after),
        )


def file_delete(*, file: BatchFile) -> None:
    in_use = Batch.objects.filter(input_file=file).exclude(status__in=_DONE)
    if in_use.exists():
        raise GatewayError(
            409, f"File {file.id} is the input of a batch still running.", code="file_in_use"
        )
    batch_storage().delete(file.storage_name)
    file.delete()


def file_open(file: BatchFile) -> IO[bytes]:
    return batch_storage().open(file.storage_name, "rb")


# --- batches -------------------------------------------------------------------------------


def batch_create(
    *,
    principal: Principal,
    input_file_id: Any,
    endpoint: Any,
    completion_window: Any,
    metadata: Any,
) -> Batch:
    if not isinstance(input_file_id, str) or not input_file_id:
        raise bad_request("You must provide 'input_file_id'.", param="input_file_id")
    if endpoint not in ENDPOINTS:
        raise bad_request(f"'endpoint' must be one of {', '.join(ENDPOINTS)}.", param="endpoint")
    seconds = completion_seconds(completion_window)
    if metadata is not None and not (
        isinstance(metadata, dict)
        and len(metadata) <= 16
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise bad_request(
            "'metadata' must be an object of at most 16 string values.", param="metadata"
        )
    source = (
        BatchFile.objects.filter(application_id=principal.application_id, id=input_file_id)
        .exclude(expires_at__lte=timezone.now())
        .first()
    )
    if source is None:
        raise GatewayError(
            404, f"No file with id {input_file_id}.", code="file_not_found", param="input_file_id"
        )
    if source.purpose != BatchFile.Purpose.BATCH:
        raise bad_request(
            f"File {input_file_id} was not uploaded with purpose 'batch'.", param="input_file_id"
        )
    now = timezone.now()
    batch = Batch.objects.create(
        id=new_batch_id(),
        application_id=principal.application_id,
        member_id=principal.member_id,
        key_prefix=principal.prefix,
        endpoint=endpoint,
        input_file=source,
        completion_window=completion_window,
        metadata=metadata,
        status=Status.VALIDATING,
        total=source.lines,
        created_at=now,
        expires_at=now + timedelta(seconds=seconds),
    )
    invalidate(BATCHES)
    return batch


def batch_cancel(*, batch: Batch, actor: Actor | None = None) -> Batch:
    """Stops new lines at once; runners abandon the lines they run within a tick. An
    `actor` (the console) records the cancel in the admin actions log; a key cancelling its
    own batch through /v1 is not an admin action."""
    if batch.status in (Status.CANCELLING, Status.CANCELLED):
        return batch
    before = batch.status
    now = timezone.now()
    with transaction.atomic():
        moved = Batch.objects.filter(
            pk=batch.pk, status__in=(Status.VALIDATING, Status.IN_PROGRESS)
        ).update(status=Status.CANCELLING, cancelling_at=now)
        if moved:
            invalidate(BATCHES)
        if moved and actor is not None:
            admin_action_record(
                actor=actor,
                action="batch.cancel",
                obj=batch,
                object_type="batch",
                team_id=Application.objects.values_list("team_id", flat=True).get(
                    pk=batch.application_id
                ),
                before={"status": before},
                after={"status": Status.CANCELLING},
            )
    batch.refresh_from_db()
    if not moved and batch.status not in (Status.CANCELLING, Status.CANCELLED):
        raise GatewayError(
            409,
            f"Batch {batch.id} is {batch.status} and can no longer be cancelled.",
            code="batch_not_cancellable",
        )
    return batch


# --- the runner ----------------------------------------------------------------------------


def _hold(batch_id: str, status: str, runner: str, now: datetime) -> bool:
    """Take the batch for validation or finalization, unless a live runner holds it."""
    until = now + timedelta(seconds=settings.SLUICE_BATCH_LEASE_SECONDS)
    return bool(
        Batch.objects.filter(pk=batch_id, status=status)
        .filter(Q(held_until__isnull=True) | Q(held_until__lt=now) | Q(held_by=runner))
        .update(held_by=runner, held_until=until)
    )


def batch_validate(*, batch_id: str, runner: str) -> str | None:
    """Check every line; the batch then runs (`in_progress`) or is `failed` with the
    errors. None when another runner is at it."""
    now = timezone.now()
    if not _hold(batch_id, Status.VALIDATING, runner, now):
        return None
    batch = Batch.objects.select_related("input_file").get(pk=batch_id)
    application = Application.objects.get(pk=batch.application_id)
    allowed = set(application.routes.values_list("name", flat=True))
    routes = set(Route.objects.values_list("name", flat=True))
    try:
        with file_open(batch.input_file) as handle:
            specs, errors = check_lines(
                read_lines(handle),
                endpoint=batch.endpoint,
                routes=routes,
                allowed=allowed,
                max_lines=settings.SLUICE_BATCH_MAX_LINES,
            )
    except OSError:
        specs, errors = [], []
        errors_data = [{"code": "file_missing", "message": "The input file is gone.", "line": None}]
    else:
        errors_data = [e.as_dict() for e in errors]
    with transaction.atomic():
        current = Batch.objects.select_for_update().get(pk=batch_id)
        if current.status != Status.VALIDATING or current.held_by != runner:
            return None
        now = timezone.now()
        if errors_data:
            current.status, current.failed_at, current.errors = Status.FAILED, now, errors_data
        else:
            BatchLine.objects.bulk_create(
                (
                    BatchLine(
                        batch_id=batch_id,
                        number=s.number,
                        custom_id=s.custom_id,
                        model=s.model,
                        offset=s.offset,
                        length=s.length,
                    )
                    for s in specs
                ),
                batch_size=2000,
            )
            current.status, current.in_progress_at, current.total = (
                Status.IN_PROGRESS,
                now,
                len(specs),
            )
        current.held_by, current.held_until = "", None
        current.save()
    return current.status


@dataclass(frozen=True)
class ClaimedLine:
    id: int
    batch_id: str
    number: int
    custom_id: str
    model: str
    offset: int
    length: int


_CLAIM_FIELDS = ("id", "number", "custom_id", "offset", "length")


@functools.cache
def _claim_sql(vendor: str) -> tuple[str, str, str]:
    """A claim's statements, built once (the ORM's build of them cost more CPU than running
    them, several times a second per runner): the lowest pending lines of a batch's model,
    the lowest whose lease ran out (each a range of the batch_line_claim index, locked and
    skipped by other runners where the database can), and the update that takes them."""
    quote = connection.ops.quote_name
    table = quote(BatchLine._meta.db_table)
    c = {
        f: quote(BatchLine._meta.get_field(f).column)
        for f in (*_CLAIM_FIELDS, "batch", "model", "state", "lease_until", "claimed_by", "claims")
    }
    skips = connection.features.has_select_for_update_skip_locked
    lock = " FOR UPDATE SKIP LOCKED" if skips else ""
    select = (
        f"SELECT {', '.join(c[f] for f in _CLAIM_FIELDS)} FROM {table} "
        f"WHERE {c['batch']} = %s AND {c['model']} = %s AND {c['state']} = %s"
    )
    order = f" ORDER BY {c['number']} LIMIT %s{lock}"
    pending = select + f" AND {c['number']} >= %s" + order
    update = (
        f"UPDATE {table} SET {c['state']} = %s, {c['claimed_by']} = %s, "
        f"{c['lease_until']} = %s, {c['claims']} = {c['claims']} + 1 WHERE {c['id']} IN "
    )
    return pending, select + f" AND {c['lease_until']} < %s" + order, update


def lines_claim(
    *,
    batch_id: str,
    model: str,
    runner: str,
    limit: int,
    now: datetime | None = None,
    lapsed: bool = True,
    from_number: int = 0,
) -> list[ClaimedLine]:
    """Up to `limit` lines of the batch for `model` that nobody runs, lowest numbers first:
    pending ones numbered `from_number` or more and (`lapsed`) those whose runner's lease
    ran out (it died); held by `runner` for a lease. A read or two (each a range of the
    batch_line_claim index) and one update, whatever `limit` is. `from_number` is where the
    caller knows pending lines begin: once PostgreSQL has statistics for the lines it reads
    them through the (batch, number) index, and a claim from the first line stepped over
    every line claimed before (6.3 ms a claim half-way through a batch of 30,000 lines)."""
    if limit <= 0:
        return []
    now = now or timezone.now()
    until = now + timedelta(seconds=settings.SLUICE_BATCH_LEASE_SECONDS)
    pending, gone, update = _claim_sql(connection.vendor)
    at = connection.ops.adapt_datetimefield_value
    State = BatchLine.State
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Read the claim index in its order, whatever the statistics say: a batch's
            # lines added since the table was last analyzed look like a handful, and
            # PostgreSQL then reads every pending line of the batch through its (batch,
            # state) index and sorts them (12 ms a claim at the start of 30,000 lines).
            cursor.execute("SET LOCAL enable_sort = off")
        # Rows read here stay locked (PostgreSQL) or the database's write lock is held
        # (SQLite) until the update below: nobody else can claim them in between.
        cursor.execute(pending, [batch_id, model, State.PENDING, from_number, limit])
        rows = cursor.fetchall()
        if lapsed:
            cursor.execute(gone, [batch_id, model, State.RUNNING, at(now), limit])
            rows = sorted(rows + cursor.fetchall(), key=lambda r: r[1])[:limit]
        if not rows:
            return []
        ids = [r[0] for r in rows]
        marks = ", ".join(["%s"] * len(ids))
        cursor.execute(f"{update}({marks})", [State.RUNNING, runner, at(until), *ids])
    return [ClaimedLine(i, batch_id, n, c, model, o, length) for i, n, c, o, length in rows]


def lines_renew(*, ids: list[int], runner: str) -> int:
    until = timezone.now() + timedelta(seconds=settings.SLUICE_BATCH_LEASE_SECONDS)
    return BatchLine.objects.filter(
        id__in=ids, state=BatchLine.State.RUNNING, claimed_by=runner
    ).update(lease_until=until)


@dataclass(frozen=True)
class LineAnswer:
    batch_id: str
    line_id: int
    result: str  # the output line, JSON
    failed: bool


_WRITE_CHUNK = 500  # lines per UPDATE: well inside every database's limit of parameters


def _finish_names() -> tuple[str, dict[str, str]]:
    """The line table's name and the columns an answer writes, quoted."""
    quote = connection.ops.quote_name
    names = ("id", "state", "result", "failed", "lease_until", "claimed_by")
    columns = {f: quote(BatchLine._meta.get_field(f).column) for f in names}
    return quote(BatchLine._meta.db_table), columns


def _finish_sql() -> str:
    """One line's answer, fenced by the claim; run for many lines at once (executemany:
    one C loop on SQLite, no expression built per line)."""
    table, c = _finish_names()
    return (
        f"UPDATE {table} SET {c['state']} = %s, {c['result']} = %s, {c['failed']} = %s, "
        f"{c['lease_until']} = NULL WHERE {c['id']} = %s AND {c['state']} = %s "
        f"AND {c['claimed_by']} = %s"
    )


def _finish_unnested(answers: list[LineAnswer], runner: str) -> int:
    """The answers in one statement on PostgreSQL (core/pg_arrays.py: a statement a line was
    parsed and planned a line), fenced by the claim as `_finish_sql`; the lines written."""
    table, c = _finish_names()
    fields = [BatchLine._meta.get_field(f) for f in ("id", "result", "failed")]
    sql = (
        f"UPDATE {table} AS line SET {c['state']} = %s, {c['result']} = answer.result, "
        f"{c['failed']} = answer.failed, {c['lease_until']} = NULL "
        f"FROM {pg_arrays.unnest(fields)} AS answer (id, result, failed) "
        f"WHERE line.{c['id']} = answer.id AND line.{c['state']} = %s "
        f"AND line.{c['claimed_by']} = %s"
    )
    rows = [(a.line_id, a.result, a.failed) for a in answers]
    State = BatchLine.State
    return pg_arrays.execute(
        sql, [State.DONE, *pg_arrays.columns(fields, rows), State.RUNNING, runner]
    )


def lines_finish(*, runner: str, answers: list[LineAnswer], released: list[int]) -> list[int]:
    """Record answers and give lines back unrun, in one transaction, each fenced by the
    claim, and add the answers to the batches' counts; the ids of the answers that did not
    count, their lines no longer this runner's (its lease ran out and another runner took
    them: that one's counts)."""
    ids = [a.line_id for a in answers] + released
    if not ids:
        return []
    State = BatchLine.State
    written = 0
    with transaction.atomic():
        if answers and connection.vendor == "postgresql":
            written += _finish_unnested(answers, runner)
        elif answers:
            with connection.cursor() as cursor:
                cursor.executemany(
                    _finish_sql(),
                    [
                        (State.DONE, a.result, a.failed, a.line_id, State.RUNNING, runner)
                        for a in answers
                    ],
                )
                written += cursor.rowcount
        for start in range(0, len(released), _WRITE_CHUNK):
            written += BatchLine.objects.filter(
                id__in=released[start : start + _WRITE_CHUNK],
                state=State.RUNNING,
                claimed_by=runner,
            ).update(state=State.PENDING, claimed_by="", lease_until=None)
        lost: list[int] = []
        if written != len(ids):
            # Some were taken by another runner (rare): which answers did not count.
            kept: set[int] = set()
            for start in range(0, len(answers), _WRITE_CHUNK):
                chunk = [a.line_id for a in answers[start : start + _WRITE_CHUNK]]
                kept.update(
                    BatchLine.objects.filter(
                        id__in=chunk, state=State.DONE, claimed_by=runner
                    ).values_list("id", flat=True)
                )
            lost = [a.line_id for a in answers if a.line_id not in kept]
        _count_done(runner, answers, set(lost))
    return lost


def _count_done(runner: str, answers: list[LineAnswer], lost: set[int]) -> None:
    """Add the answers that counted to the runner's counts of their batches (BatchCount):
    one statement, in the transaction that made the lines done."""
    tally: dict[str, list[int]] = {}
    for a in answers:
        if a.line_id not in lost:
            tally.setdefault(a.batch_id, [0, 0])[a.failed] += 1
    if not tally:
        return
    quote = connection.ops.quote_name
    table = quote(BatchCount._meta.db_table)
    batch, name, completed, failed = (
        quote(BatchCount._meta.get_field(f).column)
        for f in ("batch", "runner", "completed", "failed")
    )
    rows = ", ".join(["(%s, %s, %s, %s)"] * len(tally))
    sql = (
        f"INSERT INTO {table} ({batch}, {name}, {completed}, {failed}) VALUES {rows} "
        f"ON CONFLICT ({batch}, {name}) DO UPDATE SET "
        f"{completed} = {table}.{completed} + excluded.{completed}, "
        f"{failed} = {table}.{failed} + excluded.{failed}"
    )
    params = [v for batch_id, n in sorted(tally.items()) for v in (batch_id, runner, *n)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def line_finish(*, line: ClaimedLine, runner: str, result: dict[str, Any], failed: bool) -> bool:
    """Record one line's answer; False when the line is no longer this runner's."""
    text = json.dumps(result, separators=(",", ":"))
    answer = LineAnswer(line.batch_id, line.id, text, failed)
    return not lines_finish(runner=runner, answers=[answer], released=[])


def line_release(*, line_id: int, runner: str) -> None:
    """Give a line back unrun (window closed, batch cancelled or expired, runner stopping)."""
    lines_finish(runner=runner, answers=[], released=[line_id])


def line_bodies(storage_name: str, lines: list[ClaimedLine]) -> dict[int, bytes]:
    """The claimed lines' raw JSON, read from the input file in storage."""
    bodies = {}
    with batch_storage().open(storage_name, "rb") as handle:
        for line in sorted(lines, key=lambda x: x.offset):
            handle.seek(line.offset)
            bodies[line.id] = handle.read(line.length)
    return bodies


class InputUnreadable(OSError):
    """The batch's input file could not be read; the lines claimed went back, and the
    answers given were written (`lost`: the ids of those that did not count)."""

    def __init__(self, lost: list[int]) -> None:
        super().__init__("the batch's input file could not be read")
        self.lost = lost


def lines_claim_read(
    *,
    batch_id: str,
    storage_name: str,
    model: str,
    runner: str,
    limit: int,
    lapsed: bool = True,
    from_number: int = 0,
    answers: Sequence[LineAnswer] = (),
    released: Sequence[int] = (),
) -> tuple[list[tuple[ClaimedLine, bytes]], list[int]]:
    """Write the runner's ended lines (`lines_finish`) and claim more (`lines_claim`) in
    one transaction, then read the claimed lines' raw JSON: one trip to a worker thread.
    The lines claimed with their bodies, and the ids of the answers that did not count."""
    with transaction.atomic():
        lost = lines_finish(runner=runner, answers=list(answers), released=list(released))
        claimed = lines_claim(
            batch_id=batch_id,
            model=model,
            runner=runner,
            limit=limit,
            lapsed=lapsed,
            from_number=from_number,
        )
    if not claimed:
        return [], lost
    try:
        bodies = line_bodies(storage_name, claimed)
    except OSError:
        lines_finish(runner=runner, answers=[], released=[line.id for line in claimed])
        raise InputUnreadable(lost) from None
    return [(line, bodies[line.id]) for line in claimed], lost


_UNFINISHED = {
    Status.EXPIRED: ("batch_expired", "This request could not be run before the batch expired."),
    Status.CANCELLED: ("batch_cancelled", "This request was not run: the batch was cancelled."),
}


def batch_finalize(*, batch_id: str, runner: str) -> str | None:
    """When nothing runs any more: write the output and error files and end the batch as
    completed (every line done), cancelled or expired. None while it is not time yet."""
    now = timezone.now()
    with transaction.atomic():
        batch = Batch.objects.select_for_update().get(pk=batch_id)
        if batch.status not in (Status.IN_PROGRESS, Status.CANCELLING, Status.FINALIZING):
            return None
        if batch.status == Status.FINALIZING and not (
            batch.held_by == runner or batch.held_until is None or batch.held_until < now
        ):
            return None
        lines = BatchLine.objects.filter(batch_id=batch_id)
        if lines.filter(state=BatchLine.State.RUNNING, lease_until__gte=now).exists():
            return None  # a live runner still has lines in flight
        all_done = not lines.filter(state__in=BatchLine.UNFINISHED).exists()
        if batch.cancelling_at is not None:
            final = Status.CANCELLED
        elif all_done:
            final = Status.COMPLETED
        elif now >= batch.expires_at:
            final = Status.EXPIRED
        else:
            return None
        batch.status, batch.held_by = Status.FINALIZING, runner
        batch.held_until = now + timedelta(seconds=settings.SLUICE_BATCH_LEASE_SECONDS)
        batch.finalizing_at = batch.finalizing_at or now
        batch.save()
    outputs, errors = _result_files(batch_id, final)
    with transaction.atomic():
        batch = Batch.objects.select_for_update().get(pk=batch_id)
        if batch.status != Status.FINALIZING or batch.held_by != runner:
            return None
        for name, content in (("output", outputs), ("error", errors)):
            if content:
                f = _output_file(batch, f"{batch_id}_{name}.jsonl", content)
                setattr(batch, f"{name}_file", f)
        batch.status, batch.held_by, batch.held_until = final, "", None
        setattr(batch, f"{final}_at", timezone.now())
        batch.save()
        BatchLine.objects.filter(batch_id=batch_id).update(result="")
    return final


def _result_files(batch_id: str, final: str) -> tuple[bytes, bytes]:
    outputs: list[str] = []
    errors: list[str] = []
    unfinished = _UNFINISHED.get(final)
    rows = BatchLine.objects.filter(batch_id=batch_id).order_by("number")
    for line in rows.only("state", "result", "failed", "custom_id", "number").iterator():
        if line.state == BatchLine.State.DONE:
            (errors if line.failed else outputs).append(line.result)
        elif unfinished is not None:
            code, message = unfinished
            entry = {
                "id": f"batch_req_{batch_id[6:]}_{line.number}",
                "custom_id": line.custom_id,
                "response": None,
                "error": {"code": code, "message": message},
            }
            errors.append(json.dumps(entry, separators=(",", ":")))
    return _jsonl(outputs), _jsonl(errors)


def _jsonl(items: list[str]) -> bytes:
    return "".join(f"{item}\n" for item in items).encode()


def _output_file(batch: Batch, filename: str, content: bytes) -> BatchFile:
    file_id = new_file_id()
    stored = batch_storage().save(storage_name(batch.application_id, file_id), ContentFile(content))
    now = timezone.now()
    return BatchFile.objects.create(
        id=file_id,
        application_id=batch.application_id,
        member_id=batch.member_id,
        purpose=BatchFile.Purpose.BATCH_OUTPUT,
        filename=filename,
        bytes=len(content),
        lines=content.count(b"\n"),
        storage_name=stored,
        created_at=now,
        expires_at=_expiry(now, None),
    )


def iter_content(file: BatchFile) -> Iterator[bytes]:
    with file_open(file) as handle:
        while chunk := handle.read(64 * 1024):
            yield chunk
