"""Sluice as a fleet: gateway hosts behind HAProxy on shared Redis and PostgreSQL, with
faults under load, side by side with the same load on one host.

    sudo .venv/bin/python bench/fleet.py [--hosts 3] [--workers 2] [--seconds 16]

Each gateway "host" runs in a network namespace of its own (`ip netns`), with its own
address on a private bridge the harness makes and removes; Redis (a primary, a replica and
three Sentinels), PgBouncer (transaction pooling, in front of a PostgreSQL cluster the
harness makes), the simulator and HAProxy (health checks on `/healthz/ready`) run beside the
bridge. Open-loop calls (bench/openloop.py: Poisson arrivals scheduled in advance) go
through HAProxy: 20 % interactive, 80 % batch, from four members and one member whose key
has a monthly token budget that the run spends. For each fault, while calls arrive:

  none            nothing happens (the fleet's baseline)
  host killed     kill -9 of every process of one host (started again 3 s later)
  host cut off    one host's link down for 5 s: no Redis, PostgreSQL, upstream or client
  Redis failover  kill -9 of the Redis primary: Sentinel promotes the replica
  PgBouncer       PgBouncer stopped and started again after 2 s
  PostgreSQL      the harness's own PostgreSQL restarted (pg_ctl restart -m fast)

printed: calls failed (no answer from a gateway: only calls in flight on a dead or cut
host may fail), interactive calls served, the budget's accuracy, audit rows found for the
calls answered, and when the last failure happened after the fault began.

The budget: once every call of the run has ended and every host is back, the budgeted key
calls on until its budget refuses it (8 at a time, then fewer, down to one at a time, so
no call in flight holds a reservation at the last refusal). The budget column is the
tokens its calls used / its budget (over 100 %: a limit that did not hold), and `left`
what the budget refused to spend, in calls' reservations. A call reserves the most it may
take (its prompt's bytes / 4 and its max_tokens: here 29-31 tokens for a call that uses
11) and is refused when that no longer fits in what is left: a budget held exactly ends
with less than one reservation left (left < 1). The budget is 300 calls' worth: one
reservation is under 1 % of it.

A last table is the same load on one host (`none` only). Needs root (namespaces), Debian's
haproxy, pgbouncer and redis-sentinel (redis-server --sentinel does too).
"""

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import openloop

ROOT = Path(__file__).resolve().parent.parent
_PG = Path("/usr/lib/postgresql")
PG_BIN = max(_PG.iterdir(), key=lambda p: int(p.name)) / "bin" if _PG.is_dir() else _PG
CALL_MS = 200
CAPACITY = 8  # the simulator's model takes 8 calls at a time: 40 calls a second
MEMBERS = {"m1": 1.0, "m2": 1.0, "m3": 1.0, "m4": 1.0, "budget": 2.0}
BUDGET_CALLS = 300  # the budgeted key's monthly tokens: this many calls' worth
METRICS_TOKEN = "fleet-metrics"
EXTRA = {"max_tokens": 8}  # what the simulator answers

CONFIG = """
[[upstreams]]
name = "sim"
base_url = "{simulator}/v1"
[[deployments]]
name = "primary"
upstream = "sim"
model = "m"
max_concurrency = {capacity}
[[routes]]
name = "m"
chain = ["primary"]
[[teams]]
slug = "fleet"
[[applications]]
slug = "fleet"
team = "fleet"
routes = ["m"]
"""


