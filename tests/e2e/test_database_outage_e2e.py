"""PostgreSQL blocked under a running gateway: a hot, cached key keeps working for
SLUICE_STALE_IF_ERROR_SECONDS past its time to live (the trusted one: Redis vouches that
every change was heard), a key revoked meanwhile stops at once (the revocation comes
through Redis), a key no worker has cached is a quick 503 `database_unavailable`, and so
are the hot key's calls past the bound; nothing is a 500 or audited as `internal_error`.

The block is real: the gateway reaches PostgreSQL through a TCP relay that, while blocked,
passes no byte either way and leaves new connections unanswered (a dropped link: queries
hang, they do not fail fast). The test itself talks to PostgreSQL directly, as an admin
elsewhere would."""

import contextlib
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.support import GatewayHandle, start_gateway, wait_until

TTL = 1.0  # SLUICE_KEY_CACHE_SECONDS and SLUICE_CATALOG_CACHE_SECONDS in this gateway
STALE = 6.0  # SLUICE_STALE_IF_ERROR_SECONDS
TRUSTED = 3.0  # SLUICE_CACHE_TRUSTED_SECONDS: the time to live while every change is heard


class Relay:
    """127.0.0.1:<port> → PostgreSQL; `blocked` holds every byte and every new connection;
    `refusing` resets them (a database that is down, not a link that is)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.passing = threading.Event()
        self.passing.set()
        self.refusing = False
        self.open: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def block(self) -> None:
        self.passing.clear()

    def unblock(self) -> None:
        self.refusing = False
        self.passing.set()

    def refuse(self) -> None:
        self.refusing = True
        for s in list(self.open):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.passing.set()
        self.server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self.passing.wait()
        if self.refusing:
            client.close()
            return
        try:
            upstream = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        self.open |= {client, upstream}
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self.passing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def relayed_gateway(e2e_database: str) -> Iterator[tuple[GatewayHandle, Relay]]:
    if not e2e_database.startswith("postgres") or not os.environ.get("REDIS_URL"):
        pytest.skip("needs PostgreSQL (DATABASE_URL) and Redis (REDIS_URL)")
    parts = urlsplit(e2e_database)
    relay = Relay(parts.hostname or "127.0.0.1", parts.port or 5432)
    auth = parts.netloc.rsplit("@", 1)[0]
    url = urlunsplit(parts._replace(netloc=f"{auth}@127.0.0.1:{relay.port}"))
    env = {
        "SLUICE_KEY_CACHE_SECONDS": str(TTL),
        "SLUICE_CATALOG_CACHE_SECONDS": str(TTL),
        "SLUICE_STALE_IF_ERROR_SECONDS": str(STALE),
        "SLUICE_CACHE_TRUSTED_SECONDS": str(TRUSTED),
        "SLUICE_DB_REQUEST_SECONDS": "1",
    }
    runs = start_gateway(url, extra_env=env)
    gateway = next(runs)
    try:
        yield gateway, relay
    finally:
        relay.unblock()
        next(runs, None)
        relay.close()


def _post(gateway: GatewayHandle, key: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
        timeout=30,
    )


def test_a_hot_key_keeps_working_through_a_database_outage_and_a_revocation_still_bites(
    relayed_gateway, issue_key, committed_db
) -> None:
    from accounts.services import key_revoke
    from routing.models import CallRecord

    gateway, relay = relayed_gateway
    hot, victim, cold = issue_key(), issue_key(), issue_key()
    assert _post(gateway, hot.plaintext).status_code == 200
    assert _post(gateway, victim.plaintext).status_code == 200
    time.sleep(TTL / 2)
    assert _post(gateway, hot.plaintext).status_code == 200

    relay.block()
    blocked = time.monotonic()
    statuses: Counter[int] = Counter()
    while time.monotonic() - blocked < TRUSTED + TTL:  # past the keys' time to live
        statuses[_post(gateway, hot.plaintext).status_code] += 1
        time.sleep(0.05)
    assert set(statuses) == {200}, statuses
    assert _post(gateway, victim.plaintext).status_code == 200  # stale, not yet revoked

    key_revoke(prefix=victim.prefix)  # written here; heard by the gateway through Redis
    stopped = wait_until(
        lambda: (r := _post(gateway, victim.plaintext)).status_code != 200 and r, timeout=2
    )
    assert stopped.status_code in (401, 503)
    assert _post(gateway, hot.plaintext).status_code == 200  # the others stay cached

    started = time.monotonic()
    refused = _post(gateway, cold.plaintext)  # no worker has it: the database must answer
    assert refused.status_code == 503 and time.monotonic() - started < 3
    assert refused.json()["error"]["code"] == "database_unavailable"
    assert int(refused.headers["retry-after"]) >= 1

    # Past the bound the hot key is refused too, the same way.
    while (answer := _post(gateway, hot.plaintext)).status_code == 200:
        statuses[200] += 1
        assert time.monotonic() - blocked < TRUSTED + STALE + 3, "served past the stale bound"
        time.sleep(0.05)
    assert time.monotonic() - blocked > STALE - 1
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "database_unavailable"
    print(f"\nblocked {time.monotonic() - blocked:.1f} s: {statuses[200]} hot calls served")

    relay.unblock()
    wait_until(lambda: _post(gateway, hot.plaintext).status_code == 200, timeout=15)
    assert _post(gateway, victim.plaintext).status_code == 401  # and it stays revoked
    ids = [r.headers["x-sluice-request-id"] for r in (refused, answer)]
    records = wait_until(
        lambda: len(rows := list(CallRecord.objects.filter(request_id__in=ids))) == 2 and rows,
        timeout=20,
    )
    assert {r.outcome for r in records} == {"database_unavailable"}


def test_the_console_and_the_management_api_say_the_database_is_down(
    relayed_gateway, committed_db
) -> None:
    """A page or an API call that needs the database while it is down: a 503 saying so
    with Retry-After (an HTML page, the API's JSON shape), never a 500; fine again after."""
    from accounts.services import SYSTEM, management_token_issue

    gateway, relay = relayed_gateway
    _, token = management_token_issue(actor=SYSTEM, name="outage")
    api = {"authorization": f"Bearer {token}"}
    assert httpx.get(f"{gateway.url}/login/").status_code == 200
    assert httpx.get(f"{gateway.url}/api/v1/teams/", headers=api).status_code == 200

    relay.refuse()
    try:
        page = httpx.get(f"{gateway.url}/login/", timeout=30)
        assert page.status_code == 503, page.text[:300]
        assert "The database is not answering" in page.text
        assert int(page.headers["retry-after"]) >= 1
        answer = httpx.get(f"{gateway.url}/api/v1/teams/", headers=api, timeout=30)
        assert answer.status_code == 503, answer.text[:300]
        assert answer.json()["error"]["code"] == "database_unavailable"
        assert int(answer.headers["retry-after"]) >= 1
    finally:
        relay.unblock()
    wait_until(lambda: httpx.get(f"{gateway.url}/login/").status_code == 200, timeout=15)
    assert httpx.get(f"{gateway.url}/api/v1/teams/", headers=api).status_code == 200
