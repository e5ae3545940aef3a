"""Waking this worker's queued requests when Redis grants them a slot, telling its
preemptible batch calls that their slot is asked back, and hearing that cached values
changed.

A grant (made by whichever worker freed the slot) is published on one channel; each worker
subscribes once and resolves the future of its own waiter. Waiters never poll: one sweep a
second per deployment with waiters here re-runs the dispatch (slots of a dead worker whose
leases ran out) and catches a grant whose message was lost. The same connection listens
for invalidations (core/refresh.py: a key revoked, a deployment drained, a limit or the
config changed) and drops those cached values in this worker at once; every worker starts
listening with its first request. Its pings, answered in order after the messages published
before them, tell the caches up to when every change has been heard (core/refresh.py
`changes_heard`), so they need not reload on a clock while it listens.
"""

import asyncio
import contextlib
import logging
import time
from typing import Any, Protocol

import redis.asyncio as redis
from redis.exceptions import RedisError

from core.redis_down import RedisDownPolicy
from core.refresh import CATALOG, KEYS, LIMITS, changes_heard, drop_local, invalidation_channel
from routing.deployment_state.interface import Limits, granted_within

log = logging.getLogger("sluice.state")

SWEEP_SECONDS = 1.0
CLOSE_SECONDS = 2.0
SUBSCRIBE_SECONDS = 2.0
PING_SECONDS = 0.5  # well within the caches' time to live (2 s by default)


class GrantSource(Protocol):
    """What the listener needs of the Redis deployment state (which imports this module)."""

    channel: str

    def _client(self) -> redis.Redis: ...

    async def sweep(self, name: str, limits: Limits, slots: list[str]) -> list[str]: ...


