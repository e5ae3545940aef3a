"""The budget alert: its hysteresis rules on made-up forecasts, and a real evaluation over
the rollups posting to a local webhook receiver (one alert on crossing, one clear, no
repeat), with the in-process store and with the Redis one several workers share."""

import os
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from quotas.forecast import INSUFFICIENT, RECENT, Forecast
from quotas.models import Limit, Scope, UsageRollup
from routing.observability.budget_alert import (
    LocalBudgetAlertStore,
    RedisBudgetAlertStore,
    Watched,
    budget_alert_check,
    budget_transitions,
)
from tests.support.webhook import Webhook, start_webhook

RULES = {"thresholds": (0.8, 1.0), "margin": 0.05}
JUNE = date(2026, 6, 1)


def watched(share: float | None, *, period: date = JUNE, budget: float = 100.0) -> Watched:
    forecast = Forecast(
        period_start=period,
        spent=10.0,
        budget=budget,
        basis=INSUFFICIENT if share is None else RECENT,
        days_used=14,
        projected=None if share is None else share * budget,
        runs_out_on=date(2026, 6, 24) if share and share >= 1 else None,
        daily_rate=3.0,
    )
    return Watched("7:cost_per_month", "team", "acme", "cost_per_month", forecast)


def step(share: float | None, levels: dict, **kw) -> list[tuple[str, float, float]]:
    """Evaluate once and remember the outcome, as budget_alert_check does."""
    w = watched(share, **kw)
    changes = budget_transitions([w], levels, **RULES)
    for c in changes:
        levels[w.key] = (w.period, c.level)
    return [(c.kind, c.line, c.level) for c in changes]


def test_each_line_alerts_once_and_clears_once_below_it_by_the_margin():
    levels: dict = {}
    assert step(0.5, levels) == []
    assert step(0.82, levels) == [("alert", 0.8, 0.8)]
    assert step(0.9, levels) == []  # still past 80 %: no second message
    assert step(1.1, levels) == [("alert", 1.0, 1.0)]  # a higher line: one more
    assert step(0.97, levels) == []  # under 100 % but within the margin
    assert step(0.94, levels) == [("cleared", 1.0, 0.8)]  # back under 100 %, still past 80 %
    assert step(0.78, levels) == []
    assert step(0.74, levels) == [("cleared", 0.8, 0.0)]
    assert step(0.74, levels) == []


def test_crossing_both_lines_at_once_sends_one_alert_and_no_data_changes_nothing():
    levels: dict = {}
    assert step(None, levels) == []  # not enough data yet: no alert
    assert step(1.5, levels) == [("alert", 1.0, 1.0)]
    assert step(None, levels) == []  # held, not cleared


def test_a_new_month_starts_with_nothing_alerting():
    levels: dict = {}
    assert step(1.2, levels) == [("alert", 1.0, 1.0)]
    assert step(1.2, levels, period=date(2026, 7, 1)) == [("alert", 1.0, 1.0)]


def test_the_text_names_the_budget_the_projection_and_the_day_it_runs_out():
    (change,) = budget_transitions([watched(1.25)], {}, **RULES)
    text = change.text()
    assert "team `acme`" in text and "monthly spend" in text
    assert "$125.00 of its $100.00 budget (125%)" in text and "2026-06-24" in text
    (back,) = budget_transitions([watched(0.5)], {"7:cost_per_month": ("2026-06-01", 1.0)}, **RULES)
    assert back.kind == "cleared" and "back under the 100% line" in back.text()


@pytest.fixture
def receiver() -> Iterator[Webhook]:
    yield from start_webhook()


def _member_spending(tag: str) -> Limit:
    """A member who spent $10 on each of the last 20 days, with a $200 monthly budget: by
    the month's end (whatever day this runs) projected well past it."""
    from tests.console.people import make_people

    people = make_people(tag=tag)
    key = people.keys["member"]
    noon = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    for days_ago in range(1, 21):
        UsageRollup.objects.create(
            hour=noon - timedelta(days=days_ago),
            key_prefix=key.prefix,
            deployment="small",
            member_id=key.member_id,
            application_id=key.application_id,
            team_id=key.application.team_id,
            requests=1,
            cost=Decimal("10"),
        )
    return Limit.objects.create(scope=Scope.MEMBER, member=key.member, cost_per_month=200)


