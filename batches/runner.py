"""The batch runner (`manage.py run_batches`): runs batch lines through the live request path.

At every tick it reads the active batches and handles each:

    validating         check the file (batches/validation.py): in_progress, or failed
    cancelling, past   abandon the lines it runs (their upstream calls are cancelled), then,
    its expiry         once no live runner holds a line, write the files: cancelled/expired
    in_progress        outside the batch's window: start nothing (lines in flight finish);
                       inside: start as many lines as the route has spare slots
                       (batches/pacing.py) and run each as a call of class batch through
                       routing.request_path.proxy.serve (quotas, fallback policy, slot queues,
                       audit); every line done: write the files, completed

A tick comes when something happened that it must see: a batch created or cancelled
(services.batch_create and batch_cancel say so on the change channel, core/refresh.py,
which the runner hears through Redis), a batch validated, the last answers of a batch
written; and otherwise every second, for what no event tells (a window opening, an
expiry, the leases of a runner that died, a message lost, no Redis).

Between ticks, a line that ends (answered or preempted) wakes the runner to fill the room
it freed, from the batches of the last tick (at most every 20 ms, and without reading the
batches again), and so does every 20 ms while lines wait for a spare slot and calls other
than the runner's own hold or wait for the route's slots (room they free is not told to
the runner; room its own lines free is): a deployment kept full costs one spare-slot look
per wake and a claim only when there is room, and one the runner alone keeps full costs
no look between its lines' ends. A batch with nothing left to
claim is not asked again until the next tick. Claims take many lines in one transaction
(services.lines_claim, with their bodies in the same trip to a worker thread, and the
answers of the lines that ended since the last write): up to 16 lines ahead of the spare
slots, kept leased in the runner until a slot is spare, so a deployment that frees one
slot at a time costs no claim per line. Answers are written many at a time
(services.lines_finish, every 100 ms at most): a line costs no database trip of its own.

A line a limit refuses (429, or 503 when every deployment stayed full) waits for the
Retry-After and goes again: a batch waits, it does not fail for want of capacity. A line's
call is preemptible: when an interactive call waits for a deployment the line's call holds
a slot at, the deployment state asks the youngest such slots back
(routing/deployment_state/slot_policy.py, rule 5); the call cancels its upstream request, frees the
slot at once and ends as `preempted`, and the line goes back to pending, to be claimed again like
any other (first, as the lowest number). Its answer was never written, so it is in the output once.
Claimed lines are leases renewed while they run, so the lines of a runner killed with kill -9 are
taken again once its leases run out (as are answers it had not written yet). Such a line may have
reached an upstream already, so it can reach one twice; its answer is written once
(services.lines_finish is fenced by the claim), and a line is never lost.
"""

import asyncio
import contextlib
import logging
import time
import uuid
import weakref
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from accounts.authentication import Principal, principal_for_prefix
from accounts.windows import parse_windows, window_open
from batches import selectors, services
from batches.headroom import Headroom
from batches.models import Batch
from batches.pacing import others_hold, route_room
from batches.runner_db import RunnerDb
from batches.selectors import ActiveBatch
from batches.services import ClaimedLine, LineAnswer
from batches.validation import ENDPOINTS
from core import fast_json
from core.db import db_read, db_write
from core.errors import GatewayError, error_body, json_object
from core.outcomes import Outcome
from core.refresh import on_change
from routing.catalog.specs import catalog
from routing.deployment_state import listen_for_changes
from routing.observability.audit import CallLog, audit_writer, new_request_id
from routing.request_path.payloads import load_body
from routing.request_path.proxy import Inbound, serve

