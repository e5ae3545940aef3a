"""Admission's pure parts: the estimate, the ceilings, the refusals and their headers, and
the day and month boundaries in a team's time zone. No database, no network."""

import json
import math
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from accounts.authentication import Principal
from core.errors import GatewayError
from core.outcomes import Outcome
from quotas.limits import ScopeLimits, period_starts
from quotas.reservation import (
    _counters,
    _duration,
    _refusal,
    _tightest,
)
from routing.request_path.call_size import enforce_ceilings, estimated_tokens
from routing.request_path.payloads import ClientRequest, Endpoint, parse_request


def principal(**overrides: Any) -> Principal:
    fields: dict[str, Any] = {
        "key_id": 1,
        "prefix": "sk-abc123",
        "secret_hash": "x",
        "expires_at": None,
        "revoked": False,
        "member_id": 2,
        "member_email": "ada@example.com",
        "team_id": 3,
        "team_slug": "acme",
        "team_time_zone": "UTC",
        "application_id": 4,
        "application_slug": "nightly-summaries",
        "allowed_routes": frozenset({"smart"}),
        "default_priority": "normal",
        "fallback": "none",
        "default_max_tokens": 256,
        "max_tokens_ceiling": None,
        "clamp_max_tokens": False,
        "max_n": None,
    }
    return Principal(**(fields | overrides))


def chat(**fields: Any) -> tuple[ClientRequest, int]:
    raw = json.dumps(
        {"model": "smart", "messages": [{"role": "user", "content": "hi"}], **fields}
    ).encode()
    return parse_request(Endpoint.CHAT, raw), len(raw)


def scope(kind: str = "application", name: str = "nightly-summaries", **limits: Any) -> ScopeLimits:
    fields: dict[str, Any] = {
        "requests_per_minute": None,
        "tokens_per_minute": None,
        "max_concurrency": None,
        "tokens_per_day": None,
        "tokens_per_month": None,
        "cost_per_month": None,
    }
    return ScopeLimits(scope=kind, target=9, name=name, **(fields | limits))


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


# --- _duration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (1, "1s"),
        (59, "59s"),
        (60, "1m0s"),
        (61, "1m1s"),
        (360, "6m0s"),
        (3599, "59m59s"),
        (3600, "1h0m0s"),
        (3723, "1h2m3s"),
        (90_000, "25h0m0s"),
        (0.2, "1s"),
        (59.01, "1m0s"),
        (3722.5, "1h2m3s"),
        (-5, "0s"),
    ],
)
def test_duration(seconds, text):
    assert _duration(seconds) == text


# --- _tightest -----------------------------------------------------------------------------


def test_tightest_keeps_the_scope_with_the_least_left():
    headers: dict[str, str] = {}
    _tightest(headers, "tokens", 1000, 800, 30)
    assert headers == {
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "800",
        "x-ratelimit-reset-tokens": "30s",
    }
    _tightest(headers, "tokens", 100, 20, 45)  # tighter: replaces all three
    _tightest(headers, "tokens", 50, 30, 5)  # looser: ignored
    _tightest(headers, "tokens", 60, 20, 1)  # as tight: the first stays
    assert headers == {
        "x-ratelimit-limit-tokens": "100",
        "x-ratelimit-remaining-tokens": "20",
        "x-ratelimit-reset-tokens": "45s",
    }


def test_tightest_writes_large_numbers_in_full():
    headers: dict[str, str] = {}
    _tightest(headers, "tokens", 2_000_000, 1_234_567, 30)
    assert headers["x-ratelimit-limit-tokens"] == "2000000"
    assert headers["x-ratelimit-remaining-tokens"] == "1234567"


def test_tightest_kinds_are_separate_and_remaining_is_never_negative():
    headers: dict[str, str] = {}
    _tightest(headers, "requests", 60, 59, 60)
    _tightest(headers, "tokens", 1000, -5, 0.5)
    assert headers == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1m0s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "1s",
    }


# --- estimated_tokens ----------------------------------------------------------------------


def test_estimate_is_the_raw_size_over_four_plus_max_tokens():
    request, size = chat(max_tokens=50)
    assert estimated_tokens(principal(), request, size) == size // 4 + 1 + 50
    assert estimated_tokens(principal(), request, 400) == 101 + 50
    assert estimated_tokens(principal(), request, 3) == 1 + 50


def test_estimate_prefers_max_completion_tokens():
    request, _ = chat(max_tokens=50, max_completion_tokens=70)
    assert estimated_tokens(principal(), request, 400) == 101 + 70


def test_estimate_falls_back_on_the_applications_default():
    request, _ = chat()
    assert estimated_tokens(principal(default_max_tokens=300), request, 400) == 101 + 300


