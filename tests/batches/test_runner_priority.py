"""The runner gives gateway workers on its host the CPU first: `run_batches` lowers the
priority of every thread it has (Linux keeps one per thread) before it starts work, and
the threads it starts later inherit it; started in a session of its own, it lowers the
session's share too, never a session it shares (batches/priority.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from batches.priority import session_share

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import os, threading, django
django.setup()
from batches.priority import lower_threads

started = threading.Event()
hold = threading.Event()
before = threading.Thread(target=lambda: (started.set(), hold.wait()))
before.start()
started.wait()
lower_threads({by})
after = threading.Thread(target=hold.wait)
after.start()
priorities = {{
    name: os.getpriority(os.PRIO_PROCESS, thread.native_id)
    for name, thread in (("main", threading.main_thread()), ("before", before), ("after", after))
}}
hold.set()
print(priorities["main"], priorities["before"], priorities["after"])
"""


def _run(script: str, *, own_session: bool = False) -> list[str]:
    """What `script` prints, run as a Django process of its own (in a session of its own)."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=os.environ | {"DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        check=True,
        start_new_session=own_session,
    )
    return done.stdout.split()


def _priorities(by: int) -> list[int]:
    return [int(x) for x in _run(SCRIPT.format(by=by))]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads' priorities: Linux")
def test_every_thread_of_the_runner_runs_at_a_lower_priority() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert _priorities(5) == [min(19, base + 5)] * 3


def test_nice_zero_leaves_the_priority_as_it_is() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert _priorities(0) == [base] * 3


GROUP = """
import django
django.setup()
from batches.priority import lower_threads, session_share

lower_threads(5)
print(session_share("self"))
"""


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="the kernel's autogroups")
def test_a_runner_leading_its_own_session_lowers_the_sessions_share():
    assert _run(GROUP, own_session=True) == ["5"]


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="the kernel's autogroups")
def test_a_runner_in_a_shared_session_leaves_its_share_as_it_is():
    # Ours: a group of its own (a shell's session), or none at all (a container's first one).
    ours = session_share("self")
    assert _run(GROUP) == [str(ours)]
    assert session_share("self") == ours