log = logging.getLogger("sluice.batches")
Status = Batch.Status
# Seconds between reads of the batches when no event asks for one sooner: how fast a window
# or an expiry bites (and a cancel, without Redis to tell the runner of it).
TICK = 1.0
# A line that ends (answered or preempted) frees room: fill it at once, but not more
# often than this.
REFILL = 0.02
# Lines waiting for a spare slot look again this soon (not only when one of their own ends):
# room freed by other calls (the gateway's interactive ones) is not told to the runner.
SPARE_POLL = 0.02
# Answers and released lines wait at most this long for their write (a claim between
# writes carries them too), and the audit rows of the lines' calls for theirs: a runner
# killed meanwhile loses neither (leases run the lines again; the audit spool keeps the
# rows), and a write of many lines costs what a write of a few does.
WRITE_EVERY = 0.5
AUDIT_EVERY = 1.0
PREFETCH = 16  # lines claimed at once for a route with room for fewer (see Runner._queued)
_WAIT_CODES = {"capacity_exhausted", "no_deployment", "limits_unavailable"}
_MAX_WAIT = 30.0  # a Retry-After longer than this is waited in steps (cancel stays quick)


@dataclass
class _Running:
    task: asyncio.Task[None]
    batch_id: str
    model: str
    waiting: bool = False  # refused by a limit, waiting for it to reset


