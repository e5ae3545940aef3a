"""The audit trail: what the proxy learned about a call, written off the request path.

The proxy fills a `CallLog` as it goes and hands it to `audit_writer.record()`, which
appends it to a list and a line to this worker's spool file (routing/observability/audit_spool.py: a
worker killed before the batch is written loses nothing). A background task writes the
rows in batches (one transaction per batch) from its own thread, which keeps its
connection, so a slow or briefly unavailable database never holds up a call; a batch that
fails is kept and retried.
"""

import asyncio
import logging
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    connection,
    connections,
    transaction,
)
from django.db.models import (
    DateField,
    DateTimeField,
    DecimalField,
    GenericIPAddressField,
    Model,
)
from django.db.models.constants import OnConflict

from core import pg_arrays
from core.outcomes import Outcome
from quotas.models import ROLLUP_COUNTS, DailyUsageRollup, UsageRollup, latency_field
from quotas.reservation import Ticket
from quotas.rollups import daily_rows
from routing.models import Attempt, CallRecord
from routing.observability.audit_spool import Spool, decode_call, encode_call, spool_folder
from routing.observability.metrics import metrics_record

log = logging.getLogger("sluice.audit")

_MAX_PENDING = 100_000  # past this a dead database costs memory, not the process


def new_request_id() -> str:
    """Time-ordered (ms) then random, so ids sort by arrival and index well. Not a secret,
    so the cheap generator will do."""
    return f"req_{int(time.time() * 1000):012x}{random.getrandbits(64):016x}"


@dataclass
class AttemptLog:
    number: int
    deployment: str
    started_at: datetime
    duration_ms: float = 0.0
    status_code: int | None = None
    error_class: str = ""  # an ErrorClass: the upstream's answer was an error
    retry_delay_ms: float | None = None
    retry_reason: str = ""
    skipped: str = ""  # not sent: breaker, concurrency, budget or drain
    outcome: str = ""  # an Outcome that ended the attempt before its answer: preempted

    @property
    def ended_by(self) -> str:
        """What ended the attempt, as its row's `error_class` column and the metrics keep
        it: the error class, or the outcome that cut it; "" for an answer."""
        return self.error_class or self.outcome


UNKNOWN_ROUTE = "unknown"  # the route of a call naming a model that is no route


