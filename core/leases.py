"""Leases a worker holds in a shared store (deployment slots, quota concurrency), renewed while
the call runs, so a long call keeps its slot and a dead worker's slots expire."""

import asyncio
import logging
from typing import Any, Protocol

log = logging.getLogger("sluice.state")


class Leased(Protocol):
    lease: float


class Renewer(Protocol):
    async def renew(self, held: dict[str, tuple[Any, list[str]]]) -> None: ...


class LeaseKeeper:
    """Renews the leases this worker holds (deployment slots, quota concurrency), so a long
    call keeps its slot and a dead worker's slots expire. One task per worker and kind,
    every lease/3 seconds."""

    def __init__(self, state: Renewer) -> None:
        self.state = state
        self._held: dict[str, tuple[Leased, set[str]]] = {}
        self._task: asyncio.Task[None] | None = None

    def hold(self, name: str, limits: Leased, slot: str) -> None:
        self._held.setdefault(name, (limits, set()))[1].add(slot)
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run(), name="sluice-lease-keeper")

    def drop(self, name: str, slot: str) -> None:
        entry = self._held.get(name)
        if entry is not None:
            entry[1].discard(slot)
            if not entry[1]:
                del self._held[name]

    async def _run(self) -> None:
        while self._held:
            shortest = min(limits.lease for limits, _ in self._held.values())
            await asyncio.sleep(shortest / 3)
            held = {n: (limits, list(slots)) for n, (limits, slots) in self._held.items()}
            try:
                await self.state.renew(held)
            except Exception:
                log.exception("lease renewal failed; retrying next round")