@dataclass(eq=False)
class Runner:
    max_in_flight: int = 64
    headroom: Headroom = field(default_factory=lambda: Headroom(0.0))  # the host's idle CPU kept
    name: str = field(default_factory=lambda: f"runner-{uuid.uuid4().hex[:12]}")
    lines: dict[int, _Running] = field(default_factory=dict)
    preempted: int = 0  # calls that gave their slot to an interactive call (lines run again)
    _ended: asyncio.Event = field(default_factory=asyncio.Event)  # a line ended since the look
    failing: dict[str, int] = field(default_factory=dict)  # batch id: ticks it failed in a row
    tick_failures: int = 0  # ticks in a row that could not read the batches
    # What the last tick found: the batches lines may start for (in progress, window open),
    # and the models of each (fixed once validated; read once per batch).
    _open: list[ActiveBatch] = field(default_factory=list)
    _models: dict[str, list[str]] = field(default_factory=dict)
    _drained: set[tuple[str, str]] = field(default_factory=set)  # (batch, model): none to claim
    # (batch, model): the number below which this runner knows of no pending line (it
    # claimed them); lowered by a line it gives back, forgotten at each tick (lines other
    # runners gave back).
    _floor: dict[tuple[str, str], int] = field(default_factory=dict)
    _starved: bool = False  # the last look left lines waiting for a spare slot
    # Lines claimed ahead, with their bodies, waiting for a spare slot (leased like running
    # ones): a deployment that frees one slot at a time costs no claim per line.
    _queued: dict[tuple[str, str], deque[tuple[ClaimedLine, bytes]]] = field(
        default_factory=lambda: defaultdict(deque)
    )
    # Lines ended but not written yet: answers, and lines given back unrun.
    _answers: list[LineAnswer] = field(default_factory=list)
    _released: list[tuple[str, int]] = field(default_factory=list)
    _unwritten: asyncio.Event = field(default_factory=asyncio.Event)
    _poked: bool = False  # something happened that the next look must be a tick for
    _writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Frequent database work: on the runner's own connection while it runs (run()); a tick
    # called alone (tests) gives its connections back after each call.
    _db: Callable[..., Awaitable[Any]] = db_read

    async def run(self, stop: asyncio.Event) -> None:
        own = RunnerDb()
        self._db = own
        renewer = asyncio.create_task(self._renew_leases(stop))
        writer = asyncio.create_task(self._write_ended(stop))
        stopping = asyncio.create_task(stop.wait())
        stopping.add_done_callback(lambda _: self._ended.set())
        audit_every, audit_writer.every = audit_writer.every, AUDIT_EVERY
        _live.add(self)
        listen_for_changes()  # with Redis: batches created or cancelled anywhere wake it
        next_tick = 0.0
        try:
            while not stop.is_set():
                looked = time.monotonic()
                self._ended.clear()
                self._starved = False
                if looked >= next_tick or self._poked:
                    self._poked = False
                    next_tick = looked + TICK
                    await self._tick_guarded()
                else:
                    await self._fill()
                await self._pause(stop, looked, next_tick)
        finally:
            _live.discard(self)
            renewer.cancel()
            writer.cancel()
            stopping.cancel()
            audit_writer.every = audit_every
            await self._abandon(lambda b: True)
            with contextlib.suppress(Exception):
                await self.write_ended()
            self._db = db_read
            await own.close()

    async def _tick_guarded(self) -> None:
        try:
            await self.tick()
        except Exception:  # the batches could not be read: the database, say
            self.tick_failures += 1
            if self.tick_failures == 1:
                log.exception("batch runner tick failed; trying again every tick")
        else:
            if self.tick_failures:
                log.info("batch runner ticks again after %d failed", self.tick_failures)
            self.tick_failures = 0

    async def tick(self) -> None:
        batches = await self._db(selectors.active_batches)
        known = {b.id for b in batches}
        await self._abandon(lambda b: b not in known)  # finished or deleted
        self._open = []
        self._drained.clear()  # lapsed leases and released lines: claimable again
        self._floor.clear()
        now = timezone.now()
        for batch in batches:
            # Each batch alone: one that trips the runner waits for the next tick and is
            # logged once; it never keeps the runner from the batches after it.
            try:
                await self._step(batch, now)
            except Exception:
                self._failed(batch.id)
            else:
                self._recovered(batch.id)
        for gone in set(self.failing) - known:
            del self.failing[gone]
        for gone in set(self._models) - known:
            del self._models[gone]
        for key in [k for k, q in self._queued.items() if not q]:
            del self._queued[key]

    async def _step(self, batch: ActiveBatch, now: datetime) -> None:
        if batch.status == Status.VALIDATING:
            if await db_write(services.batch_validate, batch_id=batch.id, runner=self.name):
                self.poke()  # its lines may start at once
        elif batch.status != Status.IN_PROGRESS or now >= batch.expires_at:
            await self._abandon(lambda b, this=batch.id: b == this)
            await db_write(services.batch_finalize, batch_id=batch.id, runner=self.name)
        else:
            if window_open(parse_windows(batch.windows), batch.time_zone, now):
                self._open.append(batch)
                started = await self._start_lines(batch, lapsed=True)
            else:
                # Closed: start nothing; lines in flight finish, lines waiting go back.
                await self._abandon(lambda b, this=batch.id: b == this, waiting_only=True)
                started = 0
            if (
                not started
                and not self._mine(batch.id)
                and not await self._db(selectors.batch_unfinished, batch.id)
            ):
                await db_write(services.batch_finalize, batch_id=batch.id, runner=self.name)

    async def _fill(self) -> None:
        """Between ticks: start lines in the room freed, for the batches of the last tick."""
        for batch in list(self._open):
            if len(self.lines) >= self.max_in_flight:
                return
            try:
                await self._start_lines(batch, lapsed=False)
            except Exception:
                # Left to the next tick, which tries it again and logs it (once).
                self._open.remove(batch)

    def _failed(self, batch_id: str) -> None:
        """Log a batch's failure once (with its traceback), not on every tick it repeats."""
        times = self.failing.get(batch_id, 0)
        self.failing[batch_id] = times + 1
        if not times:
            log.exception("batch %s: the runner could not handle it; trying again", batch_id)

    def _recovered(self, batch_id: str) -> None:
        times = self.failing.pop(batch_id, 0)
        if times:
            log.info("batch %s: handled again after %d failed ticks", batch_id, times)

    def poke(self) -> None:
        """Make the next look a tick, now."""
        self._poked = True
        self._ended.set()

    async def _pause(self, stop: asyncio.Event, looked: float, next_tick: float) -> None:
        """Until the next look: the tick, a poke, or a line ending (its slot may be spare
        now; a whole tick of it left idle costs the batch throughput), whichever comes
        first. `stop` and `poke` set `_ended` too, so one event is waited on, with no task
        made."""
        if self._poked:
            return
        until = min(next_tick, looked + SPARE_POLL) if self._starved else next_tick
        wake = self._ended
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, until - time.monotonic())):
                await wake.wait()
        if not stop.is_set():
            await asyncio.sleep(max(0.0, looked + REFILL - time.monotonic()))

    def _mine(self, batch_id: str) -> int:
        queued = sum(len(q) for (b, _), q in self._queued.items() if b == batch_id)
        return queued + sum(1 for r in self.lines.values() if r.batch_id == batch_id)

    def _running(self, model: str) -> int:
        """This runner's lines of `model` that hold or wait for a slot (not those waiting
        out a limit's Retry-After)."""
        return sum(1 for r in self.lines.values() if r.model == model and not r.waiting)

    def _held(self) -> list[int]:
        """The lines this runner holds a lease on: running and queued."""
        return [*self.lines, *(line.id for q in self._queued.values() for line, _ in q)]

    async def _start_lines(self, batch: ActiveBatch, *, lapsed: bool) -> int:
        """Claim and start lines while the batch's routes have spare slots; how many.
        `lapsed`: also lines whose runner's lease ran out (at a tick, not at every fill)."""
        if batch.id not in self._models:
            self._models[batch.id] = await self._db(selectors.batch_models, batch.id)
        routes = await catalog.routes()
        started = 0
        for model in self._models[batch.id]:
            room = self.max_in_flight - len(self.lines)
            if room <= 0:
                break
            key = (batch.id, model)
            queue = self._queued[key]
            if not queue and key in self._drained:
                continue
            if not self.headroom.ready():  # the host's CPU is short: lines start a little later
                self._starved = True
                break
            route = routes.get(model)
            if route is None:
                spare, others = min(room, 1), True
            else:
                free = await route_room(route)
                spare, others = min(room, free.spare), others_hold(free, self._running(model))
            if spare <= 0:
                self._starved |= others
                continue
            # What may start now: the slots, and the host's CPU. A paced runner claims for
            # its pace, not for every slot it has: topping its queue up by a line or two at
            # each start cost a claim per line or two (two paced runners on one host at
            # 100 ms: 1.5 ms of CPU a line, a third of the lines of one runner).
            startable = self.headroom.allows(spare)
            if len(queue) < startable and key not in self._drained:
                # Claim ahead (up to PREFETCH), within the lines a runner may hold at once.
                held = len(self.lines) + sum(len(q) for q in self._queued.values())
                want = min(max(startable, PREFETCH) - len(queue), self.max_in_flight - held)
                if want > 0:
                    claimed = await self._claim(batch, model, want, lapsed=lapsed)
                    queue.extend(claimed)
                    if len(claimed) < want:  # none left to claim: not asked until the tick
                        self._drained.add(key)
            starting = self.headroom.take(min(spare, len(queue)))
            for _ in range(starting):
                line, raw = queue.popleft()
                task = asyncio.create_task(self._run_line(batch, line, raw))
                self.lines[line.id] = _Running(task, batch.id, model)
            started += starting
            if (queue or key not in self._drained) and (others or starting < spare):
                # More to start: soon, when others may free room, or room is left unfilled.
                self._starved = True
        return started

    async def _claim(
        self, batch: ActiveBatch, model: str, limit: int, *, lapsed: bool
    ) -> list[tuple[ClaimedLine, bytes]]:
        # The lines that ended since the last write are written in the same transaction.
        answers, released = self._take_ended()
        try:
            claimed, lost = await self._db(
                services.lines_claim_read,
                batch_id=batch.id,
                storage_name=batch.storage_name,
                model=model,
                runner=self.name,
                limit=limit,
                lapsed=lapsed,
                from_number=self._floor.get((batch.id, model), 0),
                answers=answers,
                released=[i for _, i in released],
            )
        except services.InputUnreadable as exc:  # the answers were written
            _warn_lost(answers, exc.lost)
            raise
        except BaseException:
            self._put_back(answers, released)
            raise
        _warn_lost(answers, lost)
        if claimed:  # the lowest pending ones: none is left below the last
            self._floor[(batch.id, model)] = claimed[-1][0].number + 1
        return claimed

    async def _run_line(
        self,
        batch: ActiveBatch,
        line: services.ClaimedLine,
        raw: bytes,
    ) -> None:
        """One line, as a call of class batch; a refusal by a limit waits and goes again."""
        try:
            body = _line_body(raw)
            if body is None:  # validation passed it, so the file changed since: it fails alone
                answer = new_request_id(), 400, _unreadable(line.number)
            else:
                answer = await self._call(batch, line, body)
            if answer is None:  # preempted: the line goes back to pending
                self.preempted += 1
                self._release(line)
                return
            request_id, status, content = answer
            result = _output_line(batch.id, line, request_id, status, content)
            text = fast_json.dumps(result).decode()
            self._answers.append(LineAnswer(batch.id, line.id, text, status != 200))
            self._unwritten.set()
        except asyncio.CancelledError:
            self._release(line)
            raise
        except Exception:
            log.exception("%s line %s failed in the runner", batch.id, line.number)
            self._release(line)
        finally:
            self.lines.pop(line.id, None)
            self._ended.set()

    def _release(self, line: services.ClaimedLine) -> None:
        self._released.append((line.batch_id, line.id))
        key = (line.batch_id, line.model)
        self._drained.discard(key)  # claimable again, first
        self._floor[key] = min(self._floor.get(key, 0), line.number)
        self._unwritten.set()

    async def _write_ended(self, stop: asyncio.Event) -> None:
        """Write the lines that ended, many at a time."""
        failures = 0
        while not stop.is_set():
            await self._unwritten.wait()
            await asyncio.sleep(WRITE_EVERY)  # let more lines end into the same write
            try:
                await self.write_ended()
            except Exception:
                failures += 1
                if failures == 1:
                    log.exception("writing batch lines failed; retrying")
                await asyncio.sleep(min(1.0, WRITE_EVERY * failures))
            else:
                if failures:
                    log.info("batch lines written again after %d failed writes", failures)
                failures = 0

    async def write_ended(self) -> None:
        """Write the answers and releases waiting; a failed write keeps them for the next."""
        async with self._writing:
            answers, released = self._take_ended()
            if not answers and not released:
                return
            try:
                lost = await self._db(
                    services.lines_finish,
                    runner=self.name,
                    answers=answers,
                    released=[i for _, i in released],
                )
            except BaseException:
                self._put_back(answers, released)
                raise
        _warn_lost(answers, lost)
        # A batch with nothing left here may be done: finalized at a tick now, not the
        # next one.
        if any(not self._mine(a.batch_id) for a in answers):
            self.poke()

    def _take_ended(self) -> tuple[list[LineAnswer], list[tuple[str, int]]]:
        answers, released = self._answers, self._released
        self._answers, self._released = [], []
        self._unwritten.clear()
        return answers, released

    def _put_back(self, answers: list[LineAnswer], released: list[tuple[str, int]]) -> None:
        self._answers[:0] = answers
        self._released[:0] = released
        if answers or released:
            self._unwritten.set()

    async def _call(
        self,
        batch: ActiveBatch,
        line: services.ClaimedLine,
        body: bytes,
    ) -> tuple[str, int, bytes] | None:
        """The line's answer (request id, status, body) or None when it was preempted."""
        endpoint = ENDPOINTS[batch.endpoint]
        while True:
            call = CallLog(
                request_id=new_request_id(),
                endpoint=endpoint.value,
                client_ip=None,
                batch_id=batch.id,
                custom_id=line.custom_id,
            )
            # Read again before every attempt (a worker's cache, refreshed within
            # SLUICE_KEY_CACHE_SECONDS): a key revoked or expired, or its member
            # deactivated, while the batch runs stops its next lines.
            principal = await principal_for_prefix(batch.key_prefix)
            if not _usable(principal):
                return call.request_id, 401, _key_gone(batch.key_prefix)
            response = await serve(call, _inbound(body), endpoint, principal, preemptible=True)
            if call.outcome == Outcome.PREEMPTED:
                return None
            status, content = response.status_code, response.content
            wait = _retry_wait(status, content, response.get("Retry-After"))
            if wait is None:
                return call.request_id, status, content
            self.lines[line.id].waiting = True
            await asyncio.sleep(wait)
            self.lines[line.id].waiting = False

    async def _abandon(self, batch: Callable[[str], bool], *, waiting_only: bool = False) -> None:
        """Give back the lines of the matching batches: the queued ones, and the running
        ones cancelled (only those waiting for a limit, with `waiting_only`; each gives its
        line back) and waited for. Written before this returns: a finalization next must
        see them."""
        for key, queue in self._queued.items():
            if batch(key[0]):
                self._released += [(key[0], line.id) for line, _ in queue]
                queue.clear()
                self._floor.pop(key, None)  # pending again, below it
        tasks = [
            r.task
            for r in self.lines.values()
            if batch(r.batch_id) and (r.waiting or not waiting_only)
        ]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.write_ended()

    async def _renew_leases(self, stop: asyncio.Event) -> None:
        every = settings.SLUICE_BATCH_LEASE_SECONDS / 3
        while not stop.is_set():
            await asyncio.sleep(every)
            if held := self._held():
                try:
                    await self._db(services.lines_renew, ids=held, runner=self.name)
                except Exception:
                    log.exception("renewing line leases failed; retrying")