def test_estimate_multiplies_the_answer_by_n():
    request, _ = chat(max_tokens=50, n=3)
    assert estimated_tokens(principal(), request, 400) == 101 + 150
    request, _ = chat(n=2)
    assert estimated_tokens(principal(default_max_tokens=100), request, 400) == 101 + 200


@pytest.mark.parametrize("body", [{}, {"max_tokens": 5000}, {"max_completion_tokens": 5000}])
def test_estimate_is_capped_by_the_ceiling(body):
    request, _ = chat(n=2, **body)
    p = principal(default_max_tokens=4096, max_tokens_ceiling=1000)
    assert estimated_tokens(p, request, 400) == 101 + 2 * 1000


def test_estimate_under_the_ceiling_is_unchanged():
    request, _ = chat(max_tokens=10)
    assert estimated_tokens(principal(max_tokens_ceiling=1000), request, 400) == 111


def test_estimate_for_embeddings_is_the_prompt_only():
    raw = json.dumps({"model": "embed", "input": ["a", "b"]}).encode()
    request = parse_request(Endpoint.EMBEDDINGS, raw)
    assert estimated_tokens(principal(default_max_tokens=4096), request, 1000) == 251


def test_estimate_for_completions():
    raw = json.dumps({"model": "smart", "prompt": "x", "max_tokens": 20}).encode()
    request = parse_request(Endpoint.COMPLETIONS, raw)
    assert estimated_tokens(principal(), request, 40) == 11 + 20


# --- enforce_ceilings ----------------------------------------------------------------------


def test_n_above_max_n_is_refused():
    request, _ = chat(n=5)
    with pytest.raises(GatewayError) as info:
        enforce_ceilings(principal(max_n=4), request)
    error = info.value
    assert (error.status, error.param, error.type) == (400, "n", "invalid_request_error")
    assert "nightly-summaries" in error.message and "4" in error.message


def test_n_up_to_max_n_or_without_max_n_passes():
    request, _ = chat(n=4)
    enforce_ceilings(principal(max_n=4), request)
    request, _ = chat(n=100)
    enforce_ceilings(principal(), request)
    request, _ = chat()
    enforce_ceilings(principal(max_n=1), request)  # n defaults to 1


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
def test_over_the_ceiling_is_refused_without_clamping(name):
    request, _ = chat(**{name: 2000})
    with pytest.raises(GatewayError) as info:
        enforce_ceilings(principal(max_tokens_ceiling=1000), request)
    error = info.value
    assert (error.status, error.param) == (400, name)
    assert f"{name} up to 1000" in error.message
    assert request.body[name] == 2000


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
def test_over_the_ceiling_is_clamped_when_the_application_says_so(name):
    request, _ = chat(**{name: 2000})
    enforce_ceilings(principal(max_tokens_ceiling=1000, clamp_max_tokens=True), request)
    assert request.body[name] == 1000


def test_at_or_under_the_ceiling_is_left_alone():
    request, _ = chat(max_tokens=1000, max_completion_tokens=10)
    enforce_ceilings(principal(max_tokens_ceiling=1000, clamp_max_tokens=True), request)
    assert (request.body["max_tokens"], request.body["max_completion_tokens"]) == (1000, 10)
    enforce_ceilings(principal(max_tokens_ceiling=1000), request)
    request, _ = chat()
    enforce_ceilings(principal(max_tokens_ceiling=1000), request)
    assert "max_tokens" not in request.body


def test_no_ceiling_allows_anything():
    request, _ = chat(max_tokens=1_000_000)
    enforce_ceilings(principal(), request)
    assert request.body["max_tokens"] == 1_000_000


# --- _refusal ------------------------------------------------------------------------------

NOW = ts("2026-06-10T12:00:30+00:00")  # 30 s into a minute


def planned(limits: ScopeLimits, kind: str, *, tokens=20, cost=0.5, time_zone="UTC"):
    found = [c for c in _counters((limits,), time_zone, tokens, cost, NOW) if c.kind == kind]
    assert len(found) == 1
    return found[0]


def test_tokens_per_minute_refusal():
    counter = planned(scope(tokens_per_minute=60), "tpm")
    error = _refusal(counter, 50, 20, NOW)
    assert error.status == 429
    assert (error.type, error.code) == ("tokens", "rate_limit_exceeded")
    assert error.outcome == Outcome.RATE_LIMITED
    assert error.headers == {"Retry-After": "30"}
    assert error.message == (
        "application nightly-summaries: 60 tokens per minute; 50 used, this request needs "
        "up to 20. Resets in 30s."
    )


def test_a_request_that_can_never_fit_says_so():
    counter = planned(scope(tokens_per_minute=60), "tpm", tokens=100)
    error = _refusal(counter, 0, 100, NOW)
    assert error.message.startswith("application nightly-summaries: 60 tokens per minute;")
    assert "this request needs up to 100" in error.message
    assert error.message.endswith("It can never fit: ask for fewer max_tokens.")


