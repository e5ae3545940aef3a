"""The gateway raises its soft limit of open files to the hard one as it starts: each open
stream holds two sockets."""

import resource
import subprocess
import sys
from pathlib import Path

from config.open_files import raise_open_files_limit

ROOT = Path(__file__).resolve().parent.parent


def _lowered() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        _lowered()
        soft, hard = raise_open_files_limit()
        assert soft == hard == before[1]
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_the_asgi_application_raises_it_on_import() -> None:
    code = "import resource, config.asgi; print(*resource.getrlimit(resource.RLIMIT_NOFILE))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        preexec_fn=_lowered,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert out == [str(hard), str(hard)]