def missing() -> str | None:
    """Why the fleet cannot be built here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not (PG_BIN / "initdb").exists():
        return "PostgreSQL's server binaries are not installed (initdb)"
    for tool in ("ip", "haproxy", "pgbouncer", "redis-server", "runuser"):
        if not shutil.which(tool):
            return f"{tool} is not installed (apt-get install -y iproute2 haproxy pgbouncer redis)"
    if not (shutil.which("redis-sentinel") or shutil.which("redis-server")):
        return "redis-sentinel is not installed"
    probe = f"slprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.decode().strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check: Callable[[], bool], timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with suppress(Exception):
            if check():
                return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


class Network:
    """A bridge with an address of its own, and a namespace per host on it."""

    def __init__(self, hosts: int) -> None:
        tag = os.getpid() % 100_000
        self.bridge = f"slb{tag}"
        self.prefix = f"10.231.{1 + tag % 250}"
        self.address = f"{self.prefix}.1"
        self.hosts = [f"sl{tag}h{i}" for i in range(1, hosts + 1)]

    def host_address(self, index: int) -> str:
        return f"{self.prefix}.{11 + index}"

    def up(self) -> None:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.address}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for index, host in enumerate(self.hosts):
            veth = f"{host}v"[-15:]
            sh("ip", "netns", "add", host)
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", host)
            sh("ip", "link", "set", veth, "master", self.bridge, "up")
            inside = ["ip", "netns", "exec", host]
            sh(*inside, "ip", "addr", "add", f"{self.host_address(index)}/24", "dev", "eth0")
            sh(*inside, "ip", "link", "set", "eth0", "up")
            sh(*inside, "ip", "link", "set", "lo", "up")

    def cut(self, index: int, down: bool) -> None:
        state = "down" if down else "up"
        sh("ip", "netns", "exec", self.hosts[index], "ip", "link", "set", "eth0", state)

    def kill_all(self, index: int) -> None:
        pids = sh("ip", "netns", "pids", self.hosts[index], check=False).stdout.split()
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)

    def down(self) -> None:
        for index, host in enumerate(self.hosts):
            self.kill_all(index)
            sh("ip", "netns", "del", host, check=False)
        sh("ip", "link", "del", self.bridge, check=False)


@dataclass
class Fleet:
    net: Network
    workers: int
    tmp: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    database: str = ""
    ports: dict[str, int] = field(default_factory=dict)
    sentinels: list[int] = field(default_factory=list)
    redis: list[int] = field(default_factory=list)

    # --- the services beside the bridge -----------------------------------------------------

    def start(self, name: str, args: list[str], **kwargs: object) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - the process's own
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, **kwargs)  # type: ignore[call-overload]
        self.procs[name] = proc
        return proc

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def start_redis(self) -> None:
        primary, replica = free_port(), free_port()
        self.redis = [primary, replica]
        for port, extra in (
            (primary, []),
            (replica, ["--replicaof", self.net.address, str(primary)]),
        ):
            self.start(
                f"redis-{port}",
                ["redis-server", "--port", str(port), "--bind", self.net.address, "--save", "",
                 "--appendonly", "no", "--dir", str(self.tmp), "--protected-mode", "no", *extra],
            )  # fmt: skip
        command = (
            [shutil.which("redis-sentinel") or ""]
            if shutil.which("redis-sentinel")
            else [shutil.which("redis-server") or "", "--sentinel"]
        )
        self.sentinels = [free_port() for _ in range(3)]
        for port in self.sentinels:
            conf = self.tmp / f"sentinel-{port}.conf"
            conf.write_text(
                # A private bridge of the harness's own: no password, no protected mode.
                f"port {port}\nbind {self.net.address}\ndir {self.tmp}\nprotected-mode no\n"
                f"sentinel monitor fleet {self.net.address} {primary} 2\n"
                "sentinel down-after-milliseconds fleet 1000\n"
                "sentinel failover-timeout fleet 5000\n"
            )
            self.start(f"sentinel-{port}", [*command, str(conf)])
        import redis

        def settled() -> bool:
            info = redis.Redis(host=self.net.address, port=replica).info("replication")
            seen = [
                redis.Redis(host=self.net.address, port=p).sentinel_sentinels("fleet")
                for p in self.sentinels
            ]
            return info.get("master_link_status") == "up" and all(len(s) >= 2 for s in seen)

        wait_for(settled, 30, "Redis replication and Sentinels")

    def redis_url(self) -> str:
        hosts = ",".join(f"{self.net.address}:{p}" for p in self.sentinels)
        return f"redis+sentinel://{hosts}/fleet/0"

    def redis_primary(self) -> int:
        import redis

        address = redis.Redis(
            host=self.net.address, port=self.sentinels[0]
        ).sentinel_get_master_addr_by_name("fleet")
        return int(address[1])

    def pg(self, database: str = "") -> str:
        """The harness's own PostgreSQL (restarted as a fault), as the harness reaches it."""
        return f"postgres://postgres@127.0.0.1:{self.ports['postgres']}/{database or self.database}"

    def pg_ctl(self, *args: str) -> None:
        """pg_ctl as postgres; the server it starts logs to its own file (never to a pipe of
        ours, which it would hold open)."""
        data = self.tmp / "pg"
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(data), "-w",
             "-l", str(data / "server.log"), *args],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
        )  # fmt: skip

    def start_database(self) -> None:
        """A PostgreSQL cluster of the harness's own (so it can be restarted), and PgBouncer
        in front of it on the bridge."""
        self.tmp.chmod(0o755)  # PostgreSQL and PgBouncer run as postgres (they refuse root)
        data = self.tmp / "pg"
        data.mkdir()
        shutil.chown(data, "postgres", "postgres")
        sh("runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D", str(data),
           "-A", "trust", "-U", "postgres", "--no-sync")  # fmt: skip
        self.ports["postgres"] = free_port()
        options = f"-p {self.ports['postgres']} -c listen_addresses=127.0.0.1 -k {data} "
        options += "-c fsync=off -c max_connections=200"
        self.pg_ctl("-o", options, "start")
        self.database = "sluice_fleet"
        with psycopg.connect(self.pg("postgres"), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{self.database}"')
        self.ports["pgbouncer"] = free_port()
        users = self.tmp / "userlist.txt"
        users.write_text('"postgres" ""\n')
        ini = self.tmp / "pgbouncer.ini"
        ini.write_text(
            f"[databases]\n{self.database} = host=127.0.0.1 port={self.ports['postgres']}\n"
            f"[pgbouncer]\nlisten_addr = {self.net.address}\n"
            f"listen_port = {self.ports['pgbouncer']}\n"
            f"unix_socket_dir =\nauth_type = trust\nauth_file = {users}\n"
            "pool_mode = transaction\ndefault_pool_size = 20\nmax_client_conn = 1000\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
        for path in (users, ini):
            path.chmod(0o644)
        self.start_pgbouncer()

    def start_pgbouncer(self) -> None:
        self.start("pgbouncer", ["pgbouncer", "-u", "postgres", str(self.tmp / "pgbouncer.ini")])
        dsn = f"postgres://postgres@{self.net.address}:{self.ports['pgbouncer']}/{self.database}"
        wait_for(lambda: psycopg.connect(dsn, connect_timeout=2).close() is None, 15, "PgBouncer")

    def gateway_env(self, host: int | None = None) -> dict[str, str]:
        return os.environ | {
            "DATABASE_URL": f"postgres://postgres@{self.net.address}:{self.ports['pgbouncer']}"
            f"/{self.database}",
            "SLUICE_DB_PGBOUNCER": "1",
            "REDIS_URL": self.redis_url(),
            "SLUICE_REDIS_PREFIX": f"fleet{os.getpid()}",
            "SLUICE_SECRET_KEY": "fleet-bench",
            "SLUICE_METRICS_TOKEN": METRICS_TOKEN,
            "SLUICE_LOG_LEVEL": "WARNING",
            "SLUICE_AUDIT_FLUSH_SECONDS": "0.2",
            "SLUICE_AUDIT_SPOOL_DIR": str(self.tmp / f"spool-{host}"),
        }

    def manage(self, *args: str) -> str:
        env = self.gateway_env() | {"DATABASE_URL": self.pg()}
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
            capture_output=True, text=True,
        )  # fmt: skip
        return done.stdout

    def start_simulator(self) -> str:
        port = free_port()
        self.start(
            "simulator",
            [sys.executable, "-m", "simulator", "--host", self.net.address, "--port", str(port),
             "--model", f"m:{CAPACITY}", "--latency-ms", str(CALL_MS), "--output-tokens", "8"],
            cwd=ROOT,
        )  # fmt: skip
        url = f"http://{self.net.address}:{port}"
        wait_for(lambda: httpx.get(f"{url}/stats", timeout=1).status_code == 200, 20, "simulator")
        return url

    def start_haproxy(self, hosts: list[int]) -> str:
        self.stop("haproxy")
        port = free_port()
        servers = "\n".join(f"  server h{i} {self.net.host_address(i)}:8000 check" for i in hosts)
        cfg = self.tmp / "haproxy.cfg"
        cfg.write_text(
            "global\n  maxconn 5000\n"
            "defaults\n  mode http\n  timeout connect 1s\n  timeout client 60s\n"
            "  timeout server 30s\n  retries 2\n  option redispatch\n"
            # As deploy/haproxy.cfg: a host that resets or closes a call unanswered (killed
            # mid-call, or a kept-alive connection to it) has the call sent to another.
            "  retry-on conn-failure empty-response\n  option http-buffer-request\n"
            f"frontend calls\n  bind 127.0.0.1:{port}\n  default_backend gateways\n"
            "backend gateways\n  balance leastconn\n  option httpchk GET /healthz/ready\n"
            "  default-server inter 500ms fall 2 rise 2\n"
            f"{servers}\n"
        )
        self.start("haproxy", ["haproxy", "-db", "-f", str(cfg)])
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(f"{url}/healthz/ready", timeout=1).status_code == 200, 30,
                 "HAProxy and a ready gateway")  # fmt: skip
        return url

    # --- the gateway hosts -----------------------------------------------------------------

    def start_host(self, index: int) -> None:
        address = self.net.host_address(index)
        self.start(
            f"host-{index}",
            ["ip", "netns", "exec", self.net.hosts[index], sys.executable, "-m", "uvicorn",
             "config.asgi:application", "--host", address, "--port", "8000",
             "--workers", str(self.workers), "--no-access-log", "--timeout-keep-alive", "75",
             "--http", "config.http_protocol:SluiceHttpProtocol", "--log-level", "warning"],
            cwd=ROOT, env=self.gateway_env(index),
        )  # fmt: skip

    def host_ready(self, index: int) -> bool:
        """Ready and not degraded: every check ok (a fault's aftermath is over)."""
        url = f"http://{self.net.host_address(index)}:8000/healthz/ready"
        answer = httpx.get(url, timeout=1)
        return answer.status_code == 200 and answer.json().get("status") == "ok"

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name)
        self.net.down()
        if "postgres" in self.ports:
            with suppress(subprocess.SubprocessError):
                self.pg_ctl("-m", "immediate", "stop")


