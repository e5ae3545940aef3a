"""The runner's CPU priority, and that of the database work it causes on the same host.

A runner lowers its own priority so that gateway workers beside it get the CPU first. Its
lines also cost the PostgreSQL backends serving its connections about as much CPU as the
runner itself, and PostgreSQL starts each backend in a session of its own: where the kernel
groups the CPU by session (autogroup, on by default on desktop and many server kernels), a
backend competes with the gateway's whole session as an equal, whatever the runner's own
niceness. So where the backend runs on this host and this process may (root, or the
database's own user), each connection's backend is lowered by as much: its niceness and its
session's.
"""

import contextlib
import ipaddress
import logging
import os
import socket
import struct
from pathlib import Path
from typing import Any

from django.db.backends.signals import connection_created

log = logging.getLogger("sluice.batches")


def lower_threads(by: int) -> None:
    """Raise the niceness of every thread of this process by `by` (Linux keeps it per
    thread; threads started later inherit it from the one that starts them), and, when this
    process leads a session of its own (as a service manager starts it), the session's."""
    if not by:
        return
    tasks = Path("/proc/self/task")
    for tid in [int(t) for t in os.listdir(tasks)] if tasks.is_dir() else [0]:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            lower_task(tid, by)
    if os.getsid(0) == os.getpid():  # not a shell's session, which the gateway may share
        with contextlib.suppress(OSError):  # no autogroups in this kernel
            lower_session("self", by)


def lower_task(tid: int, by: int) -> None:
    """Raise task `tid`'s niceness by `by`, to 19 at most."""
    os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))


def lower_session(pid: int | str, by: int) -> None:
    """Set the niceness of process `pid`'s session (its autogroup) to `by`."""
    Path(f"/proc/{pid}/autogroup").write_text(f"{by}\n")


def session_share(pid: int | str) -> int | None:
    """The niceness of process `pid`'s session, or None where it has none to set: a kernel
    without autogroups, or a process in the first session, which has no group of its own
    (a container's processes started without a session of their own)."""
    try:
        words = Path(f"/proc/{pid}/autogroup").read_text().split()
    except OSError:
        return None
    return int(words[-1]) if words else None


def lower_backends(by: int) -> None:
    """From now on, lower the backend of each PostgreSQL connection this process opens."""
    if by:
        connection_created.connect(_Lower(by), weak=False, dispatch_uid="batches.priority")


class _Lower:
    def __init__(self, by: int) -> None:
        self.by = by
        self.told = False  # that a backend could not be lowered, once

    def __call__(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.vendor != "postgresql":
            return
        try:
            pid = backend_on_this_host(connection.connection)
            if pid is None:
                return
            lower_task(pid, self.by)
            lower_session(pid, self.by)
        except Exception as error:
            # Not ours to change, or no telling whose it is: the backend stays as it is, and a
            # connection never fails for it.
            if not self.told:
                self.told = True
                log.info("the database backends serving this runner keep their priority: %s", error)


def backend_on_this_host(raw: Any) -> int | None:
    """The pid of the backend serving psycopg connection `raw`, when it is a process of this
    host, checked: over a Unix socket, a child of the server process at the socket's other
    end; over loopback TCP, the process whose title names our end's port (PostgreSQL's
    process titles: "postgres: user db 127.0.0.1(54321) idle"). Else None: a remote server,
    or one in another pid namespace, whose pids are not this host's."""
    pid = raw.info.backend_pid
    with socket.socket(fileno=os.dup(raw.pgconn.socket)) as sock:
        if sock.family == socket.AF_UNIX:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            server = struct.unpack("3i", creds)[0]
            return pid if _parent(pid) == server else None
        port = sock.getsockname()[1]
        if not ipaddress.ip_address(sock.getpeername()[0]).is_loopback:
            return None
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if title.startswith(b"postgres") and f"({port})".encode() in title else None


def _parent(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return next(
        (int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), None
    )
