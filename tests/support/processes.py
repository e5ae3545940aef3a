"""Subprocesses the end-to-end tests run (the simulator, the gateway under uvicorn): started
from the checkout on a free loopback port, ready once their URL answers."""

import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]  # the checkout: subprocesses run from it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_process(
    args: list[str], *, url: str, env: dict[str, str] | None = None, stderr: Any = None
) -> subprocess.Popen:
    """Run `args` from the checkout; return once `url` answers below 500 (killed if it does
    not within 30 s)."""
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stderr=stderr)
    try:
        wait_until(
            lambda: proc.poll() is None and httpx.get(url, timeout=1).status_code < 500, timeout=30
        )
    except AssertionError:
        proc.kill()
        raise
    return proc


def stop_process(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