@contextmanager
def fleet(hosts: int, workers: int) -> Iterator[Fleet]:
    net = Network(hosts)
    f = Fleet(net, workers, Path(tempfile.mkdtemp(prefix="sluice-fleet-")))
    try:
        net.up()
        f.start_redis()
        f.start_database()
        yield f
    except Exception:
        for log in sorted(f.tmp.glob("*.log")):  # what the processes said, for the failure
            print(f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}", file=sys.stderr)
        raise
    finally:
        f.close()
        shutil.rmtree(f.tmp, ignore_errors=True)


# --- a run ------------------------------------------------------------------------------------


@dataclass
class Row:
    fault: str
    calls: int
    failed: int
    failed_after_fault: int  # failures of calls that arrived after the fault began
    interactive: float  # share served
    budget: float  # tokens the budgeted key's calls used / its budget, once it is refused
    left: float  # what the budget refused to spend at the end, in calls' reservations
    measured: float  # seconds from the fault (or the start) to the budget's last refusal
    answered: int
    audited: int
    recovery: float | None  # seconds from the fault to the last failure
    seen: str = ""  # what a host's /healthz/ready and /metrics said 1.5 s into the fault


async def observe(f: Fleet, index: int) -> str:
    """What an operator sees on a host: its readiness (and the checks not ok), the
    deployment's breaker on /metrics, and the console's login page (it reads the database)."""
    base = f"http://{f.net.host_address(index)}:8000"
    async with httpx.AsyncClient(timeout=5) as client:
        try:
            ready = await client.get(f"{base}/healthz/ready")
            checks = ready.json().get("checks", {})
            text = (
                await client.get(
                    f"{base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
                )
            ).text
        except (httpx.HTTPError, ValueError) as exc:
            return f"host {index}: no answer ({type(exc).__name__})"
        began = time.monotonic()
        try:  # the Host a client sends through HAProxy (the gateway's allowed hosts)
            page = await client.get(f"{base}/login/", headers={"Host": "127.0.0.1"})
            console = f"console {page.status_code}"
        except httpx.HTTPError as exc:
            console = f"console no answer ({type(exc).__name__})"
        console += f" in {(time.monotonic() - began) * 1000:.0f} ms"
    failing = ",".join(f"{k}={v}" for k, v in checks.items() if v != "ok")
    status = f"{ready.status_code} {ready.json().get('status')}" + (
        f" ({failing})" if failing else ""
    )
    breaker = next(
        (line.split()[0].split('state="')[1].rstrip('"}') for line in text.splitlines()
         if line.startswith("sluice_deployment_breaker_state") and line.endswith(" 1.0")),
        "?",
    )  # fmt: skip
    return f"ready {status}; breaker {breaker}; {console}"


