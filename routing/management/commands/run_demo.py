"""`make run`: a working gateway on a fresh machine, in one command.

Migrates, applies config/demo.toml, makes sure there is an admin and a demo key, starts the
upstream simulator, the gateway and a batch runner, prints how to call it, and stops them on
Ctrl-C.
Running it again reuses what exists: the demo key is kept in .sluice/demo-key (mode 600),
a local development convenience; real keys are only ever shown once.
"""

import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.keys import key_hash, key_prefix_of
from accounts.models import ApiKey, Member, Team
from accounts.services import key_issue, member_ensure

DEMO_CONFIG = Path(settings.BASE_DIR) / "config" / "demo.toml"
DEMO_KEY_FILE = Path(settings.STATE_DIR) / "demo-key"
ADMIN_EMAIL = "admin@example.com"
SIMULATOR_PORT = 9100  # the port config/demo.toml points at


class Command(BaseCommand):
    help = "Set up and run the demo: simulator on :9100, gateway on 127.0.0.1:PORT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: Any, port: int, **options: Any) -> None:
        for wanted in (port, SIMULATOR_PORT):
            if _port_taken(wanted):
                raise CommandError(f"port {wanted} is already in use; stop what runs there first")
        call_command("migrate", verbosity=0)
        call_command("apply_config", str(DEMO_CONFIG), stdout=self.stdout)
        admin_password = self._ensure_admin()
        key = self._ensure_demo_key()

        python = sys.executable
        children = [
            subprocess.Popen(
                [
                    python,
                    "-m",
                    "simulator",
                    "--port",
                    str(SIMULATOR_PORT),
                    "--model",
                    "big:4",
                    "--model",
                    "medium:16",
                    "--model",
                    "small:64",
                    "--model",
                    "claude:4:anthropic",
                    "--model",
                    "gpt-r:8:openai-responses",
                    "--latency-ms",
                    "300",
                    "--token-latency-ms",
                    "30",
                ],
                cwd=settings.BASE_DIR,  # `simulator` is a package of the checkout, not installed
            ),
            subprocess.Popen(
                [
                    python,
                    "-m",
                    "uvicorn",
                    "config.asgi:application",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--no-access-log",
                    # Idle connections outlive the Retry-After we send (docs/operations.md).
                    "--timeout-keep-alive",
                    "75",
                    # Headers must arrive within SLUICE_HEADER_TIMEOUT (10 s).
                    "--http",
                    "config.http_protocol:SluiceHttpProtocol",
                ],
                cwd=settings.BASE_DIR,
            ),
            # The Batch API's runner (batches app), beside the gateway.
            subprocess.Popen([python, "manage.py", "run_batches"], cwd=settings.BASE_DIR),
        ]
        try:
            _wait_ready(f"http://127.0.0.1:{SIMULATOR_PORT}/stats", children)
            _wait_ready(f"http://127.0.0.1:{port}/healthz", children)
            self._banner(port, key, admin_password)
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            while all(child.poll() is None for child in children):
                time.sleep(0.5)
            raise CommandError("a demo process stopped; see its output above")
        except KeyboardInterrupt:
            self.stdout.write("\nStopping the gateway, the batch runner and the simulator.")
        finally:
            for child in children:
                child.terminate()
            for child in children:
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()

    def _ensure_admin(self) -> str | None:
        """The admin's password when it was just created, else None (it is not stored)."""
        user = get_user_model().objects.filter(username=ADMIN_EMAIL).first()
        if user is not None:
            return None
        member_ensure(email=ADMIN_EMAIL, team=Team.objects.get(slug="demo"), role=Member.Role.ADMIN)
        user = get_user_model().objects.get(username=ADMIN_EMAIL)
        password = secrets.token_urlsafe(12)
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        return password

    def _ensure_demo_key(self) -> str:
        if DEMO_KEY_FILE.exists():
            key = DEMO_KEY_FILE.read_text().strip()
            prefix = key_prefix_of(key)
            stored = ApiKey.objects.filter(prefix=prefix, revoked_at=None).first()
            if stored is not None and stored.secret_hash == key_hash(key):
                return key
        _, key = key_issue(
            member_email="demo@example.com", application_slug="demo", name="demo key (make run)"
        )
        DEMO_KEY_FILE.parent.mkdir(exist_ok=True)
        DEMO_KEY_FILE.write_text(key + "\n")
        DEMO_KEY_FILE.chmod(0o600)
        return key

    def _banner(self, port: int, key: str, admin_password: str | None) -> None:
        base = f"http://127.0.0.1:{port}"
        admin = (
            f"password {admin_password} (shown once; change it with "
            f"`.venv/bin/python manage.py changepassword {ADMIN_EMAIL}`)"
            if admin_password
            else "password as printed on the first run"
        )
        self.stdout.write(f"""
Sluice is running on {base} (upstream simulator on 127.0.0.1:{SIMULATOR_PORT}).

  Demo key (member demo@example.com, application demo):
    {key}
  Console: {base}/  log in as {ADMIN_EMAIL}, {admin}
  (Django admin: {base}/admin/, same login)

Try it with curl:
  curl {base}/v1/chat/completions -H "Authorization: Bearer {key}" \\
    -H "Content-Type: application/json" \\
    -d '{{"model": "smart", "messages": [{{"role": "user", "content": "Hello"}}]}}' -i

Or with the openai SDK (.venv/bin/python):
  from openai import OpenAI
  client = OpenAI(base_url="{base}/v1", api_key="{key}")
  reply = client.chat.completions.with_raw_response.create(
      model="smart", messages=[{{"role": "user", "content": "Hello"}}])
  print(reply.headers["x-sluice-served-model"], reply.parse().choices[0].message.content)

Routes: smart (big -> medium -> small), fast (small), mixed (claude, Anthropic-shaped ->
big -> small). /v1/messages and /v1/responses speak Anthropic's and OpenAI's newer APIs.

Coding agents (README, "Coding agents"): route claude-agent for Claude Code, codex-agent
for Codex, each native first (Messages / Responses passed through) then big -> small:
  ANTHROPIC_BASE_URL={base} ANTHROPIC_API_KEY={key} \
    ANTHROPIC_MODEL=claude-agent ANTHROPIC_DEFAULT_HAIKU_MODEL=claude-agent claude
  Codex: a provider with base_url = "{base}/v1", wire_api = "responses", env_key holding
    the key, and model = "codex-agent" (README shows the config.toml block).
A batch runner runs the Batch API (/v1/files, /v1/batches; see docs/batch.md);
`manage.py batch_status` lists batches.
Ctrl-C stops everything.
""")


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_ready(url: str, children: list[subprocess.Popen], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(child.poll() is not None for child in children):
            raise CommandError("a demo process failed to start; see its output above")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise CommandError(f"{url} did not answer within {timeout:.0f} s")
