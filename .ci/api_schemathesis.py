"""Fuzz the management API against its own OpenAPI schema with schemathesis.

Starts the gateway on a free loopback port with a throwaway SQLite database (migrated, the
demo config applied, a member with a key and some limits), issues a global management
token, and runs a bounded schemathesis pass: it fails on any 5xx, any response that does
not match the schema, any undocumented status code or content type. Run by .ci/run once.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
MAX_EXAMPLES = os.environ.get("SLUICE_FUZZ_EXAMPLES", "25")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [PY, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout


def main() -> int:
    # Stopped from outside (CI's timeout): still stop the gateway in `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="sluice-fuzz-"))
    env = os.environ | {
        "DATABASE_URL": f"sqlite:///{workdir / 'fuzz.sqlite3'}",
        "SLUICE_SECRET_KEY": "fuzz-only",
        "SLUICE_API_THROTTLE": "100000/min",
        "SLUICE_REDIS_PREFIX": f"fuzz-{os.getpid()}",
    }
    env.pop("REDIS_URL", None)  # one worker, in-process state
    manage(env, "migrate", "--noinput")
    manage(env, "apply_config", "config/demo.toml")
    manage(env, "shell", "-c", _SEED)
    token = manage(env, "issue_admin_token", "--name", "schemathesis").strip().splitlines()[-1]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    uvicorn = ["-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1"]
    quiet = ["--no-access-log", "--log-level", "warning"]
    server = subprocess.Popen([PY, *uvicorn, "--port", str(port), *quiet], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    print("the gateway did not start", file=sys.stderr)
                    return 1
                time.sleep(0.2)
        command = [
            str(ROOT / ".venv" / "bin" / "schemathesis"), "run", f"{base}/api/v1/schema/",
            "--header", f"Authorization: Bearer {token}",
            # Revoking its own token would end the run early (tested in tests/api).
            "--exclude-path-regex", r"^/api/v1/tokens/\{prefix\}/revoke/$",
            "--checks", "not_a_server_error,status_code_conformance,"
            "content_type_conformance,response_schema_conformance",
            "--max-examples", MAX_EXAMPLES,
            "--phases", "examples,coverage,fuzzing",
            "--seed", "1",
            "--workers", "1",
            "--max-time", "80",
            "--request-timeout", "20",
            "--no-color",
            "--generation-database", "none",
        ]  # fmt: skip
        return subprocess.run(command, cwd=workdir).returncode
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


# Objects for the fuzzer to find: a member with a key, limits on each scope.
_SEED = """
from datetime import timedelta
from decimal import Decimal
from django.utils import timezone
from accounts.models import Team
from quotas.models import UsageRollup
from accounts.services import key_issue, member_ensure
from quotas.services import limit_set
member_ensure(email="fuzz@example.com", team=Team.objects.get(slug="demo"))
key, _ = key_issue(member_email="fuzz@example.com", application_slug="demo", name="fuzz")
limit_set(scope="member", name="fuzz@example.com", requests_per_minute=100)
limit_set(scope="team", name="demo", tokens_per_day=1000000, tokens_per_month=900)
limit_set(scope="key", name=key.prefix, max_concurrency=4, cost_per_month=Decimal("5"))
# A week of spend: the monthly budgets above carry a forecast (not only "not enough data").
noon = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
for days_ago in range(1, 8):
    UsageRollup.objects.create(hour=noon - timedelta(days=days_ago), key_prefix=key.prefix,
        deployment="fast", member_id=key.member_id, application_id=key.application_id,
        team_id=key.application.team_id, requests=1, tokens_in=100, cost=Decimal("1"))
"""

if __name__ == "__main__":
    sys.exit(main())