def _tokens_of(f: Fleet, prefix: str) -> int:
    with psycopg.connect(f.pg()) as c:
        row = c.execute(
            "SELECT COALESCE(SUM(tokens_in + tokens_out), 0) FROM routing_callrecord "
            "WHERE key_prefix = %s AND status_code = 200",
            (prefix,),
        ).fetchone()
        return int(row[0]) if row else 0


def _audited(f: Fleet, ids: list[str]) -> int:
    with psycopg.connect(f.pg()) as c:
        row = c.execute(
            "SELECT count(*) FROM routing_callrecord WHERE request_id = ANY(%s)", (ids,)
        ).fetchone()
        return int(row[0]) if row else 0


def _budget_refusal(answer: httpx.Response | None) -> float | None:
    """What a call reserves, as the budget's refusal says ("needs up to N"), or None when
    `answer` is something else."""
    if answer is None or answer.status_code != 429:
        return None
    try:
        error = answer.json()["error"]
    except (ValueError, KeyError, TypeError):
        return None
    said = re.search(r"this request needs up to ([\d.]+)", str(error.get("message")))
    return float(said.group(1)) if error.get("code") == "budget_exceeded" and said else None


@dataclass
class Spender:
    """The budgeted key, calling on until its budget refuses it."""

    url: str
    key: str
    served: list[str] = field(default_factory=list)  # ids of the calls answered 200
    needs: float = 0.0  # what the last refusal said a call reserves
    refused_at: float = 0.0  # time.monotonic() of the last refusal
    failed: int = 0  # answers neither 200 nor the budget's refusal
    tries: int = 0

    async def spend(self, at_once: int) -> None:
        """`at_once` calls at a time, each caller until the budget refuses it."""
        body = {"model": "m", "messages": [{"role": "user", "content": "Open loop."}], **EXTRA}
        headers = {"Authorization": f"Bearer {self.key}", "X-Sluice-Priority": "interactive"}
        async with httpx.AsyncClient(timeout=60) as client:

            async def refused() -> bool:
                self.tries += 1
                if self.tries > 20 * BUDGET_CALLS:
                    raise RuntimeError("the budget never refused the budgeted key")
                try:
                    answer = await client.post(
                        f"{self.url}/v1/chat/completions", json=body, headers=headers
                    )
                except httpx.HTTPError:
                    answer = None
                if answer is not None and answer.status_code == 200:
                    self.served.append(answer.headers["x-sluice-request-id"])
                    return False
                needs = _budget_refusal(answer)
                if needs is not None:
                    self.needs, self.refused_at = needs, time.monotonic()
                    return True
                self.failed += 1
                await asyncio.sleep(0.1)  # at capacity, or no gateway answered: again soon
                return False

            async def caller() -> None:
                while not await refused():
                    pass

            await asyncio.gather(*(caller() for _ in range(at_once)))


