"""Start the pieces a benchmark needs (simulators, a gateway on a throw-away database) and
read their CPU use. Shared by the benchmarks in this folder."""

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process for {url} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / CLOCK_TICKS


def servers_cpu_seconds() -> float:
    """CPU seconds of this host's PostgreSQL and Redis servers (0 when they run elsewhere):
    what a batch's or a gateway's writes cost the servers they share with everything else.
    Every process of theirs, and the postmaster's reaped children (backends that ended)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended meanwhile
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        if name.startswith(("postgres", "redis-server")):
            fields = text.rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / CLOCK_TICKS


def process_tree(proc: subprocess.Popen) -> list[int]:
    """A process and its children (uvicorn --workers N: the parent only supervises)."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return [proc.pid, *map(int, children)]


class Stack:
    """Processes started for one benchmark run, stopped together."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
        self.env = os.environ | {
            "DATABASE_URL": os.environ.get("DATABASE_URL", f"sqlite:///{self.tmp}/bench.sqlite3"),
            "SLUICE_SECRET_KEY": "bench",
            "SLUICE_LOG_LEVEL": "WARNING",
        }

    def simulator(self, *args: str) -> str:
        """Start a simulator; its base URL (without /v1)."""
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "simulator", "--port", str(port), *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_ready(f"{url}/stats", proc)
        return url

    def otlp_sink(self) -> str:
        """Start an OTLP/HTTP endpoint that discards what it is sent (bench/otlp_sink.py);
        its base URL."""
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "bench/otlp_sink.py", "--port", str(port)], cwd=ROOT
        )
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_ready(f"{url}/stats", proc)
        return url

    def manage(self, *args: str) -> str:
        """Run a management command against the stack's database; its output."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout

    def configure(self, config_toml: str, *, member: str, application: str) -> str:
        """Migrate, apply the config, issue a key for the member; the key."""
        path = self.tmp / "bench.toml"
        path.write_text(config_toml)
        self.manage("migrate", "-v0")
        self.manage("apply_config", str(path))
        return self.issue_key(member, application)

    def issue_key(self, member: str, application: str) -> str:
        out = self.manage("issue_key", "--member", member, "--application", application)
        return out.strip().splitlines()[-1]

    def gateway(
        self,
        *,
        workers: int = 1,
        env: dict[str, str] | None = None,
        http: str = "config.http_protocol:SluiceHttpProtocol",
        source: Path = ROOT,
        extra: tuple[str, ...] = (),
        wrapper: tuple[str, ...] = (),
    ) -> tuple[str, list[int]]:
        """Start Sluice under uvicorn (as the production line of docs/operations.md; `http`
        names uvicorn's protocol; from `source`: another checkout for a baseline; `extra`:
        more uvicorn options, say `--backlog`; `wrapper`: a command it runs under, say
        valgrind); its base URL and process ids."""
        if not (source / "config" / "http_protocol.py").exists():
            http = "httptools"  # a baseline from before Sluice had its own protocol
        port = free_port()
        proc = subprocess.Popen(
            [
                *wrapper,
                sys.executable,
                "-m",
                "uvicorn",
                "config.asgi:application",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--no-access-log",
                "--timeout-keep-alive",  # as docs/operations.md's production line
                "75",
                "--http",
                http,
                "--log-level",
                "warning",
                *extra,
            ],
            cwd=source,
            env=self.env | (env or {}),
        )
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_ready(f"{url}/healthz", proc, timeout=120 if wrapper else 30)
        time.sleep(0.5)  # workers finish starting
        return url, process_tree(proc)

    def checkout(self, ref: str) -> Path:
        """The project's files at a git ref (say `main`), in the stack's scratch folder."""
        target = self.tmp / f"src-{ref.replace('/', '-')}"
        target.mkdir()
        archive = subprocess.run(
            ["git", "archive", ref], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
        return target

    def stop_last(self) -> None:
        proc = self.procs.pop()
        proc.terminate()
        proc.wait(timeout=10)

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=10)


@contextmanager
def stack() -> Iterator[Stack]:
    s = Stack()
    try:
        yield s
    finally:
        s.close()
