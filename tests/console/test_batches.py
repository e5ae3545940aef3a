"""The console's Batches pages per role with Django's test client: who sees which
batches, the progress and window shown, cancel through the Batch API's own service (and
its admin action), and the capacity-weather suggestion set as an application's windows."""

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from django.test import Client

from accounts.models import AdminAction
from batches.models import Batch
from console.views_batches import window_in_zone
from tests.console.batch_data import make_batch
from tests.console.people import People, make_people

pytestmark = pytest.mark.django_db
ROLES = ("member", "other_member", "team_admin", "other_team_admin", "staff")


@pytest.fixture
def people() -> People:
    found = make_people(tag="bt")
    make_batch(found.keys["member"], "batch_alice", completed=3, failed=1, pending=6)
    make_batch(found.keys["member_peer"], "batch_bob", completed=1, pending=1)
    make_batch(found.keys["rival_member"], "batch_carl", completed=2, running=2)
    return found


def _client(people: People, role: str) -> Client:
    client = Client()
    client.force_login(people.users[role])
    return client


SEES = {
    "member": {"batch_alice"},
    "other_member": {"batch_carl"},
    "team_admin": {"batch_alice", "batch_bob"},
    "other_team_admin": {"batch_carl"},
    "staff": {"batch_alice", "batch_bob", "batch_carl"},
}


@pytest.mark.parametrize("role", ROLES)
def test_batches_page_lists_only_the_batches_in_scope(people: People, role: str) -> None:
    body = _client(people, role).get("/batches/").content.decode()
    for batch_id in ("batch_alice", "batch_bob", "batch_carl"):
        assert (f'data-batch="{batch_id}"' in body) == (batch_id in SEES[role]), (role, batch_id)
    assert 'data-testid="nav-batches"' in body


def test_batches_page_sends_anonymous_visitors_to_login(people: People) -> None:
    response = Client().get("/batches/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_progress_counts_completed_and_failed_of_total(people: People) -> None:
    body = _client(people, "member").get("/batches/").content.decode()
    assert 'data-completed="3" data-failed="1" data-total="10"' in body
    assert "width: 30.00%" in body and "width: 10.00%" in body
    assert "3 done · 1 failed of 10 (40%)" in body


def test_window_shown_with_whether_it_is_open(people: People) -> None:
    app = people.home_app
    app.batch_windows = "00:00-00:00"  # the whole day: open
    app.save()
    body = _client(people, "member").get("/batches/").content.decode()
    assert 'data-open="true"' in body and "00:00-00:00" in body
    hour = datetime.now(UTC).hour
    app.batch_windows = f"{(hour + 2) % 24:02d}:00-{(hour + 3) % 24:02d}:00"  # later: closed
    app.save()
    body = _client(people, "member").get("/batches/").content.decode()
    assert 'data-open="false"' in body and "closed now" in body


def test_empty_state_says_how_to_submit_a_batch(db: None) -> None:
    found = make_people(tag="empty")
    body = _client(found, "member").get("/batches/").content.decode()
    assert 'data-testid="empty"' in body
    assert "client.batches.create(" in body and "Batch API" in body


def test_sorted_and_paged_with_the_console_table(people: People) -> None:
    for n in range(30):
        make_batch(people.keys["member"], f"batch_many_{n:02d}", pending=1)
    client = _client(people, "member")
    first = client.get("/batches/?sort=id").content.decode()
    assert 'data-testid="pager"' in first and "Page 1 of 2" in first
    assert first.index("batch_alice") < first.index("batch_many_00")
    second = client.get("/batches/?sort=id&page=2").content.decode()
    assert "batch_many_29" in second and "batch_alice" not in second


@pytest.mark.parametrize(
    ("role", "status"),
    [
        ("member", 200),
        ("other_member", 404),
        ("team_admin", 200),
        ("other_team_admin", 404),
        ("staff", 200),
    ],
)
def test_batch_page_per_role(people: People, role: str, status: int) -> None:
    response = _client(people, role).get("/batches/batch_alice/")
    assert response.status_code == status
    if status == 200:
        body = response.content.decode()
        assert 'data-testid="count-completed">3<' in body
        assert 'data-testid="count-failed">1<' in body
        assert 'data-testid="count-open">6<' in body
        assert 'data-testid="outcome-pending">6<' in body


def test_member_may_not_open_a_team_mates_batch(people: People) -> None:
    assert _client(people, "member").get("/batches/batch_bob/").status_code == 404


@pytest.mark.parametrize(
    ("role", "batch_id", "status", "lands"),
    [
        ("member", "batch_alice", 302, True),
        ("member", "batch_bob", 404, False),  # a team-mate's
        ("other_member", "batch_alice", 404, False),
        ("team_admin", "batch_bob", 302, True),
        ("other_team_admin", "batch_alice", 404, False),
        ("staff", "batch_carl", 302, True),
    ],
)
def test_cancel_per_role(
    people: People, role: str, batch_id: str, status: int, lands: bool
) -> None:
    response = _client(people, role).post(f"/batches/{batch_id}/cancel/")
    assert response.status_code == status
    batch = Batch.objects.get(pk=batch_id)
    assert (batch.status == Batch.Status.CANCELLING) == lands
    logged = AdminAction.objects.filter(action="batch.cancel", object_repr=batch_id)
    assert logged.count() == (1 if lands else 0)
    if lands:
        row = logged.get()
        assert row.via == "console" and row.actor_id == people.users[role].pk
        assert row.before == {"status": "in_progress"} and row.after == {"status": "cancelling"}
        assert row.team_id == batch.application.team_id


def test_cancel_needs_post_and_csrf(people: People) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(people.users["member"])
    assert client.get("/batches/batch_alice/cancel/").status_code == 405
    assert client.post("/batches/batch_alice/cancel/").status_code == 403
    assert Batch.objects.get(pk="batch_alice").status == Batch.Status.IN_PROGRESS


def test_cancelling_a_finished_batch_says_why(people: People) -> None:
    Batch.objects.filter(pk="batch_alice").update(status=Batch.Status.COMPLETED)
    response = _client(people, "member").post("/batches/batch_alice/cancel/", follow=True)
    assert "is completed and can no longer be cancelled" in response.content.decode()
    assert not AdminAction.objects.filter(action="batch.cancel").exists()


def test_window_in_zone_writes_the_suggestion_in_the_teams_time_zone() -> None:
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)  # winter: Berlin UTC+1, New York UTC-5
    berlin, ny = ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York")
    assert window_in_zone(start_hour=1, hours=5, zone=berlin, to=berlin, now=now) == "01:00-06:00"
    assert window_in_zone(start_hour=1, hours=5, zone=berlin, to=ny, now=now) == "19:00-00:00"
    assert window_in_zone(start_hour=22, hours=5, zone=ZoneInfo("UTC"), to=berlin, now=now) == (
        "23:00-04:00"
    )


