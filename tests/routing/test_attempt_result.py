"""The table of routing/request_path/attempt_result.py, case by case, and what the deployment state
does with each row (both backends)."""

import uuid

import pytest

from routing.deployment_state import Limits, Result
from routing.request_path.attempt_result import attempt_result
from routing.request_path.classify import ErrorClass

CASES = [
    (None, False, Result.SUCCESS),
    (ErrorClass.CAPACITY, False, Result.CAPACITY),
    (ErrorClass.RATE_LIMIT, False, Result.CAPACITY),
    (ErrorClass.SERVER_ERROR, False, Result.FAILURE),
    (ErrorClass.CONNECTION, False, Result.FAILURE),
    (ErrorClass.MALFORMED, False, Result.FAILURE),
    (ErrorClass.CONNECT_TIMEOUT, False, Result.FAILURE),  # the upstream's own timeout
    (ErrorClass.READ_TIMEOUT, False, Result.FAILURE),
    (ErrorClass.AUTH_CONFIG, False, Result.MISCONFIGURED),
    (ErrorClass.BAD_REQUEST, False, Result.NEUTRAL),
    (ErrorClass.CONTEXT_LENGTH, False, Result.NEUTRAL),
    (ErrorClass.READ_TIMEOUT, True, Result.DEADLINE),  # the call's own deadline cut it
    (ErrorClass.CONNECT_TIMEOUT, True, Result.DEADLINE),
]


@pytest.mark.parametrize(("error_class", "cut", "result"), CASES)
def test_every_way_an_attempt_ends_maps_to_one_result(error_class, cut, result):
    assert attempt_result(error_class, cut=cut) is result


def test_every_error_class_is_in_the_table():
    assert {c for c, _, _ in CASES if c is not None} == set(ErrorClass)


LIMITS = Limits(max_concurrency=1, threshold=3, cooldown=300)
T0 = 1_800_000_000.0


@pytest.mark.parametrize(
    ("result", "took", "opens"),
    [
        (Result.FAILURE, None, True),
        (Result.MISCONFIGURED, None, True),
        (Result.NEUTRAL, None, False),
        (Result.DEADLINE, 0.9, False),  # calls take 1 s: the deadline was short
        (Result.DEADLINE, 5.0, True),  # over 3 x what a call needs: the provider hung
        # At its floor (max_concurrency 1) the limit cannot be cut: capacity counts.
        (Result.CAPACITY, None, True),
    ],
)
async def test_what_opens_the_breaker_at_a_concurrency_the_provider_takes(
    state, result, took, opens
):
    name = f"dep-{uuid.uuid4().hex[:8]}"
    for i in range(5):  # calls of 1 s, one at a time
        assert (await state.acquire_slot(name, LIMITS, f"ok{i}", retry=False, now=T0 - 1)).admitted
        await state.release(name, LIMITS, f"ok{i}", Result.SUCCESS, took=1.0, now=T0)
    for i in range(3):  # three calls end so (once the breaker is open, no more are let in)
        if not (await state.acquire_slot(name, LIMITS, f"x{i}", retry=False, now=T0)).admitted:
            break
        await state.release(name, LIMITS, f"x{i}", result, took=took, now=T0)
    snapshot = await state.snapshot(name, LIMITS, now=T0)
    assert (snapshot.mode == "open") is opens
