"""Walking a route's chain under its retry policy (error classes: routing/request_path/classify.py).

For each eligible deployment, in order: skip it while it is drained, or when its breaker,
concurrency limit or retry budget says no; otherwise send the request and act on the
class of the answer:

    success                      done
    bad request                  back to the client as it is, no retry
    context too long             from now on only deployments with a larger window
    auth / config                deployment marked misconfigured, next one, never retried
    capacity                     next deployment
    rate limit                   wait Retry-After on the same deployment when short, else next
    server error, timeout,       retry the same deployment once after a jittered backoff,
    reset, malformed body        then next

When the chain is exhausted by capacity, rate limits or server errors, wait (backoff, or the
upstream's Retry-After) and walk it again, as long as attempts and the deadline allow. When
no slot is free anywhere, queue for one at each full deployment in turn, up to the class's
wait limit there (routing/deployment_state/slot_policy.py decides who is served first). Nothing
outlives the call's deadline. A preemptible call (a batch runner's line) whose slot is asked back
for an interactive call cancels its upstream request, frees the slot and ends as `preempted`
(503): the runner runs the line again later.
"""

import asyncio
import itertools
import logging
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings

from accounts.models import Fallback
from core.background import spawn
from core.db import db_write
from core.errors import GatewayError, capacity_exhausted, json_object, openai_error
from core.leases import LeaseKeeper
from core.outcomes import Outcome
from quotas.reservation import park
from routing.catalog.services import deployment_mark_misconfigured
from routing.catalog.specs import DeploymentSpec, RouteSpec
from routing.deployment_state import (
    Admission,
    DeploymentState,
    Refusal,
    Result,
    deployment_state,
)
from routing.deployment_state.slot_policy import BATCH, Claim, weighted_tokens
from routing.observability.audit import AttemptLog, CallLog
from routing.request_path.attempt_result import attempt_result
from routing.request_path.classify import (
    CAPACITY_LIKE,
    ErrorClass,
    classify_status,
    retry_after_seconds,
)
from routing.request_path.payloads import ClientRequest, upstream_body
from routing.request_path.policy import backoff, eligible_chain, retry_wait
from routing.request_path.relay import OpenStream, first_event, usage_tokens
from routing.request_path.upstream import (
    UpstreamError,
    open_response,
    passed_back,
    transport_error_class,
)

log = logging.getLogger("sluice.proxy")

SAME_DEPLOYMENT_RETRIES = 1
_TRANSIENT = frozenset(
    {
        ErrorClass.SERVER_ERROR,
        ErrorClass.CONNECT_TIMEOUT,
        ErrorClass.READ_TIMEOUT,
        ErrorClass.CONNECTION,
        ErrorClass.MALFORMED,
    }
)
_WORTH_ANOTHER_PASS = CAPACITY_LIKE | _TRANSIENT
_TIMEOUTS = frozenset({ErrorClass.CONNECT_TIMEOUT, ErrorClass.READ_TIMEOUT})
_lease_keeper: LeaseKeeper | None = None


@dataclass
class Answer:
    """A complete upstream answer to hand back as it is."""

    deployment: DeploymentSpec
    status: int
    body: bytes
    payload: dict | None  # the parsed body of a success
    headers: dict[str, str] = field(default_factory=dict)  # passed back (x-request-id, …)


class Preempted:
    """The attempt gave its slot back to an interactive call (slot_policy rule 5)."""


PREEMPTED = Preempted()


def preempted_error(deployment: DeploymentSpec) -> GatewayError:
    return GatewayError(
        503,
        f"This batch call gave its slot at {deployment.name} to an interactive call; "
        "it runs again later.",
        type="server_error",
        code="preempted",
        outcome=Outcome.PREEMPTED,
        headers={"Retry-After": "1"},
    )


@dataclass
class Failure:
    error_class: ErrorClass
    status: int | None
    content: bytes
    retry_after: float | None
    congested: bool = False  # a capacity error put down to Sluice's own concurrency
    cut: bool = False  # the call's own deadline ended the wait for the answer


def _cut(failure: Failure | Answer, deadline: asyncio.Timeout) -> Failure | Answer:
    """Mark a failure that the call's own deadline caused (the timeout context expired)."""
    if isinstance(failure, Failure) and deadline.expired():
        failure.cut = True
    return failure


