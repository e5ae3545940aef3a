"""A worker killed with `kill -9` in the middle of a call never settles what the call
reserved. The next worker to start on the host takes it back as it starts, so the key's
budget is not held until the reservation's lease (here ten minutes) runs out."""

import os
import signal
import threading
import uuid

import httpx
import pytest

from tests.support import start_gateway, wait_until

pytestmark = pytest.mark.skipif(
    not os.environ.get("REDIS_URL"), reason="the ledger of pending reservations is Redis's"
)

SLOW = {"model": "slow", "messages": [{"role": "user", "content": "Go on."}], "max_tokens": 40}


def _post(url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json=SLOW,
        timeout=30,
    )


def test_a_budget_held_by_a_killed_workers_call_comes_back_when_the_next_worker_starts(
    e2e_database: str, issue_key, committed_db: None
):
    from quotas.services import limit_set

    key = issue_key()
    # One call's reservation (its prompt's bytes / 4 and 40 answer tokens) fits; two do not.
    limit_set(scope="key", name=key.prefix, tokens_per_month=100)
    env = {
        "SLUICE_REDIS_PREFIX": f"test-{uuid.uuid4().hex[:8]}",  # one ledger for both workers
        "SLUICE_QUOTA_PENDING_LEASE_SECONDS": "600",
    }
    first = start_gateway(e2e_database, extra_env=env)
    doomed = next(first)
    under_way = threading.Event()

    def stream() -> None:
        body = SLOW | {"stream": True}
        headers = {"authorization": f"Bearer {key.plaintext}"}
        url = f"{doomed.url}/v1/chat/completions"
        try:
            with httpx.stream("POST", url, headers=headers, json=body, timeout=30) as answer:
                assert answer.status_code == 200
                for _ in answer.iter_bytes():
                    under_way.set()
        except httpx.HTTPError:
            pass  # its worker is killed under it

    caller = threading.Thread(target=stream)
    caller.start()
    try:
        assert under_way.wait(timeout=20)
        assert _post(doomed.url, key.plaintext).status_code == 429  # the budget is held
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        next(first, None)  # reaped: its process has ended
        caller.join(timeout=30)
    second = start_gateway(e2e_database, extra_env=env)
    heir = next(second)
    try:
        wait_until(lambda: _post(heir.url, key.plaintext).status_code == 200, timeout=20)
    finally:
        next(second, None)
