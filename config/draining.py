"""A worker that is told to stop (SIGTERM, SIGINT) drains instead of dropping its calls.

uvicorn's own graceful shutdown closes the listening socket, closes idle keep-alive
connections and waits for the requests in flight, then runs the lifespan shutdown (which
writes the audit rows still in memory). What it lacks, this adds: the worker says it is
draining the moment the signal arrives (readiness answers 503), and the wait has a bound:
calls still running `SLUICE_DRAIN_SECONDS` after the signal are cut (one not yet answering
gets 503 `worker_draining` with Retry-After; their audit rows are written as for a client
that left), so the process exits within that bound whatever uvicorn's
`--timeout-graceful-shutdown` says.
"""

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from django.conf import settings

log = logging.getLogger("sluice.drain")

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class WorkerDrain:
    def __init__(self) -> None:
        self.since: float | None = None  # monotonic time the drain began
        self._calls: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def draining(self) -> bool:
        return self.since is not None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Chain onto the server's own handlers (uvicorn's, which start its graceful
        shutdown): ours marks the worker draining first. uvicorn restores its originals
        when it stops, which drops ours with them."""
        self._loop = loop
        for sig in _SIGNALS:
            previous = signal.getsignal(sig)
            if not callable(previous) or getattr(previous, "_sluice_drain", False):
                continue  # no Python handler to chain onto (not uvicorn), or already ours

            def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
                self.begin()
                previous(signum, frame)

            handler._sluice_drain = True  # type: ignore[attr-defined]
            with contextlib.suppress(ValueError):  # not the main thread: nothing to chain
                signal.signal(sig, handler)

    def begin(self) -> None:
        """Start draining (once): from here readiness fails and the bound runs."""
        if self.since is not None:
            return
        self.since = time.monotonic()
        seconds = settings.SLUICE_DRAIN_SECONDS
        log.warning("draining: %d calls in flight, cut after %g s", len(self._calls), seconds)
        if self._loop is not None:
            # Signal handlers run between bytecodes of the loop's thread: schedule, never
            # touch the loop's timers from here directly.
            self._loop.call_soon_threadsafe(self._loop.call_later, seconds, self.cut)

    def cut(self) -> None:
        """Cancel the calls still running: the bound has passed."""
        if self._calls:
            log.warning("drain bound passed: cutting %d calls", len(self._calls))
        for task in list(self._calls):
            task.cancel("drain bound passed")

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Around a call served by this worker, so the bound can end it."""
        task = asyncio.current_task()
        if task is None:
            yield
            return
        self._calls.add(task)
        try:
            yield
        finally:
            self._calls.discard(task)

    def in_flight(self) -> int:
        return len(self._calls)


worker_drain = WorkerDrain()
