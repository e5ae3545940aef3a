"""The upstream simulator as a subprocess, and a handle to script it (capacity, faults)."""

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from tests.support.processes import free_port, start_process, stop_process


@dataclass
class SimulatorHandle:
    url: str  # base URL without /v1

    def set_capacity(self, model: str, capacity: int) -> None:
        httpx.post(
            f"{self.url}/admin/models/{model}", json={"capacity": capacity}
        ).raise_for_status()

    def set_faults(self, model: str, faults: dict[str, float]) -> None:
        httpx.post(f"{self.url}/admin/models/{model}", json={"faults": faults}).raise_for_status()

    def stats(self, model: str) -> dict[str, Any]:
        return httpx.get(f"{self.url}/stats").json()["models"][model]


def start_simulator(*args: str) -> Iterator[SimulatorHandle]:
    """Yields a running simulator (`args` as on its command line); stops it when resumed:
    `yield from` it in a fixture."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_process(
        [sys.executable, "-m", "simulator", "--port", str(port), *args],
        url=f"{url}/stats",
    )
    yield SimulatorHandle(url)
    stop_process(proc)