class GrantListener:
    def __init__(self, state: GrantSource) -> None:
        self.state = state  # RedisDeploymentState
        self._futures: dict[str, asyncio.Future[None]] = {}
        self._waiting: dict[str, tuple[str, Limits]] = {}  # slot -> deployment name, limits
        self._preempts: dict[str, asyncio.Future[None]] = {}  # held slot -> asked back
        self._subscribed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._afresh = True  # drop every cached value at the next pong (a new subscription)
        self.policy = RedisDownPolicy(
            log, open_means="grants are found by the sweep, changes by the caches' time to live"
        )

    async def expect(self, name: str, limits: Limits, slot: str) -> None:
        """Register a waiter before it joins the queue."""
        self._futures[slot] = asyncio.get_running_loop().create_future()
        self._waiting[slot] = (name, limits)
        if not self._tasks:
            self.start()
            # The first waiter lets the subscription settle; later ones never wait for it
            # (while Redis is away, say): the sweep finds a grant that was not heard.
            await self._settle()

    async def expect_preemption(self, slot: str) -> asyncio.Future[None]:
        """Register a preemptible holder before it asks for its slot."""
        asked = self._preempts[slot] = asyncio.get_running_loop().create_future()
        if not self._tasks:  # as in `expect`: only the first waits for the subscription
            self.start()
            await self._settle()
        return asked

    async def _settle(self) -> None:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation that
        # arrives as what it waits for completes (a listener cancelled in its close loops
        # forever, and holds up a worker's shutdown).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SUBSCRIBE_SECONDS):
                await self._subscribed.wait()

    def forget_preemption(self, slot: str) -> None:
        self._preempts.pop(slot, None)

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._listen(), name="sluice-grant-listener"),
                asyncio.create_task(self._sweep(), name="sluice-grant-sweeper"),
            ]

    async def wait(self, slot: str, within: float) -> bool:
        if not await granted_within(self._futures.get(slot), within):
            return False  # still registered: `leave` forgets it
        self.forget(slot)  # granted: nothing more to hear or sweep for it
        return True

    def forget(self, slot: str) -> None:
        self._futures.pop(slot, None)
        self._waiting.pop(slot, None)

    def _wake(self, slots: list[str], futures: dict[str, asyncio.Future[None]]) -> None:
        for slot in slots:
            granted = futures.get(slot)
            if granted is not None and not granted.done():
                granted.set_result(None)

    async def _listen(self) -> None:
        while True:
            pubsub = self.state._client().pubsub(ignore_subscribe_messages=True)
            changes = invalidation_channel()
            preempts = f"{self.state.channel}:preempt"
            pinger: asyncio.Task[None] | None = None
            try:
                await pubsub.subscribe(self.state.channel, changes, preempts)
                # Changes made while nobody listened are not heard: start afresh (at the
                # first pong, once the subscription is surely in place).
                self._afresh = True
                pinger = asyncio.create_task(self._ping(pubsub), name="sluice-change-pinger")
                self._subscribed.set()
                self.policy.recovered()
                # get_message, not listen(): an async generator left by a cancelled task
                # is closed later by the loop, as a task of its own that contends with
                # this close for the connection.
                while True:
                    message = await pubsub.get_message(timeout=None)  # blocks for one
                    _stop_if_asked()
                    if message is None:
                        continue
                    if message["type"] == "pong":
                        self._ponged(message["data"])
                    if message["type"] != "message":
                        continue
                    words = message["data"].decode().split()
                    channel = message["channel"].decode()
                    if channel == changes:
                        drop_local(words)
                    elif channel == preempts:
                        self._wake(words, self._preempts)
                    else:
                        self._wake(words, self._futures)
            except (RedisError, OSError) as exc:
                _stop_if_asked()  # a cancellation redis-py answered with an error of its own
                self._subscribed.clear()
                self.policy.failed(exc)  # open: resubscribes every second meanwhile
                await asyncio.sleep(1.0)
            finally:
                changes_heard(None)
                if pinger is not None:
                    pinger.cancel()
                # Bounded: a close that hangs on a dead connection must not keep a
                # cancelled listener, and with it a worker's shutdown, waiting.
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(CLOSE_SECONDS):
                        await pubsub.aclose()

    async def _ping(self, pubsub: Any) -> None:
        """Ask Redis every PING_SECONDS to answer with the time asked (the listener's loop
        reads the answers). It stops at a failure: the listener's read fails too and starts
        afresh, and without pongs what it vouched for lapses within the time to live."""
        with contextlib.suppress(RedisError, OSError):
            while True:
                await pubsub.ping(repr(time.monotonic()))
                _stop_if_asked()
                await asyncio.sleep(PING_SECONDS)

    def _ponged(self, data: bytes) -> None:
        """Every change published before the ping was asked has been heard now."""
        try:
            asked = float(data)
        except ValueError:  # not one of ours (redis-py's own health check)
            return
        if self._afresh:  # Redis answers in order: the subscription is in place
            drop_local((KEYS, LIMITS, CATALOG))
            self._afresh = False
        changes_heard(asked)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            by_deployment: dict[str, tuple[Limits, list[str]]] = {}
            for slot, (name, limits) in list(self._waiting.items()):
                by_deployment.setdefault(name, (limits, []))[1].append(slot)
            for name, (limits, slots) in by_deployment.items():
                try:
                    self._wake(await self.state.sweep(name, limits, slots), self._futures)
                except (RedisError, OSError) as exc:
                    _stop_if_asked()
                    log.warning("queue sweep for %s failed: %s", name, exc)


def _stop_if_asked() -> None:
    """Raise CancelledError if this task was asked to stop. A cancellation that lands in
    redis-py's pub/sub calls is at times swallowed (the call returns as if answered, or
    raises a connection error): a loop around them would go on forever, and hold up the
    loop's close, a worker's shutdown with it."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


_listeners: dict[tuple[int, asyncio.AbstractEventLoop], GrantListener] = {}


def grant_listener(state: GrantSource) -> GrantListener:
    """The listener of this state backend on the running loop."""
    key = (id(state), asyncio.get_running_loop())
    listener = _listeners.get(key)
    if listener is None:
        listener = _listeners[key] = GrantListener(state)
    return listener
