"""The runner looks at the batches when something happens, not only every second
(batches/runner.py): a batch created or cancelled (said on the change channel), a batch
validated, the last answers of a batch written."""

import asyncio
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from accounts.models import Application, Team
from batches import runner as runner_module
from batches import services
from batches.models import Batch, BatchFile
from batches.pacing import Room
from batches.runner import TICK, Runner, _Running
from batches.services import LineAnswer
from core.refresh import on_change


@pytest.fixture
def heard(monkeypatch):
    """The changes of kind `batches` said in this process."""
    said: list[str | None] = []
    monkeypatch.setattr("core.refresh._hooks", {})
    on_change(services.BATCHES, said.append)
    return said


def _input_file() -> BatchFile:
    team = Team.objects.create(slug="t", name="t")
    app = Application.objects.create(team=team, slug="a", name="a")
    return BatchFile.objects.create(
        id="file-1",
        application=app,
        purpose="batch",
        filename="in.jsonl",
        bytes=1,
        lines=1,
        storage_name="x",
        created_at=timezone.now(),
        expires_at=timezone.now() + timedelta(hours=1),
    )


@pytest.mark.django_db
def test_creating_and_cancelling_a_batch_tell_the_runners(
    heard, django_capture_on_commit_callbacks
) -> None:
    source = _input_file()
    principal = SimpleNamespace(
        application_id=source.application_id, member_id=None, prefix="sk-sluice-x"
    )
    with django_capture_on_commit_callbacks(execute=True):
        batch = services.batch_create(
            principal=principal,
            input_file_id=source.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata=None,
        )
    assert heard == [None]
    with django_capture_on_commit_callbacks(execute=True):
        services.batch_cancel(batch=batch)
    assert heard == [None, None]
    with django_capture_on_commit_callbacks(execute=True):
        services.batch_cancel(batch=Batch.objects.get(pk=batch.pk))  # cancelling already
    assert heard == [None, None]


async def test_a_change_makes_the_next_look_a_tick_at_once(monkeypatch) -> None:
    ticks: list[float] = []

    async def tick(self) -> None:
        ticks.append(asyncio.get_running_loop().time())

    monkeypatch.setattr(Runner, "tick", tick)
    monkeypatch.setattr(runner_module, "listen_for_changes", lambda: None)
    runner, stop = Runner(), asyncio.Event()
    running = asyncio.create_task(runner.run(stop))
    await asyncio.sleep(0.1)
    assert len(ticks) == 1  # the first look; the next one a second later
    runner_module._batches_changed(None)  # a batch created or cancelled somewhere
    await asyncio.sleep(0.1)
    stop.set()
    await running
    assert len(ticks) == 2
    assert ticks[1] - ticks[0] < TICK / 2


async def test_the_last_answers_of_a_batch_written_make_the_next_look_a_tick() -> None:
    runner = Runner()

    async def write(fn, **kwargs):
        return []  # every answer counted

    runner._db = write
    other = SimpleNamespace(done=lambda: True)
    runner.lines[2] = _Running(other, "batch_a", "m")  # type: ignore[arg-type]
    runner._answers.append(LineAnswer("batch_a", 1, "{}", False))
    await runner.write_ended()
    assert not runner._poked  # batch_a still has a line running here
    del runner.lines[2]
    runner._answers.append(LineAnswer("batch_a", 2, "{}", False))
    await runner.write_ended()
    assert runner._poked


def _looking_runner(monkeypatch, *, spare: int, taken: int, max_in_flight: int = 64) -> Runner:
    """A runner whose route `m` has `spare` slots for batch and `taken` calls there."""
    route = SimpleNamespace(name="m")

    async def routes():
        return {"m": route}

    async def room(_route):
        return Room(spare=spare, taken=taken)

    async def claim(self, batch, model, limit, *, lapsed):
        line = services.ClaimedLine(0, batch.id, 1, "c", model, 0, 1)
        return [(line, b"{}")] * limit  # as many as asked: more are left

    async def run_line(self, batch, line, raw):
        await asyncio.sleep(3600)

    monkeypatch.setattr(runner_module.catalog, "routes", routes)
    monkeypatch.setattr(runner_module, "route_room", room)
    monkeypatch.setattr(Runner, "_claim", claim)
    monkeypatch.setattr(Runner, "_run_line", run_line)
    runner = Runner(max_in_flight=max_in_flight)
    runner._models["batch_a"] = ["m"]
    return runner


@pytest.mark.parametrize(
    ("spare", "taken", "max_in_flight", "starved"),
    [
        (3, 0, 64, False),  # its own lines fill the room: their ends wake it
        (0, 6, 64, True),  # full, by others' calls too: room they free is not told
        (3, 1, 64, True),  # another call holds a slot there
        (3, 0, 4, True),  # room left unfilled (it may hold no more lines now): look again
    ],
)
async def test_a_look_is_repeated_soon_only_for_room_nothing_else_tells_of(
    monkeypatch, spare, taken, max_in_flight, starved
) -> None:
    runner = _looking_runner(monkeypatch, spare=spare, taken=taken, max_in_flight=max_in_flight)
    other = services.ClaimedLine(9, "batch_b", 1, "c", "x", 0, 1)
    runner._queued[("batch_b", "x")].extend([(other, b"{}")] * 2)  # held, queued for another
    batch = SimpleNamespace(id="batch_a")
    await runner._start_lines(batch, lapsed=False)  # type: ignore[arg-type]
    assert runner._starved is starved
    for running in runner.lines.values():
        running.task.cancel()