def run(
    f: Fleet,
    url: str,
    keys: dict[str, str],
    fault: str,
    action: Callable[[], object] | None,
    *,
    seconds: float,
    fault_at: float,
    budget_prefix: str,
    budget_tokens: int,
    rate: float,
) -> Row:
    load = openloop.Load(rate, seconds, MEMBERS, interactive_share=0.2, seed=7)
    seen: list[str] = []

    async def look() -> None:
        seen.append(await observe(f, 0))

    events = [(fault_at, action), (fault_at + 1.5, look)] if action else []
    ran: list[float] = []
    began = time.monotonic() + 0.5  # openloop.fire's start, within a few milliseconds
    results = asyncio.run(
        openloop.fire(
            f"{url}/v1/chat/completions", keys, load.arrivals, model="m", events=events,
            headers_for=lambda a: {"X-Sluice-Max-Wait": "20"} if a.priority == "batch" else {},
            extra=EXTRA, events_ran=ran,
        )
    )  # fmt: skip
    # When the fault really struck: the event runs late when the loop is busy, and calls
    # sent before it are in flight on the host it strikes.
    struck = ran[0] if action else fault_at
    failed = [r for r in results if not r.request_id]
    answered = [r.request_id for r in results if r.request_id]
    # Rows of a host that was cut off or killed come once it is back (its spool).
    deadline = time.monotonic() + 20
    audited = _audited(f, answered)
    while audited < len(answered) and time.monotonic() < deadline:
        time.sleep(0.5)
        audited = _audited(f, answered)
    for index in range(len(f.net.hosts)):  # every host back before the last refusal
        wait_for(lambda i=index: f.host_ready(i), 60, f"host {index} after {fault}")
    # Once every call of the run has ended, the budgeted key spends what is left of its
    # budget, 8 calls at a time, then fewer down to one: at the last refusal no call holds
    # a reservation beyond what it used.
    spender = Spender(url, keys["budget"])
    for at_once in (8, 4, 2, 1):
        asyncio.run(spender.spend(at_once=at_once))
    deadline = time.monotonic() + 20
    while _audited(f, spender.served) < len(spender.served) and time.monotonic() < deadline:
        time.sleep(0.5)
    used = _tokens_of(f, budget_prefix)
    # The budgeted member's refusals are its budget holding, not priority failing.
    interactive = [
        r for r in results if r.arrival.priority == "interactive" and r.arrival.member != "budget"
    ]
    last = max((r.ended for r in failed), default=None)
    return Row(
        fault=fault,
        calls=len(results),
        failed=len(failed),
        failed_after_fault=sum(1 for r in failed if r.arrival.at > struck + 0.05),
        interactive=sum(r.served for r in interactive) / max(1, len(interactive)),
        budget=used / budget_tokens,
        left=(budget_tokens - used) / spender.needs if spender.needs else float("nan"),
        measured=spender.refused_at - began - (struck if action else 0.0),
        answered=len(answered),
        audited=audited,
        recovery=None if last is None or not action else max(0.0, last - fault_at - 0.5),
        seen=seen[0] if seen else "",
    )


