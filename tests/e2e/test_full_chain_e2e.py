"""When the whole chain is full: a client is told the soonest a deployment may really take
its call, and one call does not hammer a full provider."""

from typing import Any

import httpx
import pytest

from tests.support import GatewayHandle, SimulatorHandle, wait_until

HI = [{"role": "user", "content": "Anyone free?"}]
MAX_ATTEMPTS = 3


@pytest.fixture(scope="module")
def catalog(
    e2e_database: str,
    simulator: SimulatorHandle,
    faulty_simulator: SimulatorHandle,
    django_db_blocker: Any,
) -> None:
    from routing.catalog.config_file import apply_config, validate_config

    config = {
        "deployments": [
            # Auth errors: its breaker opens at the first call.
            {"name": "fc-broken", "upstream": "faulty", "model": "auth"},
            # Always "at capacity" with no hint of when; the breaker stays out of the way.
            {"name": "fc-busy", "upstream": "faulty", "model": "t1", "breaker_threshold": 0},
            # The simulator's `tiny` takes nothing; configured for 16 at a time.
            {
                "name": "fc-tiny",
                "upstream": "simulator",
                "model": "tiny",
                "max_concurrency": 16,
                "breaker_threshold": 0,
            },
        ],
        "routes": [
            {"name": "fc-mixed", "chain": ["fc-broken", "fc-busy"]},
            {"name": "fc-tiny", "chain": ["fc-tiny"], "max_attempts": MAX_ATTEMPTS},
        ],
        "applications": [{"slug": "fullchain", "team": "demo", "routes": ["fc-mixed", "fc-tiny"]}],
    }
    with django_db_blocker.unblock():
        apply_config(validate_config(config))


def _call(gateway: GatewayHandle, key: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}", "x-sluice-max-wait": "3"},
        json={"model": model, "messages": HI},
        timeout=30,
    )


def test_an_open_breaker_does_not_set_the_wait_while_another_deployment_is_only_busy(
    gateway: GatewayHandle, catalog: None, issue_key
):
    key = issue_key(application="fullchain").plaintext
    # The first call opens fc-broken's breaker (auth), the catalog may take a moment.
    first = wait_until(lambda: (r := _call(gateway, key, "fc-mixed")).status_code != 404 and r)
    assert first.status_code == 503
    answer = _call(gateway, key, "fc-mixed")
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "capacity_exhausted"
    # The busy deployment said nothing of when: the configured capacity wait (5 s), not
    # the breaker's time left (up to minutes).
    assert int(answer.headers["retry-after"]) <= 5


def test_one_call_makes_a_bounded_number_of_attempts_on_a_full_provider(
    gateway: GatewayHandle, catalog: None, issue_key
):
    key = issue_key(application="fullchain").plaintext
    answer = wait_until(lambda: (r := _call(gateway, key, "fc-tiny")).status_code != 404 and r)
    assert answer.status_code == 503
    assert 1 <= int(answer.headers["x-sluice-attempts"]) <= 2 * MAX_ATTEMPTS