@dataclass
class CallLog:
    request_id: str
    endpoint: str
    client_ip: str | None
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    started: float = field(default_factory=time.perf_counter)
    member_id: int | None = None
    member_email: str = ""
    application_id: int | None = None
    application_slug: str = ""
    key_prefix: str = ""
    priority: str = ""
    queue_ms: float | None = None  # waited for a slot (None: never queued)
    queue_position: int | None = None
    requested_model: str = ""  # as the client named it (stored in the call's row)
    # What metrics and rollups key on: the route's name, UNKNOWN_ROUTE when the model names
    # none, "" before a model was read. A bounded set, whatever clients send.
    route: str = ""
    served_deployment: str = ""
    upstream_model: str = ""
    stream: bool = False
    outcome: str = Outcome.SUCCESS
    status_code: int = 200
    error_message: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost: Decimal = Decimal(0)
    latency_ms: float = 0.0
    ttfb_ms: float | None = None
    retries: int = 0
    fell_back: bool = False
    attempts: list[AttemptLog] = field(default_factory=list)
    quota: Ticket | None = None  # the quota reservation to settle, not stored
    team_id: int | None = None  # for the usage rollups
    batch_id: str = ""  # a line of a batch (batches app): its batch and custom_id
    custom_id: str = ""
    cache: str = ""  # the response cache: hit, miss or bypass ("" : the application has none)
    client_protocol: str = "openai"  # the shape the client spoke (routing/request_path/protocols/)
    upstream_protocol: str = ""  # the kind of the upstream that served it
    degraded: list[str] = field(default_factory=list)  # what crossing kinds changed
    user_agent: str = ""
    # A CallTrace (routing/observability/tracing.py) when traces are exported; not stored.
    trace: Any = None

    @property
    def attempt_count(self) -> int:
        """Upstream attempts actually sent (skipped deployments are rows too)."""
        return sum(1 for a in self.attempts if not a.skipped)

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def finish(self, *, outcome: str, status: int, error_message: str = "") -> None:
        self.outcome = outcome
        self.status_code = status
        self.error_message = error_message[:500]
        self.latency_ms = self.elapsed_ms()

    def call_row(self) -> tuple[Any, ...]:
        """The call's row, in the order of CALL_COLUMNS."""
        return _storable_strings(
            (
                self.request_id,
                self.created_at,
                self.member_id,
                self.member_email,
                self.application_id,
                self.application_slug,
                self.key_prefix,
                self.priority,
                None if self.queue_ms is None else round(self.queue_ms, 3),
                self.queue_position,
                self.endpoint,
                self.requested_model[:200],
                self.served_deployment,
                self.upstream_model[:200],
                self.stream,
                self.outcome,
                self.status_code,
                self.error_message,
                self.attempt_count,
                self.retries,
                self.fell_back,
                self.tokens_in,
                self.tokens_out,
                self.cost,
                round(self.latency_ms, 3),
                None if self.ttfb_ms is None else round(self.ttfb_ms, 3),
                self.client_ip,
                self.batch_id,
                self.custom_id[:200],
                self.cache,
                self.client_protocol,
                self.upstream_protocol,
                "\n".join(self.degraded)[:4000],
                self.user_agent[:200],
            )
        )

    def attempt_rows(self) -> list[tuple[Any, ...]]:
        """A row per attempt, in the order of ATTEMPT_COLUMNS."""
        return [
            _storable_strings(
                (
                    self.request_id,
                    a.number,
                    a.deployment,
                    a.started_at,
                    round(a.duration_ms, 3),
                    a.status_code,
                    a.ended_by,
                    None if a.retry_delay_ms is None else round(a.retry_delay_ms, 3),
                    a.retry_reason,
                    a.skipped,
                )
            )
            for a in self.attempts
        ]


# The rows' columns. A row as a tuple, built and adapted, costs the writer's thread (which
# holds the interpreter while the loop waits) 7.5 µs, against 10.6 as a dict.
CALL_COLUMNS = (
    "request_id", "created_at", "member_id", "member_email", "application_id",
    "application_slug", "key_prefix", "priority", "queue_ms", "queue_position", "endpoint",
    "requested_model", "served_deployment", "upstream_model", "stream", "outcome",
    "status_code", "error_message", "attempt_count", "retries", "fell_back", "tokens_in",
    "tokens_out", "cost", "latency_ms", "ttfb_ms", "client_ip", "batch_id", "custom_id",
    "cache", "client_protocol", "upstream_protocol", "degraded", "user_agent",
)  # fmt: skip
ATTEMPT_COLUMNS = (
    "call_id", "number", "deployment", "started_at", "duration_ms", "status_code",
    "error_class", "retry_delay_ms", "retry_reason", "skipped",
)  # fmt: skip


