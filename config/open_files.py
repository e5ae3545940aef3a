"""Raise this process's limit of open files to what the host allows.

Every open stream holds two sockets in the worker (the client's and the upstream's), so a
worker holding 10,000 streams needs more than 20,000 descriptors. Many hosts start a process
with a soft limit of 1,024 and a hard limit far higher: Python, unlike Go or nginx, keeps the
soft one, and past it uvicorn accepts no connection and aiohttp opens none. Raising the soft
limit to the hard one needs no privilege; the hard one is the host's to set
(docs/operations.md, "Many open streams").
"""

import resource


def raise_open_files_limit() -> tuple[int, int]:
    """Set the soft RLIMIT_NOFILE to the hard one; the (soft, hard) limits in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft, hard