def _alert_cycle(
    limit: Limit, stores: list, receiver: Webhook, settings, *, pause: float = 0
) -> None:
    """Four evaluations, taken in turn by each store's worker."""
    settings.SLUICE_BUDGET_ALERT_WEBHOOK_URL = receiver.url
    turn = iter(stores * 4)

    def check() -> list[tuple[str, float]]:
        time.sleep(pause)  # the previous round's lock runs out
        return [(c.kind, c.line) for c in budget_alert_check(store=next(turn))]

    assert check() == [("alert", 1.0)]
    assert check() == []  # still over: no repeat
    limit.cost_per_month = 1000  # the budget raised: projected at about 30 % of it
    limit.save()
    assert check() == [("cleared", 1.0)]
    assert check() == []
    messages = receiver.messages
    assert len(messages) == 2, messages
    assert all(m["content_type"] == "application/json" for m in messages)
    assert all(set(m["json"]) == {"text"} for m in messages)  # Slack's and Teams' shape
    alert, clear = (m["json"]["text"] for m in messages)
    assert ":warning:" in alert and f"member `{limit.member.user.email}`" in alert
    assert "of its $200.00 budget" in alert and "past the 100% line" in alert
    assert ":white_check_mark:" in clear and "of its $1,000.00 budget" in clear


@pytest.mark.django_db
def test_a_crossing_posts_one_alert_and_one_clear_to_a_real_webhook(receiver, settings):
    limit = _member_spending("ba")
    _alert_cycle(limit, [LocalBudgetAlertStore()], receiver, settings)


@pytest.mark.django_db
def test_workers_sharing_redis_send_each_message_once(receiver, settings):
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    settings.SLUICE_BUDGET_ALERT_EVERY_SECONDS = 0.01  # the lock lasts 8 ms
    prefix = f"test-budget-{uuid.uuid4().hex[:8]}"
    first, second = RedisBudgetAlertStore(url, prefix), RedisBudgetAlertStore(url, prefix)
    limit = _member_spending("br")
    try:
        assert second.lock(5.0)  # another worker holds this round: this one skips it
        assert budget_alert_check(store=first) == []
        second._redis.delete(f"{prefix}:budget_alert:lock")
        _alert_cycle(limit, [first, second], receiver, settings, pause=0.05)
    finally:
        first._redis.delete(f"{prefix}:budget_alert:lock", f"{prefix}:budget_alert:levels")


def test_the_gateways_lifespan_runs_the_alert_once_across_workers(
    e2e_database, receiver, committed_db
):
    """uvicorn (two workers on Redis) evaluates every 0.3 s: one alert, one clear, no
    repeat, for a budget whose data the test changes under it."""
    from tests.support import free_port, start_process, stop_process, wait_until

    tag = uuid.uuid4().hex[:6]
    limit = _member_spending(f"e2e-{tag}")
    email = limit.member.user.email
    port = free_port()
    workers = 2 if os.environ.get("REDIS_URL") else 1
    env = os.environ | {
        "DATABASE_URL": e2e_database,
        "SLUICE_SECRET_KEY": "test-" + uuid.uuid4().hex,
        "SLUICE_REDIS_PREFIX": f"test-{tag}",
        "SLUICE_BUDGET_ALERT_WEBHOOK_URL": receiver.url,
        "SLUICE_BUDGET_ALERT_EVERY_SECONDS": "0.3",
    }
    args = ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    uvicorn = [sys.executable, "-m", "uvicorn", "config.asgi:application", *args]
    proc = start_process(
        [*uvicorn, "--no-access-log", "--log-level", "warning"],
        url=f"http://127.0.0.1:{port}/healthz",
        env=env,
    )

    def mine(word: str) -> list[str]:
        texts = [m["json"]["text"] for m in receiver.messages]
        return [t for t in texts if f"`{email}`" in t and word in t]

    try:
        wait_until(lambda: mine(":warning:"), timeout=15)
        limit.cost_per_month = 1000
        limit.save()
        wait_until(lambda: mine(":white_check_mark:"), timeout=15)
        time.sleep(1.5)  # more rounds of every worker: still one message of each
        assert len(mine(":warning:")) == 1 and len(mine(":white_check_mark:")) == 1
    finally:
        stop_process(proc)
        UsageRollup.objects.filter(member_id=limit.member_id).delete()
        limit.member.user.delete()
