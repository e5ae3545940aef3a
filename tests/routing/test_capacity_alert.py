"""The capacity alert: hysteresis rules, and end to end: the simulator's fault injection
makes a deployment answer "at capacity", a real gateway (two workers on Redis) posts one
message to a local webhook receiver, and one more when it recovers."""

import os
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from routing.catalog.selectors import CapacityShare
from routing.observability.capacity_alert import LocalAlertStore, capacity_alert_check, transitions
from tests.support import free_port, start_process, start_simulator, stop_process, wait_until
from tests.support.webhook import Webhook, start_webhook

RULES = {"threshold": 0.2, "minimum": 10, "recover_ratio": 0.5}


def test_crossing_alerts_once_and_recovery_needs_half_the_line():
    over = {"big": CapacityShare(attempts=20, capacity_errors=5)}  # 25 %
    (change,) = transitions(over, set(), **RULES)
    assert (change.deployment, change.kind) == ("big", "alert")
    assert transitions(over, {"big"}, **RULES) == []  # still over: no second message
    hovering = {"big": CapacityShare(attempts=20, capacity_errors=3)}  # 15 %: under, not clear
    assert transitions(hovering, {"big"}, **RULES) == []
    clear = {"big": CapacityShare(attempts=20, capacity_errors=2)}  # 10 %
    (back,) = transitions(clear, {"big"}, **RULES)
    assert back.kind == "recovered"
    assert transitions({}, {"big"}, **RULES)[0].kind == "recovered"  # no traffic at all


def test_too_few_attempts_never_alert():
    few = {"big": CapacityShare(attempts=9, capacity_errors=9)}
    assert transitions(few, set(), **RULES) == []


def test_message_text_is_slack_compatible_and_names_the_numbers():
    (change,) = transitions({"big": CapacityShare(40, 10)}, set(), **RULES)
    text = change.text(threshold=0.2, window=timedelta(minutes=5))
    assert "`big`" in text and "25.0% of 40 attempts" in text and "5 min" in text


@pytest.mark.django_db
def test_check_marks_the_store_and_sends_through_the_given_sender(settings):
    from django.utils import timezone

    from tests.console.people import make_people
    from tests.console.report_data import call, write

    people = make_people(tag="alert")
    now = timezone.now()
    write(
        [
            call(people.keys["member"], now, served="small", failed_on=(("big", "capacity"),))
            for _ in range(6)
        ]
    )
    settings.SLUICE_CAPACITY_ALERT_MIN_ATTEMPTS = 5
    settings.SLUICE_CAPACITY_ALERT_WEBHOOK_URL = "http://example.invalid/hook"
    sent: list[tuple[str, str]] = []
    store = LocalAlertStore()
    changes = capacity_alert_check(store=store, send=lambda url, text: sent.append((url, text)))
    assert [(c.deployment, c.kind) for c in changes] == [("big", "alert")]
    assert store.alerting() == {"big"}
    assert sent[0][0] == "http://example.invalid/hook" and "`big`" in sent[0][1]
    assert capacity_alert_check(store=store, send=lambda url, text: sent.append((url, text))) == []


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    yield from start_webhook()


@pytest.fixture(scope="module")
def alert_simulator():
    yield from start_simulator("--model", "alerty:16")


def test_alert_end_to_end_once_per_crossing_and_once_on_recovery(
    e2e_database, alert_simulator, webhook, issue_key, committed_db
):
    from accounts.models import Application
    from routing.models import Deployment, Route, RouteDeployment, Upstream

    tag = uuid.uuid4().hex[:6]
    upstream = Upstream.objects.create(name=f"alert-{tag}", base_url=f"{alert_simulator.url}/v1")
    deployment = Deployment.objects.create(
        name=f"alert-{tag}", upstream=upstream, model="alerty", breaker_threshold=1000
    )
    route = Route.objects.create(name=f"alert-{tag}", max_attempts=1)
    RouteDeployment.objects.create(route=route, deployment=deployment, position=0)
    Application.objects.get(slug="demo").routes.add(route)
    key = issue_key()

    port = free_port()
    workers = 2 if os.environ.get("REDIS_URL") else 1
    env = os.environ | {
        "DATABASE_URL": e2e_database,
        "SLUICE_SECRET_KEY": "test-" + uuid.uuid4().hex,
        "SLUICE_AUDIT_FLUSH_SECONDS": "0.05",
        "SLUICE_REDIS_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
        "SLUICE_CAPACITY_ALERT_WEBHOOK_URL": webhook.url,
        "SLUICE_CAPACITY_ALERT_EVERY_SECONDS": "0.3",
        "SLUICE_CAPACITY_ALERT_WINDOW_SECONDS": "4",
        "SLUICE_CAPACITY_ALERT_MIN_ATTEMPTS": "5",
    }
    args = ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    proc = start_process(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "config.asgi:application",
            *args,
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        url=f"http://127.0.0.1:{port}/healthz",
        env=env,
    )
    try:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        headers = {"Authorization": f"Bearer {key.plaintext}", "X-Sluice-Max-Wait": "1"}
        body = {"model": route.name, "messages": [{"role": "user", "content": "hi"}]}

        def call_until(status: int) -> None:
            # The catalog reaches the gateway's workers within a couple of seconds.
            wait_until(
                lambda: (
                    httpx.post(url, json=body, headers=headers, timeout=10).status_code == status
                ),
                timeout=15,
            )

        alert_simulator.set_faults("alerty", {"capacity": 1})
        call_until(503)
        for _ in range(8):
            assert httpx.post(url, json=body, headers=headers, timeout=10).status_code == 503

        def mine(kind: str) -> list[dict]:
            word = "at capacity" if kind == "alert" else "recovered"
            return [
                m
                for m in webhook.messages
                if f"`{deployment.name}`" in m["json"]["text"] and word in m["json"]["text"]
            ]

        wait_until(lambda: mine("alert"), timeout=15)
        alert = mine("alert")[0]
        assert alert["content_type"] == "application/json"
        assert "above the 20% alert line" in alert["json"]["text"]

        alert_simulator.set_faults("alerty", {})
        call_until(200)
        for _ in range(5):
            assert httpx.post(url, json=body, headers=headers, timeout=10).status_code == 200
        wait_until(lambda: mine("recovered"), timeout=20)
        time.sleep(1.5)  # more rounds of every worker: still one message of each
        assert len(mine("alert")) == 1
        assert len(mine("recovered")) == 1
    finally:
        alert_simulator.set_faults("alerty", {})
        stop_process(proc)