def usage_service(payload: dict | None) -> float | None:
    """The weighted tokens an answer's `usage` reports (None when it reports none)."""
    tokens = usage_tokens((payload or {}).get("usage"))
    return None if tokens is None else weighted_tokens(*tokens)


async def _abandon(state: DeploymentState, deployment: DeploymentSpec, slot: str) -> None:
    """A queued call whose client left: out of the queue, or its slot back if it had one."""
    departure = await state.leave(deployment.name, deployment.limits, slot)
    if departure.granted:
        await state.release(deployment.name, deployment.limits, slot, Result.NEUTRAL, service=0)


def lease_keeper() -> LeaseKeeper:
    global _lease_keeper
    if _lease_keeper is None:
        _lease_keeper = LeaseKeeper(deployment_state())
    return _lease_keeper


@dataclass
class WalkLedger:
    """What one call's walk has met so far: its next step and, once it gives up, its answer
    are decided from this."""

    # Attempts made
    sent: Counter[str] = field(default_factory=Counter)  # attempts sent, per deployment
    absorbed: int = 0  # attempts that met own congestion: not counted to max_attempts
    skips: Counter[str] = field(default_factory=Counter)  # deployments passed by, per reason
    # What they met
    errors: list[ErrorClass] = field(default_factory=list)  # the class of each failure
    breakers: list[str] = field(default_factory=list)  # why each breaker that said no opened
    congested: set[str] = field(default_factory=set)  # last attempt there met own congestion
    counted: set[str] = field(default_factory=set)  # a failure there counted to its breaker
    # The answer to give if no larger deployment takes the call
    context_refusal: Answer | None = None
    # Retry-After candidates for the client, when the walk gives up
    upstream_waits: list[float] = field(default_factory=list)  # busy upstreams' hints
    breaker_waits: list[float] = field(default_factory=list)  # until a breaker half-opens
    queue_waits: list[float] = field(default_factory=list)  # queues' expected waits

    def shortest_wait(self) -> float | None:
        """The soonest any of the candidates says a call may get through."""
        waits = self.upstream_waits + self.breaker_waits + self.queue_waits
        return min(waits) if waits else None


# One generator for every walk's backoff jitter: a new Random per call seeds itself from
# os.urandom, a system call and a few microseconds on every call.
_JITTER = random.Random()