# The runners running in this process: a batch created or cancelled pokes each.
_live: "weakref.WeakSet[Runner]" = weakref.WeakSet()


def _batches_changed(selector: str | None) -> None:
    for runner in list(_live):
        runner.poke()


on_change(services.BATCHES, _batches_changed)


def _warn_lost(answers: list[LineAnswer], lost: list[int]) -> None:
    batch_of = {a.line_id: a.batch_id for a in answers}
    for line_id in lost:
        log.warning("%s line id %s: taken by another runner", batch_of.get(line_id), line_id)


def _inbound(body: bytes) -> Inbound:
    """The line's request as the client would have sent it, in class batch."""
    return Inbound(
        headers={"content-type": "application/json", "x-sluice-priority": "batch"}, body=body
    )


def _retry_wait(status: int, content: bytes, retry_after: str | None) -> float | None:
    """Seconds to wait before sending the line again, or None when its answer stands."""
    if status == 429:
        pass  # a Sluice limit of the key, application, member or team
    elif status == 503:
        error = (json_object(content) or {}).get("error")
        if not isinstance(error, dict) or error.get("code") not in _WAIT_CODES:
            return None
    else:
        return None
    try:
        wait = float(retry_after or 1)
    except ValueError:
        wait = 1.0
    return min(max(wait, 0.1), _MAX_WAIT)


