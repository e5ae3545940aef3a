"""Calls naming models that do not exist cannot grow what Sluice keys on a name: /metrics,
the usage rollups and the usage report by route keep one `unknown` route for all of them,
and every refused call (unknown model, forbidden model) counts against the key's requests
per minute, so a key's limit turns a flood of them into 429s."""

import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support import GatewayHandle, wait_until

MESSAGES = [{"role": "user", "content": "hi"}]
CALLS = 400


def _post(client: httpx.Client, gateway: GatewayHandle, key: str, model: str) -> httpx.Response:
    return client.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": model, "messages": MESSAGES},
        timeout=30,
    )


def _route_labels(gateway: GatewayHandle) -> tuple[set[str], int]:
    text = httpx.get(f"{gateway.url}/metrics", timeout=30).text
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    return {s.labels["route"] for s in samples if "route" in s.labels}, len(samples)


def test_random_model_names_leave_metrics_rollups_and_the_report_bounded(
    gateway, issue_key, committed_db
) -> None:
    from quotas.models import DailyUsageRollup, UsageRollup
    from routing.models import Route

    key = issue_key()
    routes = set(Route.objects.values_list("name", flat=True))
    _, series_before = _route_labels(gateway)
    with httpx.Client() as client, ThreadPoolExecutor(8) as pool:
        names = [f"no-such-{uuid.uuid4().hex}" for _ in range(CALLS)]
        answers = list(pool.map(lambda m: _post(client, gateway, key.plaintext, m), names))
        forbidden = _post(client, gateway, key.plaintext, "secret")  # a route, not the app's
    assert Counter(a.status_code for a in answers) == {404: CALLS}
    assert {a.json()["error"]["code"] for a in answers} == {"model_not_found"}
    assert forbidden.status_code == 403

    def rolled_up() -> list[str] | None:
        rows = list(UsageRollup.objects.filter(key_prefix=key.prefix))
        return [r.route for r in rows] if sum(r.requests for r in rows) == CALLS + 1 else None

    hourly = wait_until(rolled_up)
    assert sorted(hourly) == ["secret", "unknown"]  # one row each, not one per name
    daily = DailyUsageRollup.objects.filter(key_prefix=key.prefix)
    assert sorted(daily.values_list("route", flat=True)) == ["secret", "unknown"]
    labels, series_after = wait_until(
        lambda: (found := _route_labels(gateway))[0] >= {"unknown"} and found
    )
    assert labels <= routes | {"unknown", ""}  # no label is a name a client made up
    assert series_after - series_before < 50  # a handful of new series, not CALLS of them


def test_refused_calls_count_against_the_keys_requests_per_minute(
    gateway, issue_key, committed_db, call_record
) -> None:
    from quotas.services import limit_set

    key = issue_key()
    limit_set(scope="key", name=key.prefix, requests_per_minute=20)
    with httpx.Client() as client:
        answers = [
            _post(client, gateway, key.plaintext, f"no-such-{uuid.uuid4().hex}") for _ in range(15)
        ]
        answers += [_post(client, gateway, key.plaintext, "secret") for _ in range(5)]
        refused = [
            _post(client, gateway, key.plaintext, f"no-such-{uuid.uuid4().hex}") for _ in range(5)
        ]
        real = _post(client, gateway, key.plaintext, "fast")
    assert [a.status_code for a in answers] == [404] * 15 + [403] * 5
    assert answers[-1].headers["x-ratelimit-remaining-requests"] == "0"
    assert {r.status_code for r in refused} == {429}
    assert refused[0].json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(refused[0].headers["retry-after"]) <= 61
    assert real.status_code == 429  # the limit is spent: by refused calls too
    record = call_record(refused[0].headers["x-sluice-request-id"])
    assert (record.outcome, record.status_code) == ("rate_limited", 429)


def test_a_refused_call_when_limits_cannot_be_counted_is_a_503_not_a_500(
    e2e_database: str, issue_key, committed_db
) -> None:
    """Redis away and quotas failing closed: counting a refused call's request is refused
    the way every limit is then (503 limits_unavailable), never a 500."""
    from quotas.services import limit_set
    from tests.support import free_port, start_gateway

    key = issue_key()
    limit_set(scope="key", name=key.prefix, requests_per_minute=100)
    env = {
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        "SLUICE_QUOTAS_WHEN_REDIS_DOWN": "closed",
    }
    runs = start_gateway(e2e_database, extra_env=env)
    gateway = next(runs)
    try:
        with httpx.Client() as client:
            answer = _post(client, gateway, key.plaintext, f"no-such-{uuid.uuid4().hex}")
    finally:
        next(runs, None)
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "limits_unavailable"
