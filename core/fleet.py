"""This worker among the fleet's: a name the others can count it by in Redis, and how long
a worker not heard from still counts (its share of a limit while Redis is away)."""

import os
import socket
import uuid

LIVE_WITHIN = 60.0  # seconds: a worker heard from this recently counts as live


def worker_name() -> str:
    """Unique per process and start: host, pid and a random part (a pid is reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