def print_rows(title: str, rows: list[Row]) -> None:
    print(f"\n{title}")
    print(
        f"  {'fault':16}{'calls':>7}{'failed':>8}{'after':>7}{'interactive':>13}"
        f"{'budget':>9}{'left':>6}{'at':>7}{'answered':>10}{'audited':>9}{'last failure':>14}"
    )
    for r in rows:
        last = "—" if r.recovery is None else f"+{r.recovery:.1f} s"
        print(
            f"  {r.fault:16}{r.calls:7}{r.failed:8}{r.failed_after_fault:7}"
            f"{r.interactive * 100:12.1f}%{r.budget * 100:8.1f}%{r.left:6.2f}"
            f"{f'+{r.measured:.0f} s':>7}{r.answered:10}"
            f"{r.audited:9}{last:>14}"
        )
    for r in rows:
        if r.seen:
            print(f"  {r.fault:16}1.5 s in, host 0: {r.seen}")
    print(
        "  (failed: no answer from a gateway; after: of those, calls that arrived after the "
        "fault began;\n   budget: tokens the budgeted key used / its budget once it was refused; "
        "left: unspent, in calls' reservations;\n   at: that last refusal, from the fault (or "
        "the start); last failure: after the fault began;\n   interactive: of the members "
        "without a budget)"
    )


def setup(f: Fleet) -> dict[str, str]:
    """Migrate, apply the config, issue the members' keys."""
    simulator = f.start_simulator()
    f.manage("migrate", "-v0")
    config = f.tmp / "fleet.toml"
    members = "".join(f'[[members]]\nemail = "{m}@example.com"\nteam = "fleet"\n' for m in MEMBERS)
    config.write_text(CONFIG.format(simulator=simulator, capacity=CAPACITY) + members)
    f.manage("apply_config", str(config))
    return {m: _issue(f, m) for m in MEMBERS}


