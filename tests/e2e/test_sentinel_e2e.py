"""A gateway on Redis behind Sentinel keeps its shared state through a failover: the
primary is killed with `kill -9`, the sentinels promote the replica, and the gateway's
next calls run their Lua scripts on the new primary (loaded again there: it answered
NOSCRIPT) while its pub/sub listener, resubscribed there, still hears a key revoked."""

from pathlib import Path

import httpx
import pytest

from tests.support import start_gateway, wait_until
from tests.support.sentinel import sentinel_command, start_group

HI = [{"role": "user", "content": "Still there?"}]


def _call(url: str, key: str) -> int:
    return httpx.post(
        f"{url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "fast", "messages": HI},
        timeout=10,
    ).status_code


def _commands(client, name: str) -> int:
    """Calls of one command the server has seen (INFO commandstats)."""
    return int(client.info("commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


@pytest.fixture
def group(tmp_path: Path):
    if sentinel_command() is None:
        print("skipped: neither redis-sentinel nor redis-server is installed")
        pytest.skip("redis-sentinel is not installed (apt-get install -y redis-sentinel)")
    yield from start_group(tmp_path)


def test_a_gateway_on_sentinel_survives_the_primary_killed(
    group, e2e_database: str, issue_key, committed_db, settings, monkeypatch
):
    from accounts.services import key_revoke
    from core import refresh

    gateway = start_gateway(
        e2e_database,
        # Only an invalidation heard through Redis can stop a revoked key this soon.
        extra_env={"REDIS_URL": group.url, "SLUICE_KEY_CACHE_SECONDS": "60"},
    )
    handle = next(gateway)
    try:
        key = issue_key()
        assert [_call(handle.url, key.plaintext) for _ in range(3)] == [200] * 3
        primary = group.client(group.primary)
        assert _commands(primary, "evalsha") > 0  # the shared state lives there

        group.kill(group.primary)
        wait_until(lambda: group.master_port() == group.replica, timeout=15, every=0.2)
        promoted = group.client(group.replica)
        wait_until(lambda: promoted.info("replication")["role"] == "master", timeout=10)
        promoted.script_flush()  # whatever it had, the gateway's scripts are gone

        wait_until(lambda: _call(handle.url, key.plaintext) == 200, timeout=10)
        assert [_call(handle.url, key.plaintext) for _ in range(3)] == [200] * 3
        assert _commands(promoted, "evalsha") > 0  # the state moved to the new primary
        assert _commands(promoted, "eval") > 0  # sent whole after it answered NOSCRIPT
        health = httpx.get(f"{handle.url}/healthz").json()
        assert health["checks"]["redis"] == "ok"

        # This process publishes the revocation through the sentinels too.
        settings.REDIS_URL = group.url
        monkeypatch.setattr(refresh, "_publisher", None)
        wait_until(lambda: _commands(promoted, "subscribe") > 0, timeout=10)
        key_revoke(prefix=key.prefix)
        wait_until(lambda: _call(handle.url, key.plaintext) == 401, timeout=10)
    finally:
        monkeypatch.setattr(refresh, "_publisher", None)
        next(gateway, None)
