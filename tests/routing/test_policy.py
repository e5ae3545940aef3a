"""Deadlines, fallback policies and the waits between tries."""

import random
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounts.models import Fallback
from core.errors import GatewayError
from routing.catalog.specs import DeploymentSpec, RetryPolicy, RouteSpec, UpstreamSpec
from routing.deployment_state import Limits
from routing.request_path.policy import (
    backoff,
    deadline_for,
    eligible_chain,
    fallback_for,
    retry_wait,
)

POLICY = RetryPolicy(
    timeout=60, max_attempts=5, backoff_base=1.0, backoff_cap=30.0, retry_after_cap=30.0
)


def _deployment(name: str, tier: str) -> DeploymentSpec:
    upstream = UpstreamSpec("u", "http://127.0.0.1:1/v1", None, 5, 60)
    return DeploymentSpec(name, name, upstream, tier, 4, 1000, Decimal(0), Decimal(0), Limits(4))


ROUTE = RouteSpec(
    "smart",
    (
        _deployment("gpt-a", "large"),
        _deployment("claude-b", "large"),
        _deployment("mini", "small"),
    ),
    POLICY,
)


@given(retry=st.integers(min_value=0, max_value=100), seed=st.integers())
def test_backoff_stays_within_full_jitter_bounds(retry, seed):
    wait = backoff(retry, POLICY, random.Random(seed))
    assert 0 <= wait <= min(30.0, 2**retry)


def test_backoff_spreads_clients_that_failed_together():
    rng = random.Random(1)
    waits = [backoff(3, POLICY, rng) for _ in range(1000)]
    assert max(waits) <= 8
    assert 3 < sum(waits) / len(waits) < 5  # uniform over [0, 8]: mean 4
    assert len({round(w, 2) for w in waits}) > 500


@given(after=st.floats(min_value=0, max_value=30), retry=st.integers(0, 10))
def test_retry_after_within_the_cap_beats_the_computed_backoff(after, retry):
    assert retry_wait(retry, after, POLICY) == (after, "retry_after")


@given(after=st.floats(min_value=30.001, max_value=1e6), retry=st.integers(0, 10))
def test_retry_after_over_the_cap_falls_back_to_backoff(after, retry):
    wait, why = retry_wait(retry, after, POLICY)
    assert why == "backoff"
    assert 0 <= wait <= 30


def test_no_retry_after_means_backoff():
    assert retry_wait(0, None, POLICY, random.Random(0))[1] == "backoff"


@pytest.mark.parametrize(
    ("fallback", "names"),
    [
        (Fallback.ANY, ["gpt-a", "claude-b", "mini"]),
        (Fallback.SAME_TIER, ["gpt-a", "claude-b"]),
        (Fallback.NONE, ["gpt-a"]),
    ],
)
def test_fallback_policy_limits_the_chain(fallback, names):
    assert [d.name for d in eligible_chain(ROUTE, fallback)] == names


@pytest.mark.parametrize(
    ("default", "header", "expected"),
    [
        ("any", None, Fallback.ANY),
        ("none", None, Fallback.NONE),
        ("none", "any", Fallback.ANY),
        ("any", " Same-Tier ", Fallback.SAME_TIER),
        ("any", "none", Fallback.NONE),
    ],
)
def test_fallback_header_chooses_per_request(default, header, expected):
    assert fallback_for(application_default=default, requested=header) is expected


def test_unknown_fallback_header_is_a_400_naming_it():
    with pytest.raises(GatewayError) as caught:
        fallback_for(application_default="any", requested="sometimes")
    assert (caught.value.status, caught.value.param) == (400, "X-Sluice-Fallback")


@pytest.mark.parametrize(
    ("header", "expected"), [(None, 160.0), ("5", 105.0), ("0.5", 100.5), ("600", 160.0)]
)
def test_max_wait_header_only_shortens_the_deadline(header, expected):
    assert deadline_for(POLICY, header, now=100.0) == expected


@pytest.mark.parametrize(
    "header", ["soon", "-1", "0", "nan", "NaN", "inf", "1e9", "1e-300", "0.05", "", " ", "-0"]
)
def test_bad_max_wait_header_is_a_400(header):
    with pytest.raises(GatewayError) as caught:
        deadline_for(POLICY, header, now=0)
    assert (caught.value.status, caught.value.param) == (400, "X-Sluice-Max-Wait")
