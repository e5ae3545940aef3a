"""GET /metrics: Prometheus text from the calls the audit writer sees and the shared
deployment state; guarded by a bearer token, or loopback only; right with several workers."""

import os
import sys
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from routing.observability.audit import AttemptLog, CallLog
from routing.observability.metrics import Counts, _families, metrics_allowed
from tests.support import free_port, start_process, stop_process, wait_until


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _render(counts: Counts) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    class Fixed:
        def collect(self):
            return _families(dict(counts.values))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())
    return generate_latest(registry).decode()


def test_a_call_counts_by_route_deployment_outcome_priority_and_attempt_class(monkeypatch):
    import routing.observability.metrics as metrics

    counts = Counts()
    monkeypatch.setattr(metrics, "_local", counts)
    call = CallLog(request_id="r1", endpoint="chat/completions", client_ip=None)
    call.route, call.served_deployment, call.priority = "smart", "small", "batch"
    call.tokens_in, call.tokens_out, call.latency_ms, call.queue_ms = 7, 11, 300.0, 20.0
    call.attempts = [
        AttemptLog(number=1, deployment="big", started_at=call.created_at, error_class="capacity"),
        AttemptLog(number=2, deployment="medium", started_at=call.created_at, skipped="breaker"),
        AttemptLog(number=3, deployment="small", started_at=call.created_at),
    ]
    metrics.metrics_record(call)
    metrics.metrics_record(call)
    s = _samples(_render(counts))
    calls = (
        ("deployment", "small"),
        ("outcome", "success"),
        ("priority", "batch"),
        ("route", "smart"),
    )
    assert s[("sluice_calls_total", calls)] == 2
    assert (
        s[("sluice_upstream_attempts_total", (("deployment", "big"), ("error_class", "capacity")))]
        == 2
    )
    assert (
        "sluice_upstream_attempts_total",
        (("deployment", "medium"), ("error_class", "none")),
    ) not in s
    assert (
        s[
            (
                "sluice_tokens_total",
                (("deployment", "small"), ("direction", "out"), ("route", "smart")),
            )
        ]
        == 22
    )
    latency = "sluice_call_latency_seconds"
    assert s[(f"{latency}_bucket", (("le", "0.25"), ("priority", "batch")))] == 0
    assert s[(f"{latency}_bucket", (("le", "0.5"), ("priority", "batch")))] == 2
    assert s[(f"{latency}_count", (("priority", "batch"),))] == 2
    assert s[(f"{latency}_sum", (("priority", "batch"),))] == pytest.approx(0.6)
    assert s[("sluice_queue_wait_seconds_bucket", (("le", "0.05"), ("priority", "batch")))] == 2


def test_access_needs_the_token_when_set_else_a_loopback_client(settings):
    settings.SLUICE_METRICS_TOKEN = ""
    assert metrics_allowed({"client": ("127.0.0.1", 5000), "headers": []}) == 200
    assert metrics_allowed({"client": ("::1", 5000), "headers": []}) == 200
    assert metrics_allowed({"client": ("10.0.0.8", 5000), "headers": []}) == 403
    settings.SLUICE_METRICS_TOKEN = "s3cret"
    bearer = [(b"authorization", b"Bearer s3cret")]
    assert metrics_allowed({"client": ("10.0.0.8", 1), "headers": bearer}) == 200
    assert metrics_allowed({"client": ("127.0.0.1", 1), "headers": []}) == 401
    wrong = [(b"authorization", b"Bearer nope")]
    assert metrics_allowed({"client": ("127.0.0.1", 1), "headers": wrong}) == 401


def test_metrics_end_to_end_add_up_across_workers(e2e_database, issue_key, committed_db):
    """Two workers with Redis (one without): the calls all workers served add up on every
    scrape, and the deployment gauges are there."""
    key = issue_key()
    port = free_port()
    workers = 2 if os.environ.get("REDIS_URL") else 1
    env = os.environ | {
        "DATABASE_URL": e2e_database,
        "SLUICE_SECRET_KEY": "test-" + uuid.uuid4().hex,
        "SLUICE_REDIS_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
        "SLUICE_METRICS_TOKEN": "scrape-token",
    }
    args = [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    proc = start_process(
        [sys.executable, "-m", "uvicorn", "config.asgi:application", *args],
        url=f"http://127.0.0.1:{port}/healthz",
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert httpx.get(f"{base}/metrics").status_code == 401
        body = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(12):  # a new connection each: spread over the workers
            r = httpx.post(
                f"{base}/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {key.plaintext}"},
            )
            assert r.status_code == 200

        def scraped() -> dict | None:
            r = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer scrape-token"})
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/plain")
            s = _samples(r.text)
            mine = sum(
                v
                for (name, labels), v in s.items()
                if name == "sluice_calls_total"
                and dict(labels).get("route") == "fast"
                and dict(labels).get("outcome") == "success"
            )
            return s if mine >= 12 else None

        s = wait_until(scraped, timeout=10)
        mine = sum(
            v
            for (name, labels), v in s.items()
            if name == "sluice_calls_total" and dict(labels).get("route") == "fast"
        )
        assert mine == 12  # no call counted twice by two workers
        assert s[("sluice_deployment_configured_limit", (("deployment", "small"),))] > 0
        assert (
            "sluice_deployment_breaker_state",
            (("deployment", "small"), ("state", "closed")),
        ) in s
        assert ("sluice_deployment_waiting", (("deployment", "small"), ("priority", "batch"))) in s
    finally:
        stop_process(proc)