def storable(text: str) -> str:
    """Text every database takes: lone surrogates (JSON allows `\\ud800`, UTF-8 does not)
    and NUL characters (PostgreSQL refuses them) replaced."""
    if text.isascii():
        return text.replace("\x00", "\ufffd") if "\x00" in text else text
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def _storable_strings(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple([storable(value) if type(value) is str else value for value in row])


_ADAPTED_FIELDS = (DateField, DecimalField, GenericIPAddressField)  # DateTimeField too


def _adapter(field: Any, db: Any) -> Any:
    """How a field's value goes to the driver: an aware datetime straight to the backend's
    adaptation (what `get_db_prep_save` comes to for it, without its checks per value),
    any other value of an adapted field through `get_db_prep_save`; None: as it is."""
    if not isinstance(field, _ADAPTED_FIELDS):
        return None
    prepared = field.get_db_prep_save
    if not isinstance(field, DateTimeField):
        return lambda value: prepared(value, db)
    adapt = db.ops.adapt_datetimefield_value
    # SQLite stores a UTC time as its naive text when the connection's zone is UTC (the
    # backend's adaptation checks settings and converts zones for every value).
    utc_text = db.vendor == "sqlite" and db.timezone is UTC

    def datetime_value(value: Any) -> Any:
        if type(value) is datetime and value.tzinfo is not None:
            if utc_text and value.tzinfo is UTC:
                # The backend's str(value.replace(tzinfo=None)) without the copy made by
                # replace(): a third less CPU. The text ends in "+00:00".
                return value.isoformat(" ")[:-6]
            return adapt(value)
        return prepared(value, db)

    return datetime_value


def _adapters(fields: Sequence[Any]) -> list[tuple[int, Any]]:
    """(position, adaptation) of the fields whose values the driver cannot take as they
    are: only dates (and times), decimals and addresses; strings, numbers and None go as
    they are (most of the CPU of a write was adapting every value)."""
    db = connections[DEFAULT_DB_ALIAS]  # once, not through the proxy for every value
    return [
        (i, adapt) for i, field in enumerate(fields) if (adapt := _adapter(field, db)) is not None
    ]


def _db_values(fields: Sequence[Any], rows: Iterable[Iterable[Any]]) -> list[list[Any]]:
    """The rows (their values in the order of `fields`) as the driver wants them."""
    adapted = _adapters(fields)
    values = [list(row) for row in rows]
    for row in values:
        for i, adapt in adapted:
            if row[i] is not None:
                row[i] = adapt(row[i])
    return values


def _db_columns(fields: Sequence[Any], rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """The rows' values column by column (in the order of `fields`) as the driver wants
    them: PostgreSQL's arrays (core/pg_arrays.py)."""
    values = pg_arrays.columns(fields, rows)
    for i, adapt in _adapters(fields):
        values[i] = [None if v is None else adapt(v) for v in values[i]]
    return values


def _insert_ignoring_duplicates(
    model: type[Model], columns: Sequence[str], rows: list[tuple[Any, ...]]
) -> None:
    """The rows with the least CPU per row (the ORM's bulk_create costs several times more,
    and these rows are written for every call). A retried batch that had in fact committed
    is harmless: duplicates are ignored."""
    if not rows:
        return
    fields = [model._meta.get_field(name) for name in columns]
    ops = connection.ops
    head = "{} {} ({})".format(
        ops.insert_statement(on_conflict=OnConflict.IGNORE),
        ops.quote_name(model._meta.db_table),
        ", ".join(ops.quote_name(f.column) for f in fields),
    )
    tail = ops.on_conflict_suffix_sql(fields, OnConflict.IGNORE, None, None)
    if connection.vendor == "postgresql":
        # One statement, a column an array: parsed and planned once, not once a row.
        sql = f"{head} SELECT * FROM {pg_arrays.unnest(fields)} {tail}"
        pg_arrays.execute(sql, _db_columns(fields, rows))
        return
    values = _db_values(fields, rows)
    one_row = "({})".format(", ".join(["?"] * len(fields)))
    # SQLite's driver lets go of the GIL around each run of a statement and takes it back
    # from the busy event loop: executemany, a run a row, forced the loop to switch once a
    # row. Many rows to a statement, on the driver's connection: Django's cursor would
    # rewrite every placeholder with a regular expression, on every statement.
    with connection.wrap_database_errors:
        most = max(1, ops.bulk_batch_size(fields, values))
        for start, size in _statements(len(values), most):
            sql = f"{head} VALUES {', '.join([one_row] * size)} {tail}"
            chunk = values[start : start + size]
            connection.connection.execute(sql, [value for row in chunk for value in row])


def _statements(rows: int, most: int) -> Iterator[tuple[int, int]]:
    """(first row, rows) of each statement: as many rows as a statement takes, then powers
    of two, so the texts are a few the driver keeps prepared (a text of each batch's own
    length was parsed anew on most writes)."""
    start = 0
    while start < rows:
        left = rows - start
        size = most if left >= most else 1 << (left.bit_length() - 1)
        yield start, size
        start += size


_ATTEMPT_COUNTER = {
    "capacity": "capacity_errors",
    "rate_limit": "rate_limit_errors",
    "server_error": "server_errors",
    "connection": "server_errors",
    "malformed": "server_errors",
    "connect_timeout": "timeouts",
    "read_timeout": "timeouts",
}
_REFUSED = {Outcome.RATE_LIMITED, Outcome.BUDGET_EXCEEDED, Outcome.CONCURRENCY_LIMITED}
# A preempted batch call gave its slot to an interactive one and runs again: no error.
_NOT_ERRORS = {Outcome.SUCCESS, Outcome.PREEMPTED}


def _rollups(batch: list[CallLog]) -> list[dict[str, Any]]:
    """The batch added up per hour, key, route and deployment: use on the deployment that served,
    errors on the deployment that failed."""
    rows: dict[tuple[datetime, str, str, str], dict[str, Any]] = {}

    def row(call: CallLog, deployment: str) -> dict[str, Any]:
        hour = call.created_at.replace(minute=0, second=0, microsecond=0)
        route = call.route
        found = rows.get((hour, call.key_prefix, route, deployment))
        if found is None:
            found = rows[(hour, call.key_prefix, route, deployment)] = {
                "hour": hour,
                "key_prefix": call.key_prefix,
                "route": route,
                "deployment": deployment,
                "member_id": call.member_id,
                "application_id": call.application_id,
                "team_id": call.team_id,
                **dict.fromkeys(ROLLUP_COUNTS, 0),
            }
            found["cost"] = Decimal(0)
        return found

    for call in batch:
        if not call.key_prefix or call.member_id is None:
            continue  # no known key: nobody's usage
        served = row(call, call.served_deployment)
        served["requests"] += 1
        served["tokens_in"] += call.tokens_in
        served["tokens_out"] += call.tokens_out
        served["cost"] += call.cost
        served["fallbacks"] += call.fell_back
        served["errors"] += call.outcome not in _NOT_ERRORS
        served["rejected"] += call.outcome in _REFUSED
        if call.attempt_count:  # latency of calls that reached an upstream
            served[latency_field(call.latency_ms)] += 1
        for attempt in call.attempts:
            counter = _ATTEMPT_COUNTER.get(attempt.error_class)
            if counter:
                row(call, attempt.deployment)[counter] += 1
    # In key order: workers upserting the same rows lock them in the same order, so two
    # batches wait for each other instead of deadlocking.
    return [rows[k] for k in sorted(rows)]


def _upsert_rollups(model: type[Model], period: str, rows: list[dict[str, Any]]) -> None:
    """Add to the counters of the row's period (`hour` or `day`) in one statement per row:
    concurrent writers from other workers add up instead of overwriting each other."""
    if not rows:
        return
    ops = connection.ops
    table = ops.quote_name(model._meta.db_table)
    columns = list(rows[0])
    added = ", ".join(
        f"{ops.quote_name(c)} = {table}.{ops.quote_name(c)} + excluded.{ops.quote_name(c)}"
        for c in ROLLUP_COUNTS
    )
    sql = (
        f"INSERT INTO {table} ({', '.join(ops.quote_name(c) for c in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))}) "
        f"ON CONFLICT ({period}, key_prefix, route, deployment) DO UPDATE SET {added}"
    )
    fields = [model._meta.get_field(name) for name in columns]
    values = _db_values(fields, (row.values() for row in rows))
    with connection.cursor() as cursor:
        cursor.executemany(sql, values)


def _insert(batch: list[CallLog]) -> None:
    with transaction.atomic():
        calls = [entry.call_row() for entry in batch]
        _insert_ignoring_duplicates(CallRecord, CALL_COLUMNS, calls)
        attempts = [row for entry in batch for row in entry.attempt_rows()]
        _insert_ignoring_duplicates(Attempt, ATTEMPT_COLUMNS, attempts)
        hourly = _rollups(batch)
        # Hours, then days, each in key order: every writer locks rows in the same order.
        _upsert_rollups(UsageRollup, "hour", hourly)
        _upsert_rollups(DailyUsageRollup, "day", daily_rows(hourly))


class Unwritten(Exception):
    """The database went away part way: these calls are still to be written."""

    def __init__(self, calls: list[CallLog]) -> None:
        super().__init__(f"{len(calls)} calls not written")
        self.calls = calls


def _write(batch: list[CallLog]) -> None:
    """Raises `Unwritten` only when the database is unreachable (those calls are then
    retried). Any other error is a bad row, whatever the driver raised (a DatabaseError, or
    a UnicodeEncodeError for a string it cannot send): the rows are then written one by one
    and only the bad one is left out, so it can never hold the others back."""
    try:
        _insert(batch)
        return
    except (OperationalError, InterfaceError):
        connection.close()  # reconnect on the next try
        raise Unwritten(batch) from None
    except Exception:
        if len(batch) == 1:
            log.exception("audit row %s rejected by the database", batch[0].request_id)
            return
    for i, entry in enumerate(batch):
        try:
            _insert([entry])
        except (OperationalError, InterfaceError):
            connection.close()
            raise Unwritten(batch[i:]) from None
        except Exception:
            log.exception("audit row %s rejected by the database", entry.request_id)


def _write_then_discard(batch: list[CallLog], segments: list[Path], spool: Spool | None) -> None:
    """On the writer's thread: the batch, then the spool files that held it, and the spool's
    file work (the sealed file closed, the next one opened ahead), none of it on the loop.
    Raises `Unwritten` (the files are kept) when the database is unreachable."""
    try:
        if batch:
            try:
                _write(batch)
            except Unwritten:
                raise
            except Exception:  # a bug in the writer itself: never retry the same batch forever
                log.exception("audit write failed; %d calls dropped", len(batch))
        Spool.discard(segments)
    finally:
        if spool is not None:
            spool.tidy()


class RefusalSampler:
    """Calls refused for a missing or unknown key, sampled: the first `per_second` each
    second are recorded, the rest only counted, and the count rides on the next one
    recorded ("+N like it not recorded"). A flood of garbage keys costs a few rows a
    second, not one each; a real client's mistake is still in the trail."""

    def __init__(self, per_second: int = 5) -> None:
        self.per_second = per_second
        self._second = 0
        self._taken = 0
        self.skipped = 0  # not recorded since the last one that was

    def keep(self, call: CallLog) -> bool:
        second = int(time.monotonic())
        if second != self._second:
            self._second, self._taken = second, 0
        if self._taken >= self.per_second:
            self.skipped += 1
            return False
        self._taken += 1
        if self.skipped:
            note = f" (+{self.skipped} like it not recorded)"
            call.error_message = call.error_message[: 500 - len(note)] + note
            self.skipped = 0
        return True


def _read_spooled(paths: list[Path]) -> list[CallLog]:
    return [decode_call(line, CallLog, AttemptLog) for path in paths for line in Spool.read(path)]


def _not_yet_written(calls: list[CallLog]) -> list[CallLog]:
    """Calls from a dead worker's spool that the database does not hold yet (it may have
    committed a batch and died before deleting its file)."""
    ids = [c.request_id for c in calls]
    present: set[str] = set()
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        present.update(
            CallRecord.objects.filter(request_id__in=chunk).values_list("request_id", flat=True)
        )
    return [c for c in calls if c.request_id not in present]


class AuditWriter:
    def __init__(self) -> None:
        self._pending: list[CallLog] = []
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sluice-audit")
        self._task: asyncio.Task[None] | None = None
        self._writing: asyncio.Future[None] | None = None  # the write under way, if any
        self.unauthenticated = RefusalSampler()
        self._spool: Spool | None = None
        self._sealed: list[Path] = []  # spool files whose calls are all pending
        self._orphans: list[Path] = []  # claimed from dead workers, not yet taken in
        # Seconds between writes; None: SLUICE_AUDIT_FLUSH_SECONDS. A batch runner writes
        # less often (batches/runner.py): its calls wait for no one's page.
        self.every: float | None = None

    def spool(self) -> Spool | None:
        if self._spool is None and settings.SLUICE_AUDIT_SPOOL_DIR:
            folder = Path(settings.SLUICE_AUDIT_SPOOL_DIR)
            self._spool = Spool(spool_folder(folder, settings.DATABASES["default"]))
        return self._spool

    def record(self, call: CallLog) -> bool:
        """Whether the call is recorded (a flood of unknown keys is sampled)."""
        if call.outcome == Outcome.UNAUTHORIZED and not self.unauthenticated.keep(call):
            return False
        if len(self._pending) >= _MAX_PENDING:
            log.error("audit backlog full (%d calls); dropping %s", _MAX_PENDING, call.request_id)
            return False
        metrics_record(call)
        self._pending.append(call)
        spool = self.spool()
        if spool is not None:
            spool.append(encode_call(call))
        self._ensure_task()
        return True

    def start(self) -> None:
        """At a worker's start: take in what dead workers of this host left in their spool
        at once, not at this worker's first call (a worker that gets none, a host back
        after a crash with its traffic gone elsewhere, would never write them)."""
        self._ensure_task()

    def _ensure_task(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run(), name="sluice-audit-writer")

    async def _run(self) -> None:
        failures = 0
        await self._take_in_orphans()
        while self._pending:
            await asyncio.sleep(
                settings.SLUICE_AUDIT_FLUSH_SECONDS if self.every is None else self.every
            )
            if not await self._flush_once():
                failures += 1
                # Back off while the database is away; the rows wait in memory.
                await asyncio.sleep(min(30.0, 0.5 * 2**failures))
            else:
                failures = 0

    async def _take_in_orphans(self) -> None:
        """The calls a dead worker of this host spooled and never wrote: pending here."""
        spool = self.spool()
        if spool is None:
            return
        # The folder scan and the file reads happen on the writer's thread, not the loop.
        loop = asyncio.get_running_loop()
        self._orphans += await loop.run_in_executor(self._executor, spool.claim_orphans)
        if not self._orphans:
            return
        calls = await loop.run_in_executor(self._executor, _read_spooled, list(self._orphans))
        try:
            missing = await loop.run_in_executor(self._executor, _not_yet_written, calls)
        except Exception as exc:  # the database is away: try again with the next batch
            log.warning("could not check %d spooled calls yet: %s", len(calls), exc)
            return
        if missing:
            log.warning("writing %d calls a stopped worker had not written", len(missing))
        self._pending[:0] = missing
        self._sealed += self._orphans
        self._orphans = []

    async def _flush_once(self) -> bool:
        batch, self._pending = self._pending, []
        segments, self._sealed = self._sealed, []
        spool = self.spool()
        sealed = spool.seal() if spool is not None else None
        if sealed is not None:
            segments.append(sealed)
        if not batch and not segments:
            return True
        try:
            self._writing = asyncio.get_running_loop().run_in_executor(
                self._executor, _write_then_discard, batch, segments, spool
            )
            await self._writing
        except Unwritten as unwritten:
            log.error("audit write failed; keeping %d calls to retry", len(unwritten.calls))
            self._pending[:0] = unwritten.calls
            self._sealed[:0] = segments
            return False
        return True

    async def flush(self) -> None:
        """Write everything recorded so far (tests, shutdown). First the write under way:
        its calls are no longer pending, and a worker that exited before it ended would
        leave them to the spool (written by the next worker to start, not by this one)."""
        writing = self._writing
        if writing is not None and writing.get_loop() is asyncio.get_running_loop():
            await asyncio.wait([writing])
            failed = not writing.cancelled() and isinstance(writing.exception(), Unwritten)
            if failed and self._leave_to_spool():
                return
        for _ in range(5):
            written = await self._flush_once()
            if written and not self._pending:
                if self._spool is not None:
                    self._spool.close()  # the file opened ahead holds nothing
                return
            if not written and self._leave_to_spool():
                return
            await asyncio.sleep(0.2)

    def _leave_to_spool(self) -> bool:
        """After a write that failed: whether the calls can be left to the spool (the next
        worker of this host writes them). Trying again would hold a stopping worker past its
        supervisor's patience: each try waits out the pool's timeout."""
        if not self._pending or self._spool is None:
            return False
        log.warning(
            "database away at shutdown: %d calls stay in the spool for the next worker of "
            "this host",
            len(self._pending),
        )
        return True

    def pending(self) -> int:
        """Calls recorded and not yet written."""
        return len(self._pending)


audit_writer = AuditWriter()