def _use(people: People, role: str, app_id: int, **extra: str):  # type: ignore[no-untyped-def]
    data = {"application": str(app_id), "start_hour": "1", "hours": "5", "zone": "UTC"} | extra
    return _client(people, role).post("/reports/weather/use/", data)


@pytest.mark.parametrize(
    ("role", "status", "lands"),
    [
        ("member", 403, False),
        ("other_member", 403, False),
        ("team_admin", 302, True),
        ("other_team_admin", 404, False),
        ("staff", 302, True),
    ],
)
def test_use_weather_window_per_role(people: People, role: str, status: int, lands: bool) -> None:
    response = _use(people, role, people.home_app.pk)
    assert response.status_code == status
    people.home_app.refresh_from_db()
    assert (people.home_app.batch_windows == "01:00-06:00") == lands
    logged = AdminAction.objects.filter(action="application.batch_windows")
    assert logged.count() == (1 if lands else 0)
    if lands:
        assert logged.get().after == {"batch_windows": "01:00-06:00"}
        assert response["Location"].startswith("/reports/weather/")


def test_use_weather_window_refuses_a_bad_suggestion(people: People) -> None:
    response = _use(people, "team_admin", people.home_app.pk, start_hour="25")
    assert response.status_code == 302
    people.home_app.refresh_from_db()
    assert people.home_app.batch_windows == ""


def test_weather_page_offers_use_for_each_application_in_scope(people: People) -> None:
    from django.utils import timezone

    from quotas.models import UsageRollup
    from routing.models import Deployment, Upstream

    upstream = Upstream.objects.create(name="w-up", base_url="http://127.0.0.1:9/v1")
    Deployment.objects.create(name="w-dep", upstream=upstream, model="m")
    key = people.keys["member"]
    UsageRollup.objects.create(
        hour=timezone.now().replace(minute=0, second=0, microsecond=0),
        key_prefix=key.prefix,
        deployment="w-dep",
        member_id=key.member_id,
        application_id=key.application_id,
        team_id=people.home.pk,
        requests=5,
        capacity_errors=1,  # one attempt: the weather has a quietest window to suggest
    )
    body = _client(people, "team_admin").get("/reports/weather/").content.decode()
    assert 'data-testid="use-window-form"' in body
    assert f"Use for {people.home_app.slug}" in body
    assert people.rival_app.slug not in body
    staff = _client(people, "staff").get("/reports/weather/").content.decode()
    assert people.rival_app.slug in staff and 'data-testid="use-window-application"' in staff


def test_application_form_sets_and_validates_batch_windows(people: People) -> None:
    client = _client(people, "team_admin")
    form = {
        "name": "Home app",
        "default_priority": "interactive",
        "fallback": "any",
        "default_max_tokens": 1024,
    }
    path = f"/applications/{people.home_app.slug}/"
    bad = client.post(path, form | {"batch_windows": "25:00-26:00"})
    assert bad.status_code == 200 and 'data-testid="error-batch_windows"' in bad.content.decode()
    good = client.post(path, form | {"batch_windows": "22:00-06:00,  1:00-2:00"})
    assert good.status_code == 302
    people.home_app.refresh_from_db()
    assert people.home_app.batch_windows == "22:00-06:00, 01:00-02:00"
    row = AdminAction.objects.get(action="application.update")
    assert row.after["batch_windows"] == "22:00-06:00, 01:00-02:00"
    assert 'value="22:00-06:00, 01:00-02:00"' in client.get(path).content.decode()