def test_a_request_that_fits_later_does_not_say_never():
    counter = planned(scope(tokens_per_minute=60), "tpm", tokens=60)
    assert "never" not in _refusal(counter, 1, 60, NOW).message


@pytest.mark.parametrize(
    ("kind", "limits", "what", "wait"),
    [
        ("day", {"tokens_per_day": 10_000}, "10000 tokens per day", 12 * 3600 - 30),
        ("month", {"tokens_per_month": 500_000}, "500000 tokens per month", None),
    ],
)
def test_token_budget_refusals(kind, limits, what, wait):
    counter = planned(scope("team", "acme", **limits), kind)
    error = _refusal(counter, 9_990, 20, NOW)
    month_end = ts("2026-07-01T00:00:00+00:00")
    wait = wait if wait is not None else math.ceil(month_end - NOW)
    assert error.status == 429
    assert (error.type, error.code) == ("insufficient_quota", "budget_exceeded")
    assert error.outcome == Outcome.BUDGET_EXCEEDED
    assert error.headers == {"Retry-After": str(wait)}
    assert error.message == (
        f"team acme: {what}; 9990 used, this request needs up to 20. Resets in {_duration(wait)}."
    )


def test_large_token_budgets_are_written_in_full():
    counter = planned(scope("team", "acme", tokens_per_month=2_000_000), "month", tokens=1_500_000)
    error = _refusal(counter, 1_234_567, 1_500_000, NOW)
    assert error.message.startswith(
        "team acme: 2000000 tokens per month; 1234567 used, this request needs up to 1500000."
    )


def test_cost_refusal():
    counter = planned(scope("member", "ada@example.com", cost_per_month=5), "cost", cost=0.25)
    error = _refusal(counter, 4.9, 20, NOW)
    wait = math.ceil(ts("2026-07-01T00:00:00+00:00") - NOW)
    assert (error.status, error.type, error.code) == (429, "insufficient_quota", "budget_exceeded")
    assert error.outcome == Outcome.BUDGET_EXCEEDED
    assert error.headers == {"Retry-After": str(wait)}
    assert error.message == (
        "member ada@example.com: 5.00 USD per month; 4.9 used, this request needs up to "
        f"0.25. Resets in {_duration(wait)}."
    )
    never = planned(scope(cost_per_month=0.1), "cost", cost=0.25)
    assert _refusal(never, 0, 20, NOW).message.endswith(
        "It can never fit: ask for fewer max_tokens."
    )


def test_concurrency_refusal():
    counter = planned(scope("key", "sk-abc123", max_concurrency=2), "concurrency")
    error = _refusal(counter, 2, 20, NOW)
    # OpenAI's type for a 429, Sluice's reason as the code.
    assert (error.status, error.type, error.code) == (429, "requests", "concurrency_exceeded")
    assert error.outcome == Outcome.CONCURRENCY_LIMITED
    assert error.headers == {"Retry-After": "1"}
    assert error.message == (
        "key sk-abc123: 2 requests in flight; 2 are in flight. Retry when one finishes."
    )


def test_budget_resets_at_the_teams_local_midnight():
    counter = planned(scope(tokens_per_day=100), "day", time_zone="Asia/Tokyo")
    # 12:00:30 UTC is 21:00:30 in Tokyo: three hours to midnight, less 30 s.
    assert _refusal(counter, 90, 20, NOW).headers == {"Retry-After": str(3 * 3600 - 30)}


def test_retry_after_is_at_least_one_second():
    counter = planned(scope(tokens_per_minute=60), "tpm")
    assert _refusal(counter, 50, 20, counter.resets_at + 5).headers == {"Retry-After": "1"}


# --- period_starts -------------------------------------------------------------------------


def test_period_starts_in_utc():
    day, next_day, month, next_month = period_starts(ts("2026-06-10T12:00:00+00:00"), "UTC")
    assert day == datetime(2026, 6, 10, tzinfo=UTC)
    assert next_day == datetime(2026, 6, 11, tzinfo=UTC)
    assert month == datetime(2026, 6, 1, tzinfo=UTC)
    assert next_month == datetime(2026, 7, 1, tzinfo=UTC)


def test_berlin_spring_forward_day_lasts_23_hours():
    berlin = ZoneInfo("Europe/Berlin")
    day, next_day, month, next_month = period_starts(
        ts("2026-03-29T12:00:00+00:00"), "Europe/Berlin"
    )
    assert day == datetime(2026, 3, 29, tzinfo=berlin)
    assert day.timestamp() == ts("2026-03-28T23:00:00+00:00")
    assert next_day.timestamp() == ts("2026-03-29T22:00:00+00:00")
    assert next_day.timestamp() - day.timestamp() == 23 * 3600
    assert month.timestamp() == ts("2026-02-28T23:00:00+00:00")
    assert next_month.timestamp() == ts("2026-03-31T22:00:00+00:00")
    assert next_month.timestamp() - month.timestamp() == 31 * 86_400 - 3600