def _output_line(
    batch_id: str, line: services.ClaimedLine, request_id: str, status: int, content: bytes
) -> dict[str, Any]:
    """One line of the output (or error) file, in OpenAI's format."""
    return {
        "id": f"batch_req_{batch_id[6:]}_{line.number}",
        "custom_id": line.custom_id,
        "response": {
            "status_code": status,
            "request_id": request_id,
            "body": json_object(content) or {"raw": content.decode("utf-8", "replace")},
        },
        "error": None,
    }


def _usable(principal: Principal | None) -> bool:
    if principal is None or principal.revoked or not principal.member_active:
        return False
    return principal.expires_at is None or principal.expires_at > timezone.now()


def _line_body(raw: bytes) -> bytes | None:
    """The line's request body, or None when the line no longer reads (the live reader)."""
    try:
        body = load_body(raw).get("body")
    except GatewayError:
        return None
    return fast_json.dumps(body) if isinstance(body, dict) else None


def _unreadable(number: int) -> bytes:
    return error_body(
        f"Line {number} of the input file could not be read as a request.",
        type="invalid_request_error",
        code="invalid_request",
    )


def _key_gone(prefix: str) -> bytes:
    return error_body(
        f"The API key {prefix} that created this batch was revoked, has expired or is gone, "
        "or its member was deactivated.",
        type="authentication_error",
        code="invalid_api_key",
    )


async def run_until(
    stop: asyncio.Event, *, max_in_flight: int, cpu_headroom: float = 0.0
) -> Runner:
    runner = Runner(max_in_flight=max_in_flight, headroom=Headroom(cpu_headroom))
    log.info(
        "batch runner %s started, leaving %.0f %% of the host's CPU idle",
        runner.name,
        cpu_headroom * 100,
    )
    started = time.monotonic()
    await runner.run(stop)
    took = time.monotonic() - started
    log.info(
        "batch runner %s stopped after %.0f s (%d calls preempted by interactive calls)",
        runner.name,
        took,
        runner.preempted,
    )
    return runner