@dataclass
class ChainWalk:
    call: CallLog
    route: RouteSpec
    request: ClientRequest
    fallback: Fallback
    deadline: float  # time.monotonic()
    claim: Claim
    rng: random.Random = field(default_factory=lambda: _JITTER)  # a seeded one in tests
    ledger: WalkLedger = field(default_factory=WalkLedger)

    async def run(self) -> Answer | OpenStream:
        chain = eligible_chain(self.route, self.fallback)
        delay: float | None = None
        reason = ""
        for pass_number in itertools.count():
            pass_failures: list[Failure] = []
            full: list[DeploymentSpec] = []
            # First wherever a slot is free now; then, if every one was full, in the queue
            # of each full deployment in turn.
            for deployment, queue in itertools.chain(
                ((d, False) for d in chain), ((d, True) for d in full)
            ):
                if self._too_small(deployment) or (queue and not self.claim.wait):
                    continue
                while True:
                    if self._spent():
                        return self._give_up()
                    ended = await self._try_deployment(deployment, delay, reason, queue=queue)
                    delay, reason = None, ""
                    if isinstance(ended, Answer | OpenStream):
                        return ended
                    if isinstance(ended, Preempted):
                        raise preempted_error(deployment)
                    if isinstance(ended, Refusal):
                        if ended is Refusal.CONCURRENCY and not queue:
                            full.append(deployment)
                        break
                    if ended is None:  # drained
                        break
                    pass_failures.append(ended)
                    if ended.congested:
                        # Sluice sent more than the deployment takes: the limit was cut;
                        # the call waits for a slot at the lower limit instead of failing.
                        self.ledger.absorbed += 1
                        if queue:
                            continue
                        if deployment not in full:
                            full.append(deployment)
                        break
                    same = self._retry_same(deployment, ended)
                    if same is None:
                        break
                    delay, reason = same
                    await asyncio.sleep(delay)
            wait = self._next_pass_wait(pass_number, pass_failures)
            if wait is None:
                return self._give_up()
            delay, reason = wait
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    # --- one attempt -------------------------------------------------------------------

    async def _try_deployment(
        self, deployment: DeploymentSpec, delay: float | None, reason: str, *, queue: bool
    ) -> Answer | OpenStream | Failure | Refusal | Preempted | None:
        """One try at a deployment, from its drain check to the end: answer, open stream or
        failure; the refusal that skipped the deployment (also after queueing in vain);
        PREEMPTED when its slot was asked back; or None when it is drained. A preemptible
        call listens for its slot being asked back around `_admit_and_send`."""
        number = len(self.call.attempts) + 1
        if deployment.drained(time.time()):
            self._skip(deployment, number, "drain")
            return None
        slot = f"{self.call.request_id}:{number}"
        state = deployment_state()
        if not self.claim.preemptible:
            return await self._admit_and_send(
                deployment, state, number, slot, delay, reason, queue, None
            )
        # Listening before asking: a slot asked back at once is not missed.
        asked = await state.watch_preemption(deployment.name, slot)
        try:
            return await self._admit_and_send(
                deployment, state, number, slot, delay, reason, queue, asked
            )
        finally:
            state.forget_preemption(slot)

    async def _admit_and_send(
        self,
        deployment: DeploymentSpec,
        state: DeploymentState,
        number: int,
        slot: str,
        delay: float | None,
        reason: str,
        queue: bool,
        asked: asyncio.Future[None] | None,
    ) -> Answer | OpenStream | Failure | Refusal | Preempted:
        """A slot at the deployment (now, or after queueing for it), then the request sent
        and the slot released with the attempt's Result; or the refusal of a slot."""
        ledger = self.ledger
        # A call queueing again after its own congestion is no retry for the budget.
        retry = deployment.name in ledger.sent and deployment.name not in ledger.congested
        # The answer is due by then: the backend grants a slot only while what is left
        # covers the deployment's recent latency (slot_policy rule 6).
        due = self._attempt_deadline(deployment)
        admission = await state.acquire_slot(
            deployment.name,
            deployment.limits,
            slot,
            retry=retry,
            claim=self.claim,
            wait_until=time.time() + min(self.claim.wait, self._remaining()) if queue else None,
            deadline=time.time() + (due - time.monotonic()),
        )
        admitted, refusal = admission.admitted, admission.refusal
        if admission.queued:
            admitted = await self._queue(state, deployment, slot, admission)
        if not admitted:
            refusal = refusal or Refusal.CONCURRENCY
            self._skip(deployment, number, refusal.value)
            if refusal is Refusal.BREAKER:
                ledger.breakers.append(admission.reason)
                if admission.retry_in:
                    ledger.breaker_waits.append(admission.retry_in)
            elif refusal is Refusal.DEADLINE:
                ledger.queue_waits.append(admission.retry_in)
            elif not self.claim.wait:  # full, and this call never queues
                ledger.queue_waits.append(settings.SLUICE_CAPACITY_RETRY_AFTER)
            return refusal
        keeper = lease_keeper()
        keeper.hold(deployment.name, deployment.limits, slot)
        repeat = deployment.name in ledger.counted  # the breaker counts a call once
        took: float | None = None  # seconds to the answer's head, or until the deadline cut

        async def release(result: Result, service: float | None) -> bool:
            keeper.drop(deployment.name, slot)
            return await state.release(
                deployment.name,
                deployment.limits,
                slot,
                result,
                service=service,
                repeat=repeat,
                took=took,
            )

        attempt = AttemptLog(
            number=number,
            deployment=deployment.name,
            started_at=datetime.now(UTC),
            retry_delay_ms=None if delay is None else delay * 1000,
            retry_reason=reason,
        )
        self.call.attempts.append(attempt)
        self.call.retries += deployment.name in ledger.sent
        ledger.sent[deployment.name] += 1
        ended: Answer | OpenStream | Failure | Preempted
        sent = time.perf_counter()
        try:
            if asked is None:
                ended = await self._send(deployment, attempt, due)
            else:
                ended = await self._send_unless_asked_back(deployment, attempt, asked, due)
            took = time.perf_counter() - sent
        except asyncio.CancelledError:
            spawn(release(Result.NEUTRAL, 0.0))  # the client left; not the deployment's fault
            raise
        if isinstance(ended, Preempted):
            # Its upstream request is cancelled already: the slot goes to the interactive call.
            await release(Result.NEUTRAL, 0.0)
            return ended
        if isinstance(ended, OpenStream):
            ended.release = release  # held until the stream ends
        elif isinstance(ended, Failure):
            # Cut by the call's own deadline: the deployment's fault only if it hung.
            result = attempt_result(ended.error_class, cut=ended.cut)
            congested = await release(result, 0.0)
            if not congested and result not in (Result.NEUTRAL, Result.DEADLINE):
                ledger.counted.add(deployment.name)
            # Only "at capacity" queues again; an upstream rate limit keeps its own rules.
            ended.congested = congested and ended.error_class is ErrorClass.CAPACITY
            if ended.congested:
                ledger.congested.add(deployment.name)
            else:
                ledger.congested.discard(deployment.name)
        else:
            await release(Result.SUCCESS, usage_service(ended.payload))
        return ended

    async def _send_unless_asked_back(
        self,
        deployment: DeploymentSpec,
        attempt: AttemptLog,
        asked: asyncio.Future[None],
        due: float,
    ) -> Answer | OpenStream | Failure | Preempted:
        """`_send`, cancelled when the slot is asked back before the answer is in."""
        started = time.perf_counter()
        send = asyncio.ensure_future(self._send(deployment, attempt, due))
        try:
            await asyncio.wait((send, asked), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            send.cancel()
            raise
        if send.done():  # the answer came first (or with the request): it stands
            return send.result()
        send.cancel()
        await asyncio.wait((send,))  # the cancel done: the upstream connection is closed
        if send.cancelled():
            attempt.duration_ms = (time.perf_counter() - started) * 1000
            attempt.outcome = Outcome.PREEMPTED
            return PREEMPTED
        return send.result()  # it finished while being cancelled

    async def _queue(
        self, state: DeploymentState, deployment: DeploymentSpec, slot: str, admission: Admission
    ) -> bool:
        """Wait in the deployment's queue; whether the slot came. A client that leaves
        takes its place in the queue with it, at once."""
        started = time.monotonic()
        if self.call.queue_position is None:
            self.call.queue_position = admission.position
        name, limits = deployment.name, deployment.limits
        parks = self.claim.priority == BATCH
        if parks:
            await park(self.call.quota, parked=True)
        # No grant comes after the queue's `until` (its deadline, less the latency).
        within = min(self.claim.wait, self._remaining(), admission.until - time.time())
        try:
            if await state.wait(name, slot, max(0.0, within)):
                return True
            departure = await state.leave(name, limits, slot)
            if not departure.granted:
                self.ledger.queue_waits.append(departure.retry_in)
            return departure.granted
        except asyncio.CancelledError:
            spawn(_abandon(state, deployment, slot))
            raise
        finally:
            if parks:
                spawn(park(self.call.quota, parked=False))
            self.call.queue_ms = (self.call.queue_ms or 0.0) + (time.monotonic() - started) * 1000

    def _attempt_deadline(self, deployment: DeploymentSpec) -> float:
        """When this attempt must have its answer (monotonic): the call's deadline, shared
        with the deployments still after it in the chain, so one that hangs leaves them
        room (a 60 s call on a chain of three gives the first 20 s, not all 60)."""
        remaining = self._remaining()
        chain = eligible_chain(self.route, self.fallback)
        names = [d.name for d in chain]
        later = 0
        if deployment.name in names:
            after = chain[names.index(deployment.name) + 1 :]
            later = sum(1 for d in after if not self._too_small(d))
        return time.monotonic() + remaining / (later + 1)

    async def _send(
        self, deployment: DeploymentSpec, attempt: AttemptLog, due: float
    ) -> Answer | OpenStream | Failure:
        """One request upstream; its answer's head is due by `due` (monotonic)."""
        started = time.perf_counter()
        body = upstream_body(self.request, deployment.model)
        trace = self.call.trace
        streamed = self.request.stream
        loop_deadline = asyncio.get_running_loop().time() + (due - time.monotonic())
        # The attempt's deadline bounds the wait for the answer's head and then for a
        # stream's first event or a whole answer's body (one timer for both: each costs a
        # call several microseconds); a stream's body is then bounded by the upstream's
        # read timeout between chunks instead. When it is that deadline that ends the wait
        # (not the upstream's own timeouts), the failure is marked `cut`.
        deadline = asyncio.timeout_at(loop_deadline)
        response = None
        first: bytes | None = None
        content = b""
        error_class: ErrorClass | None = None
        try:
            async with deadline:
                response = await open_response(
                    deployment,
                    self.request.endpoint.value,
                    body,
                    self.request.account_headers,
                    None if trace is None else trace.upstream_headers(attempt, deployment),
                    whole=not streamed,
                )
                attempt.status_code = response.status
                streamed = streamed and response.status == 200
                if streamed:
                    first = await first_event(response)
                else:
                    content = await response.read()
        except UpstreamError as exc:  # aiohttp errors and timeouts, ours included
            if response is None or streamed:
                if response is not None:
                    response.close()
                failure = self._failed(deployment, attempt, started, transport_error_class(exc))
                return _cut(failure, deadline)
            error_class = transport_error_class(exc)
        finally:
            if response is not None and not streamed:
                response.release()
        if streamed:
            if first is None:  # not an event stream of JSON: like a malformed body
                response.close()
                return self._failed(deployment, attempt, started, ErrorClass.MALFORMED, 200)
            return OpenStream(deployment, response, attempt, started, first=first)
        if error_class is None:
            error_class = classify_status(response.status, content)
        payload = None
        if error_class is None:
            payload = json_object(content)
            if payload is None:
                error_class = ErrorClass.MALFORMED
        if error_class is not None:
            hint = retry_after_seconds(response.headers) if error_class in CAPACITY_LIKE else None
            failure = self._failed(
                deployment, attempt, started, error_class, response.status, content, hint
            )
            return _cut(failure, deadline)
        attempt.duration_ms = (time.perf_counter() - started) * 1000
        self.call.ttfb_ms = self.call.elapsed_ms()
        return Answer(deployment, 200, content, payload, passed_back(response.headers))

    def _failed(
        self,
        deployment: DeploymentSpec,
        attempt: AttemptLog,
        started: float,
        error_class: ErrorClass,
        status: int | None = None,
        content: bytes = b"",
        retry_after: float | None = None,
    ) -> Failure | Answer:
        attempt.duration_ms = (time.perf_counter() - started) * 1000
        attempt.error_class = error_class.value
        ledger = self.ledger
        ledger.errors.append(error_class)
        if retry_after is not None:
            ledger.upstream_waits.append(retry_after)
        elif error_class in CAPACITY_LIKE:
            # Busy, with no word on when: the configured wait, so that another deployment's
            # open breaker (minutes) does not set the client's Retry-After.
            ledger.upstream_waits.append(settings.SLUICE_CAPACITY_RETRY_AFTER)
        if error_class is ErrorClass.BAD_REQUEST:
            return Answer(deployment, status or 400, openai_error(content), None)
        if error_class is ErrorClass.CONTEXT_LENGTH:
            ledger.context_refusal = Answer(deployment, status or 400, openai_error(content), None)
        elif error_class is ErrorClass.AUTH_CONFIG:
            message = f"upstream {deployment.upstream.name} answered {status} (auth/config)"
            log.error("deployment %s looks misconfigured: %s", deployment.name, message)
            spawn(db_write(deployment_mark_misconfigured, name=deployment.name, message=message))
        elif error_class in _TRANSIENT:
            log.warning("%s: %s from %s", self.call.request_id, error_class, deployment.name)
        return Failure(error_class, status, content, retry_after)

    def _skip(self, deployment: DeploymentSpec, number: int, why: str) -> None:
        self.ledger.skips[why] += 1
        if any(a.deployment == deployment.name and a.skipped == why for a in self.call.attempts):
            return  # a call waiting for a slot passes by many times: one row says it
        self.call.attempts.append(
            AttemptLog(
                number=number,
                deployment=deployment.name,
                started_at=datetime.now(UTC),
                skipped=why,
            )
        )

    # --- what next ---------------------------------------------------------------------

    def _remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _counted_attempts(self) -> int:
        """Attempts that count to `max_attempts`: not those that met own congestion, up to
        as many again (so one call makes at most twice `max_attempts` upstream attempts,
        however full the chain)."""
        absorbed = min(self.ledger.absorbed, self.route.policy.max_attempts)
        return self.call.attempt_count - absorbed

    def _spent(self) -> bool:
        return self._counted_attempts() >= self.route.policy.max_attempts or self._remaining() <= 0

    def _too_small(self, deployment: DeploymentSpec) -> bool:
        refused = self.ledger.context_refusal
        return (
            refused is not None and deployment.context_window <= refused.deployment.context_window
        )

    def _fits(self, wait: float) -> bool:
        return wait < self._remaining()

    def _retry_same(self, deployment: DeploymentSpec, failure: Failure) -> tuple[float, str] | None:
        """Try the same deployment again (once), after a short Retry-After or a backoff."""
        policy = self.route.policy
        tries = self.ledger.sent[deployment.name]
        if tries > SAME_DEPLOYMENT_RETRIES:
            return None
        if failure.error_class is ErrorClass.RATE_LIMIT:
            after = failure.retry_after
            if after is not None and after <= policy.retry_after_cap and self._fits(after):
                return after, "retry_after"
        elif failure.error_class in _TRANSIENT:
            wait = backoff(tries - 1, policy, self.rng)
            if self._fits(wait):
                return wait, "backoff"
        return None

    def _next_pass_wait(
        self, pass_number: int, failures: list[Failure]
    ) -> tuple[float, str] | None:
        """Walk the chain again after a pass that failed for reasons time may cure; not
        after one refused by breakers, drains, budgets or full queues."""
        if self._counted_attempts() >= self.route.policy.max_attempts:
            return None
        if not any(f.error_class in _WORTH_ANOTHER_PASS for f in failures):
            return None
        hints = [f.retry_after for f in failures if f.retry_after is not None]
        wait = retry_wait(pass_number, min(hints) if hints else None, self.route.policy, self.rng)
        return wait if self._fits(wait[0]) else None

    def _give_up(self) -> Answer:
        if self.ledger.context_refusal is not None:
            return self.ledger.context_refusal
        raise self._exhausted()

    def _exhausted(self) -> GatewayError:
        """The answer follows what the upstreams did in this call: 503 only for capacity and
        rate limits (also a queue that never gave a slot, or a breaker opened by them);
        504 when every attempt timed out; 502 for server errors, resets and garbage, also
        when a retry budget or a breaker these errors opened skipped what was left."""
        name = self.route.name
        ledger = self.ledger
        seen = set(ledger.errors)
        capacity_breaker = any(r in (Result.CAPACITY.value, "") for r in ledger.breakers)
        failure_breaker = any(r and r != Result.CAPACITY.value for r in ledger.breakers)
        if (
            seen & CAPACITY_LIKE
            or ledger.skips[Refusal.CONCURRENCY.value]
            or ledger.skips[Refusal.DEADLINE.value]
            or (not seen and capacity_breaker)
        ):
            shortest = ledger.shortest_wait()
            wait = settings.SLUICE_CAPACITY_RETRY_AFTER if shortest is None else shortest
            limited = seen & CAPACITY_LIKE == {ErrorClass.RATE_LIMIT}
            return capacity_exhausted(max(1, math.ceil(wait)), name, rate_limited=limited)
        if seen and seen <= _TIMEOUTS:
            return GatewayError(
                504,
                f"Every deployment for `{name}` timed out.",
                type="server_error",
                code="upstream_timeout",
                outcome=Outcome.UPSTREAM_TIMEOUT,
            )
        if seen or failure_breaker:
            classes = ", ".join(sorted(f.value for f in seen)) or "circuit breaker open"
            if not seen:
                classes += " after upstream errors"
            headers = {}
            if ledger.breaker_waits:
                headers["Retry-After"] = str(max(1, math.ceil(min(ledger.breaker_waits))))
            return GatewayError(
                502,
                f"Every deployment for `{name}` failed ({classes}).",
                type="server_error",
                code="upstream_error",
                outcome=Outcome.UPSTREAM_ERROR,
                headers=headers,
            )
        why = "drained" if ledger.skips["drain"] else "disabled"
        return GatewayError(
            503,
            f"No deployment for `{name}` can take calls now (all {why}).",
            type="server_error",
            code="no_deployment",
            outcome=Outcome.CAPACITY_EXHAUSTED,
            headers={"Retry-After": str(settings.SLUICE_CAPACITY_RETRY_AFTER)},
        )
