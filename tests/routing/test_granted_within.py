"""A waiter's wait for its grant keeps a cancellation that arrives with the grant: the
caller (a client that left, a worker shutting down) is cancelled, not handed the slot."""

import asyncio

import pytest

from routing.deployment_state.interface import granted_within


async def test_a_cancellation_that_arrives_with_the_grant_is_not_lost():
    granted = asyncio.get_running_loop().create_future()
    waiting = asyncio.create_task(granted_within(granted, 5))
    await asyncio.sleep(0)  # it waits now
    granted.set_result(None)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert granted.done()  # the grant stays, for the caller's cleanup to release


async def test_a_grant_within_the_time_is_seen_and_none_after_it():
    granted = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(0.01, granted.set_result, None)
    assert await granted_within(granted, 5) is True
    assert await granted_within(asyncio.get_running_loop().create_future(), 0.01) is False
    assert await granted_within(None, 5) is False
