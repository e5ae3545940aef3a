"""The in-process state grants a slot at once when nothing is to be weighed (nobody waits,
slots free beyond the headroom, batch under its cap): the same grant the fair-share pass
makes. Checked against that pass alone on random traffic: every admission and the whole
state after each step must match."""

import asyncio
import random

import pytest

from routing.deployment_state import Limits, Result
from routing.deployment_state.local import LocalDeploymentState
from routing.deployment_state.slot_policy import BATCH, INTERACTIVE, Claim

T0 = 1_800_000_000.0


class _FairSharePassOnly(LocalDeploymentState):
    def _free_for(self, d, limits, waiter, now) -> bool:  # type: ignore[no-untyped-def]
        return False


def _state(s: LocalDeploymentState) -> tuple:
    """Everything a grant touches, per deployment (the waiters' futures aside)."""
    return tuple(
        (
            name,
            d.mode,
            d.limit,
            sorted(d.slots.items()),
            sorted(d.held.items(), key=lambda kv: kv[0]),
            sorted(d.waiting),
            {p: {m: list(q) for m, q in members.items()} for p, members in d.queues.items()},
            sorted(d.service.items()),
            sorted(d.demand.items()),
            sorted(d.budget.items()),
            sorted(d.preempting),
        )
        for name, d in sorted(s._deployments.items())
    )


async def _replay(state: LocalDeploymentState, seed: int) -> list:
    rng = random.Random(seed)
    limits = Limits(max_concurrency=rng.choice([1, 3, 8, 20]), threshold=0, lease=30, reserve=0.25)
    now, held, queued, seen = T0, [], [], []
    for step in range(300):
        now += rng.choice([0.0005, 0.01, 0.3])
        roll = rng.random()
        if roll < 0.55 or not (held or queued):
            slot = f"s{step}"
            claim = Claim(
                rng.choice([INTERACTIVE, INTERACTIVE, BATCH]),
                rng.choice(["ann", "bob", "cy", "loud"]),
                rng.choice([50.0, 400.0]),
                wait=1.0,
                preemptible=rng.random() < 0.5,
            )
            admission = await state.acquire_slot(
                "d",
                limits,
                slot,
                retry=False,
                claim=claim,
                wait_until=now + rng.choice([0.0, 2.0]),
                deadline=rng.choice([None, now + 5.0]),
                now=now,
            )
            seen.append(admission)
            if admission.admitted:
                held.append(slot)
            elif admission.queued:
                queued.append(slot)
        elif held and (roll < 0.9 or not queued):
            slot = held.pop(rng.randrange(len(held)))
            result = rng.choice([Result.SUCCESS, Result.SUCCESS, Result.CAPACITY])
            seen.append(await state.release("d", limits, slot, result, now=now))
        else:
            slot = queued.pop(rng.randrange(len(queued)))
            departure = await state.leave("d", limits, slot, now=now)
            seen.append(departure)
            if departure.granted:
                held.append(slot)
        seen.append(_state(state))
    return seen


@pytest.mark.parametrize("seed", range(40))
def test_the_shortcut_grants_what_the_fair_share_pass_grants(seed: int) -> None:
    with_shortcut = asyncio.run(_replay(LocalDeploymentState(), seed))
    pass_only = asyncio.run(_replay(_FairSharePassOnly(), seed))
    assert with_shortcut == pass_only
