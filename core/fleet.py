"""This worker among the fleet's: a name the others can count it by in Redis, how long a
worker not heard from still counts (its share of a limit while Redis is away), and whether
a worker named so is one of this host's that has ended (what it held can be taken back at
once, without waiting for its leases to run out).

A name is `host:pid:started:random`. The host is the host name, this boot of its kernel
and its process namespace (two machines given one name, or two containers sharing the
machine's name, stay apart; a reboot, or a container started again, is a new host whose
predecessor's workers are left to their leases); `started` is when the process started,
in clock ticks since boot (a pid used again is a new process). These are Linux's (/proc);
where they cannot be read, a name says less and is judged only when its pid is not
running."""

import os
import socket
import uuid
from functools import cache
from pathlib import Path

LIVE_WITHIN = 60.0  # seconds: a worker heard from this recently counts as live


@cache
def this_host() -> str:
    """The host name, this boot of the kernel and the process namespace: whose pids a
    worker can look up (containers of one machine may share its name, not its pids)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
        pids = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").rstrip("]")
    except OSError:
        boot = pids = ""
    return f"{socket.gethostname()}/{boot}/{pids}"


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat from its third field on (the second, the command, may hold spaces
    and parentheses), or [] if it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat.rsplit(")", 1)[-1].split()


def started(pid: int) -> str:
    """When process `pid` started (clock ticks since boot), or "" if it cannot be read."""
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else ""


def worker_name(pid: int | None = None) -> str:
    """This process's name (or process `pid`'s, on this host): unique per process and
    start, with a random part besides."""
    pid = os.getpid() if pid is None else pid
    return f"{this_host()}:{pid}:{started(pid)}:{uuid.uuid4().hex[:8]}"


def gone(name: str) -> bool:
    """Whether `name` is a worker of this host whose process has ended. False when it is
    another host's, when it cannot be told (a name of another shape), or when its process
    still runs (a pid used again by a process started at another time has ended)."""
    parts = name.split(":")
    if len(parts) != 4 or parts[0] != this_host() or not parts[1].isdigit():
        return False
    pid, when = int(parts[1]), parts[2]
    if pid == os.getpid():
        return when != started(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # runs, as another user
    fields = _stat(pid)
    if fields[:1] == ["Z"]:
        return True  # ended, not yet reaped by its parent
    now = fields[19] if len(fields) > 19 else ""
    return bool(when and now and when != now)