def _issue(f: Fleet, member: str) -> str:
    out = f.manage("issue_key", "--member", f"{member}@example.com", "--application", "fleet")
    return out.strip().splitlines()[-1]


def new_budget(f: Fleet, keys: dict[str, str], per_call: int) -> tuple[str, int]:
    """A new key for the budgeted member with `BUDGET_CALLS` calls' worth of monthly tokens:
    its prefix and the budget."""
    keys["budget"] = key = _issue(f, "budget")
    prefix = key[: len("sk-sluice-") + 12]
    tokens = per_call * BUDGET_CALLS
    f.manage("set_limit", "key", prefix, "--monthly-tokens", str(tokens))
    return prefix, tokens


def tokens_per_call(url: str, key: str) -> int:
    answer = httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "m", "messages": [{"role": "user", "content": "Open loop."}], **EXTRA},
        timeout=30,
    )
    answer.raise_for_status()
    return int(answer.json()["usage"]["total_tokens"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=16)
    parser.add_argument("--faults", help="comma-separated fault names (default: all)")
    args = parser.parse_args()
    reason = missing()
    if reason:
        raise SystemExit(f"fleet: cannot run here: {reason}")
    faults = args.faults.split(",") if args.faults else None
    for table in fleet_tables(args.hosts, args.workers, args.seconds, faults):
        print_rows(*table)


def _faults(f: Fleet) -> list[tuple[str, Callable[[], object] | None]]:
    async def cut_off() -> None:
        f.net.cut(2 % len(f.net.hosts), True)
        await asyncio.sleep(5)
        f.net.cut(2 % len(f.net.hosts), False)

    async def failover() -> None:
        await asyncio.to_thread(f.stop, f"redis-{f.redis_primary()}", signal.SIGKILL)

    async def bounce() -> None:
        await asyncio.to_thread(f.stop, "pgbouncer")
        await asyncio.sleep(2)
        await asyncio.to_thread(f.start_pgbouncer)

    async def kill_host() -> None:
        index = 1 % len(f.net.hosts)
        f.net.kill_all(index)
        await asyncio.sleep(3)  # then started again, as systemd would: it claims the spool
        f.start_host(index)

    async def restart_postgres() -> None:
        await asyncio.to_thread(f.pg_ctl, "-m", "fast", "restart")

    return [
        ("none", None),
        ("host killed", kill_host),
        ("host cut off", cut_off),
        ("Redis failover", failover),
        ("PgBouncer", bounce),
        ("PostgreSQL", restart_postgres),
    ]


def fleet_tables(
    hosts: int, workers: int, seconds: float, faults: list[str] | None = None
) -> list[tuple[str, list[Row]]]:
    """The fleet's table (each fault named in `faults`, or all) and the one-host table."""
    with fleet(hosts, workers) as f:
        keys = setup(f)
        for index in range(hosts):
            f.start_host(index)
        url = f.start_haproxy(list(range(hosts)))
        for index in range(hosts):
            wait_for(lambda i=index: f.host_ready(i), 60, f"host {index}")
        per_call = tokens_per_call(url, keys["m1"])
        rate = 1.5 * CAPACITY * 1000 / CALL_MS
        shape = dict(seconds=seconds, fault_at=seconds / 3, rate=rate)
        rows = []
        for name, action in _faults(f):
            if faults is not None and name not in faults:
                continue
            prefix, budget = new_budget(f, keys, per_call)
            time.sleep(0.5)
            rows.append(run(f, url, keys, name, action, budget_prefix=prefix,
                            budget_tokens=budget, **shape))  # fmt: skip
        one = f.start_haproxy([0])
        prefix, budget = new_budget(f, keys, per_call)
        single = run(f, one, keys, "none", None, budget_prefix=prefix, budget_tokens=budget,
                     **shape)  # fmt: skip
    offered = f"{rate:.0f} calls/s offered (1.5x the provider's {CAPACITY} calls of {CALL_MS} ms)"
    return [
        (f"Fleet: {hosts} hosts x {workers} workers behind HAProxy, {offered}", rows),
        (f"One host x {workers} workers behind HAProxy, the same load", [single]),
    ]


if __name__ == "__main__":
    main()
