"""The runner gives gateway workers on its host the CPU first: `run_batches` lowers the
priority of every thread it has (Linux keeps one per thread) before it starts work, and
the threads it starts later inherit it (batches/management/commands/run_batches.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import os, threading, django
django.setup()
from batches.management.commands.run_batches import lower_priority

started = threading.Event()
hold = threading.Event()
before = threading.Thread(target=lambda: (started.set(), hold.wait()))
before.start()
started.wait()
lower_priority({by})
after = threading.Thread(target=hold.wait)
after.start()
priorities = {{
    name: os.getpriority(os.PRIO_PROCESS, thread.native_id)
    for name, thread in (("main", threading.main_thread()), ("before", before), ("after", after))
}}
hold.set()
print(priorities["main"], priorities["before"], priorities["after"])
"""


def _priorities(by: int) -> list[int]:
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(by=by)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return [int(x) for x in done.stdout.split()]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads' priorities: Linux")
def test_every_thread_of_the_runner_runs_at_a_lower_priority() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert _priorities(5) == [min(19, base + 5)] * 3


def test_nice_zero_leaves_the_priority_as_it_is() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert _priorities(0) == [base] * 3
