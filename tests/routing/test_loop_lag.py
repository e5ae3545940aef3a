"""The event-loop lag probe: a loop held by a synchronous step shows in its figures and on
/metrics."""

import asyncio
import time

import pytest

from routing.observability import loop_lag
from routing.observability.metrics import metrics_text


async def test_a_blocked_loop_shows_as_lag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_lag, "lag", loop_lag.LoopLag())
    probe = asyncio.create_task(loop_lag.loop_lag_probe(interval=0.005))
    await asyncio.sleep(0.05)
    quiet = loop_lag.lag.largest
    asyncio.get_running_loop().call_soon(time.sleep, 0.04)  # a synchronous step holds it
    await asyncio.sleep(0.05)
    probe.cancel()
    assert quiet < 0.02
    assert loop_lag.lag.largest >= 0.035
    over_25_ms = sum(loop_lag.lag.counts[loop_lag.BUCKETS.index(0.025) + 1 :])
    assert over_25_ms >= 1


@pytest.mark.django_db
async def test_metrics_export_this_workers_lag(monkeypatch: pytest.MonkeyPatch) -> None:
    figures = loop_lag.LoopLag()
    figures.observe(0.003)
    figures.observe(0.2)
    monkeypatch.setattr("routing.observability.metrics.lag", figures)
    text = (await metrics_text()).decode()
    worker = loop_lag.worker_label()
    assert f'sluice_event_loop_lag_seconds_bucket{{le="0.005",worker="{worker}"}} 1.0' in text
    assert f'sluice_event_loop_lag_seconds_count{{worker="{worker}"}} 2.0' in text
    assert f'sluice_event_loop_lag_max_seconds{{worker="{worker}"}} 0.2' in text
