"""Polling until something the tests wait for has happened (a server answers, a record is
written, a new config is served)."""

import time
from collections.abc import Callable
from typing import TypeVar

import httpx

T = TypeVar("T")


def wait_until(check: Callable[[], T | None], *, timeout: float = 10.0, every: float = 0.05) -> T:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except (httpx.HTTPError, OSError):
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(every)


def wait_until_served(base_url: str, key: str, model: str, messages: list[dict]) -> None:
    """Wait until the gateway's catalog (refreshed within SLUICE_CATALOG_CACHE_SECONDS)
    serves `model` to this key: for tests that apply config while the gateway runs."""
    wait_until(
        lambda: (
            httpx.post(
                f"{base_url}/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                json={"model": model, "messages": messages},
            ).status_code
            == 200
        )
    )
