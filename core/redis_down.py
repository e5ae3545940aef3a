"""One policy for every Redis backend when Redis cannot be reached (deployment state, quota
counters, the grant listener).

`open`: the worker goes on with its own in-process state for the duration (each backend
keeps a local twin for that); `closed`: the operation raises `RedisDown` and the caller
refuses the call. Either way the log says so, at most every 10 seconds while it lasts, and
once more when Redis answers again."""

import logging
import time
from collections.abc import Callable

LOG_EVERY = 10.0  # seconds between two "unreachable" lines while Redis stays down


class RedisDown(Exception):
    """Redis is unreachable and the backend's policy is `closed`."""


class RedisDownPolicy:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        open_means: str,
        closed_means: str = "refusing calls",
        fail_open: Callable[[], bool] = lambda: True,
        error: type[RedisDown] = RedisDown,
    ) -> None:
        self.log = logger
        self.open_means = open_means  # what the log says the worker does meanwhile
        self.closed_means = closed_means
        self.fail_open = fail_open  # read on each failure: settings may change
        self.error = error
        self.down = False  # the last operation failed, and none has succeeded since
        self._last_logged = float("-inf")

    def failed(self, exc: BaseException, *, refuse: bool = True) -> None:
        """Redis failed an operation: log (rate-limited), and raise when closed (`refuse`
        False: a read for a page, which never refuses over it)."""
        self.down = True
        fail_open = self.fail_open()
        now = time.monotonic()
        if now - self._last_logged >= LOG_EVERY:
            self._last_logged = now
            means = self.open_means if fail_open else self.closed_means
            self.log.error("Redis unreachable (%s): %s until it is back", exc, means)
        if refuse and not fail_open:
            raise self.error from exc

    def recovered(self) -> None:
        """An operation succeeded: say so once if Redis had been down."""
        if self.down:
            self.down = False
            self._last_logged = float("-inf")
            self.log.warning("Redis reachable again: no longer %s", self.open_means)