def test_berlin_fall_back_day_lasts_25_hours():
    day, next_day, _, _ = period_starts(ts("2026-10-25T12:00:00+00:00"), "Europe/Berlin")
    assert next_day.timestamp() - day.timestamp() == 25 * 3600
    assert next_day.timestamp() == ts("2026-10-25T23:00:00+00:00")


def test_just_before_and_after_local_midnight_in_berlin():
    before = period_starts(ts("2026-03-28T22:59:59+00:00"), "Europe/Berlin")
    after = period_starts(ts("2026-03-28T23:00:00+00:00"), "Europe/Berlin")
    assert before[1] == after[0]
    assert after[0].timestamp() == ts("2026-03-28T23:00:00+00:00")


def test_tokyo_month_starts_before_utc_does():
    tokyo = ZoneInfo("Asia/Tokyo")
    day, next_day, month, next_month = period_starts(ts("2026-11-30T20:00:00+00:00"), "Asia/Tokyo")
    assert day == datetime(2026, 12, 1, tzinfo=tokyo)
    assert month == datetime(2026, 12, 1, tzinfo=tokyo)
    assert month.timestamp() == ts("2026-11-30T15:00:00+00:00")
    assert next_day == datetime(2026, 12, 2, tzinfo=tokyo)
    assert next_month == datetime(2027, 1, 1, tzinfo=tokyo)
    assert next_month.timestamp() == ts("2026-12-31T15:00:00+00:00")


def test_new_york_is_still_in_the_previous_month():
    new_york = ZoneInfo("America/New_York")
    day, next_day, month, next_month = period_starts(
        ts("2026-03-01T03:00:00+00:00"), "America/New_York"
    )
    assert day == datetime(2026, 2, 28, tzinfo=new_york)
    assert next_day == datetime(2026, 3, 1, tzinfo=new_york)
    assert month == datetime(2026, 2, 1, tzinfo=new_york)
    assert next_month == datetime(2026, 3, 1, tzinfo=new_york)


@pytest.mark.parametrize(
    "time_zone", ["UTC", "Europe/Berlin", "Asia/Tokyo", "America/New_York", "Asia/Kolkata"]
)
def test_periods_contain_now_for_every_hour_of_a_year(time_zone):
    start = ts("2026-01-01T00:30:00+00:00")
    for hour in range(0, 365 * 24, 7):
        now = start + hour * 3600
        day, next_day, month, next_month = period_starts(now, time_zone)
        assert day.timestamp() <= now < next_day.timestamp()
        assert month.timestamp() <= day.timestamp() < next_month.timestamp()
        assert next_day.timestamp() <= next_month.timestamp()
        assert 23 * 3600 <= next_day.timestamp() - day.timestamp() <= 25 * 3600
        assert (day.hour, day.minute, month.day) == (0, 0, 1)


def test_counter_keys_name_the_local_day_and_month():
    limits = scope(tokens_per_minute=10, tokens_per_day=100, tokens_per_month=1000)
    now = ts("2026-11-30T20:00:00+00:00")
    counters = {c.kind: c for c in _counters((limits,), "Asia/Tokyo", 5, 0.0, now)}
    assert counters["day"].check.key.endswith(":application:9:20261201:day")
    assert counters["month"].check.key.endswith(":application:9:20261201:month")
    assert counters["tpm"].check.key.endswith(f":application:9:{math.floor(now / 60)}:tpm")
    assert counters["day"].resets_at == ts("2026-12-01T15:00:00+00:00")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # Clamped: the client's own bytes say the ceiling too.
        (b'{"model":"r","max_tokens":9000,"messages":[]}', b'"max_tokens":1000'),
        # At or under it: the bytes stay as the client wrote them.
        (b'{"model":"r","max_tokens":900,"messages":[]}', b'"max_tokens":900'),
    ],
)
def test_a_body_passed_through_is_clamped_in_its_own_bytes_only_where_it_changed(raw, expected):
    from routing.request_path.protocols.anthropic_messages import ANTHROPIC
    from routing.request_path.protocols.native import native_bytes

    request = ANTHROPIC.parse(None, raw)
    enforce_ceilings(principal(max_tokens_ceiling=1000, clamp_max_tokens=True), request)
    assert request.native is not None
    assert expected in native_bytes(request.native, "up")
    assert request.native.overrides == ({"max_tokens": 1000} if b"9000" in raw else {})
