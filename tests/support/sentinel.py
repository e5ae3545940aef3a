"""A Redis primary, its replica and three sentinels on free loopback ports, each a process
of its own (the test kills the primary with `kill -9`)."""

import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.processes import free_port
from tests.support.waiting import wait_until

MASTER = "sluice"


def sentinel_command() -> list[str] | None:
    """Debian's redis-sentinel, or redis-server in sentinel mode; None when neither is here."""
    if shutil.which("redis-sentinel"):
        return [shutil.which("redis-sentinel") or "redis-sentinel"]
    if shutil.which("redis-server"):
        return [shutil.which("redis-server") or "redis-server", "--sentinel"]
    return None


@dataclass
class RedisGroup:
    primary: int
    replica: int
    sentinels: list[int]
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinels)
        return f"redis+sentinel://{hosts}/{MASTER}/0"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=2)

    def master_port(self) -> int | None:
        for port in self.sentinels:
            try:
                address = self.client(port).sentinel_get_master_addr_by_name(MASTER)
            except redis.RedisError:
                continue
            if address:
                return int(address[1])
        return None

    def kill(self, port: int) -> None:
        proc = self.procs.pop(port)
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _server(port: int, folder: Path, *extra: str) -> subprocess.Popen:
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "no", "--dir", str(folder), *extra]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL)


def start_group(folder: Path) -> Iterator[RedisGroup]:
    """Yields the group once the replica is in sync and every sentinel sees the others;
    stops whatever is still running when resumed."""
    command = sentinel_command()
    assert command is not None
    group = RedisGroup(free_port(), free_port(), [free_port() for _ in range(3)])
    try:
        group.procs[group.primary] = _server(group.primary, folder)
        wait_until(lambda: _answers(group.client(group.primary)), timeout=10)
        group.procs[group.replica] = _server(
            group.replica, folder, "--replicaof", "127.0.0.1", str(group.primary)
        )
        for port in group.sentinels:
            conf = folder / f"sentinel-{port}.conf"  # sentinels rewrite their file
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {group.primary} 2\n"
                f"sentinel down-after-milliseconds {MASTER} 1000\n"
                f"sentinel failover-timeout {MASTER} 5000\n"
            )
            group.procs[port] = subprocess.Popen([*command, str(conf)], stdout=subprocess.DEVNULL)

        def settled() -> bool:
            try:
                replication = group.client(group.replica).info("replication")
                if replication.get("master_link_status") != "up":
                    return False
                return all(
                    len(group.client(port).sentinel_sentinels(MASTER)) >= 2
                    and group.client(port).sentinel_slaves(MASTER)
                    for port in group.sentinels
                )
            except redis.RedisError:
                return False  # not up yet

        wait_until(settled, timeout=20, every=0.2)
        yield group
    finally:
        for proc in group.procs.values():
            proc.terminate()
        for proc in group.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
