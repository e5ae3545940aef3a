"""The console's pages through Django's test client: each page renders for its roles, the
flows work (key shown once, rotate, revoke, deactivate, limits, drain, config dry run and
apply, admin actions log), and out-of-scope objects answer 404, forbidden actions 403.
(The full per-role matrix and the browser flows are C12b's tests.)"""

import re
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import AdminAction, ApiKey, Member
from quotas.models import Limit
from routing.catalog.config_file import apply_config, load_config
from routing.models import Deployment
from tests.console.people import People, make_people

pytestmark = pytest.mark.django_db
DEMO = Path(__file__).resolve().parents[2] / "config" / "demo.toml"
PAGES = ["overview", "keys", "key_create", "usage", "limits", "deployments"]
MANAGER_PAGES = [
    "teams",
    "members",
    "member_create",
    "applications",
    "application_create",
    "actions",
]
STAFF_PAGES = ["team_create", "config"]


@pytest.fixture
def people() -> People:
    apply_config(load_config(DEMO))
    return make_people(tag="p")


def _client(people: People, role: str) -> Client:
    client = Client()
    client.force_login(people.users[role])
    return client


def test_anonymous_visitor_is_sent_to_the_login_page(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=/")
    page = client.get("/login/")
    assert page.status_code == 200 and b'data-testid="login-form"' in page.content


def test_login_with_email_and_password_lands_on_the_overview(people):
    user = people.users["member"]
    user.set_password("a-long-password")
    user.save()
    client = Client()
    response = client.post(
        "/login/", {"username": user.email, "password": "a-long-password"}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/"
    assert b'data-testid="capacity-board"' in response.content
    assert b'data-testid="role">Member' in response.content


@pytest.mark.parametrize("role", ["member", "team_admin", "staff"])
def test_every_page_of_a_role_renders(people, role):
    client = _client(people, role)
    pages = (
        PAGES
        + (MANAGER_PAGES if role != "member" else [])
        + (STAFF_PAGES if role == "staff" else [])
    )
    for name in pages:
        response = client.get(reverse(f"console:{name}"))
        assert response.status_code == 200, (name, response.status_code)
        assert b'data-testid="nav"' in response.content


@pytest.mark.parametrize(
    ("role", "forbidden"),
    [("member", MANAGER_PAGES + STAFF_PAGES), ("team_admin", STAFF_PAGES)],
)
def test_pages_above_a_role_answer_403(people, role, forbidden):
    client = _client(people, role)
    for name in forbidden:
        assert client.get(reverse(f"console:{name}")).status_code == 403, name


def test_the_board_partial_has_a_row_per_deployment(people):
    response = _client(people, "member").get("/board/")
    rows = re.findall(rb'data-testid="board-row" data-deployment="([^"]+)"', response.content)
    assert sorted(rows) == [b"big", b"claude", b"gpt-r", b"medium", b"small"]
    assert b"<html" not in response.content


def test_member_creates_a_key_and_sees_it_exactly_once(people):
    client = _client(people, "member")
    response = client.post(
        "/keys/new/", {"application": people.home_app.pk, "name": "laptop", "expires_days": "30"}
    )
    assert response.status_code == 200
    plaintext = re.search(
        rb'data-testid="new-key"[^>]*value="([^"]+)"|value="(sk-sluice-[^"]+)"', response.content
    )
    shown = re.findall(rb"sk-sluice-[0-9a-f]{12}-[A-Za-z0-9_-]{32,}", response.content)
    assert plaintext and len(set(shown)) == 1
    key = ApiKey.objects.get(name="laptop")
    assert key.member.user == people.users["member"]
    listing = client.get("/keys/").content
    assert key.prefix.encode() in listing and shown[0] not in listing
    assert AdminAction.objects.filter(action="key.create", via="console").exists()


def test_key_form_errors_are_shown_on_the_form(people):
    response = _client(people, "member").post(
        "/keys/new/", {"application": people.rival_app.pk, "expires_days": "0"}
    )
    assert response.status_code == 200
    assert b'data-testid="error-application"' in response.content
    assert b'data-testid="error-expires_days"' in response.content


def test_member_cannot_touch_another_members_key(people):
    client = _client(people, "member")
    peer = people.keys["member_peer"]
    assert client.post(f"/keys/{peer.prefix}/revoke/").status_code == 404
    assert client.get(f"/keys/{peer.prefix}/rotate/").status_code == 404
    assert peer.prefix.encode() not in client.get("/keys/").content


def test_team_admin_revokes_a_team_key_but_not_another_teams(people):
    client = _client(people, "team_admin")
    own = people.keys["member"]
    assert client.post(f"/keys/{own.prefix}/revoke/").status_code == 302
    own.refresh_from_db()
    assert own.revoked_at is not None
    rival = people.keys["rival_member"]
    assert client.post(f"/keys/{rival.prefix}/revoke/").status_code == 404


def test_rotate_with_grace_shows_the_new_key_and_keeps_the_old_one(people):
    client = _client(people, "member")
    old = people.keys["member"]
    response = client.post(f"/keys/{old.prefix}/rotate/", {"grace": "86400"})
    assert b'data-testid="rotated-old"' in response.content
    old.refresh_from_db()
    assert old.revoked_at is None and old.expires_at is not None
    assert ApiKey.objects.filter(member=old.member, revoked_at=None).count() == 2


def test_team_admin_adds_and_deactivates_a_member_of_their_team_only(people):
    client = _client(people, "team_admin")
    response = client.post(
        "/members/new/", {"email": "new-p@example.com", "team": people.rival.pk, "role": "member"}
    )
    assert b'data-testid="error-team"' in response.content  # not a choice for them
    client.post(
        "/members/new/", {"email": "new-p@example.com", "team": people.home.pk, "role": "member"}
    )
    new = Member.objects.get(user__email="new-p@example.com")
    assert new.team == people.home
    assert client.post(f"/members/{new.pk}/deactivate/").status_code == 302
    new.user.refresh_from_db()
    assert not new.user.is_active
    rival = Member.objects.get(user=people.users["other_member"])
    assert client.post(f"/members/{rival.pk}/deactivate/").status_code == 404


def test_limits_table_and_edit_with_validation(people):
    client = _client(people, "team_admin")
    response = client.post(
        "/limits/edit/",
        {"scope": "application", "name": people.home_app.slug, "requests_per_minute": "-1"},
    )
    assert b'data-testid="error-requests_per_minute"' in response.content
    client.post(
        "/limits/edit/",
        {
            "scope": "application",
            "name": people.home_app.slug,
            "requests_per_minute": "60",
            "tokens_per_day": "5000",
        },
    )
    limit = Limit.objects.get(application=people.home_app)
    assert (limit.requests_per_minute, limit.tokens_per_day) == (60, 5000)
    page = client.get("/limits/").content
    assert f'data-name="{people.home_app.slug}"'.encode() in page
    # A team admin may not set their team's own limit, nor touch another team's objects.
    team = {"scope": "team", "name": people.home.slug, "requests_per_minute": "1"}
    assert client.post("/limits/edit/", team).status_code == 403
    rival = {"scope": "application", "name": people.rival_app.slug}
    assert client.get("/limits/edit/", rival).status_code == 404
    assert _client(people, "member").get("/limits/edit/", rival).status_code == 404


def test_staff_drains_with_reason_and_the_board_shows_it(people):
    client = _client(people, "staff")
    response = client.post("/deployments/big/drain/", {"minutes": "15", "reason": "drill"})
    assert response.status_code == 302
    big = Deployment.objects.get(name="big")
    assert big.drain_reason == "drill" and big.drained_until
    board = client.get("/board/").content.decode()
    row = board[board.index('data-deployment="big"') :]
    assert 'data-testid="drained"' in row.split("</tr>")[0]
    client.post("/deployments/big/undrain/")
    assert Deployment.objects.get(name="big").drained_until is None
    assert (
        _client(people, "team_admin").post("/deployments/big/drain/", {"minutes": "5"}).status_code
        == 403
    )


def test_config_download_dry_run_then_apply(people):
    client = _client(people, "staff")
    exported = client.get("/config/export.toml")
    assert exported["Content-Disposition"].startswith("attachment;")
    text = exported.content.decode().replace("max_concurrency = 4", "max_concurrency = 5")
    dry = client.post("/config/upload/", {"text": text})
    assert b'data-kind="updated" data-section="deployments" data-name="big"' in dry.content
    assert Deployment.objects.get(name="big").max_concurrency == 4
    applied = client.post("/config/upload/", {"text": text, "apply": "1"})
    assert applied.status_code == 200
    assert Deployment.objects.get(name="big").max_concurrency == 5
    bad = client.post("/config/upload/", {"text": "[[teams]]\nslug = 1\n"})
    assert bad.status_code == 400 and b"Nothing was changed" in bad.content
    assert AdminAction.objects.filter(action="config.apply", via="console").count() == 1


def test_admin_actions_page_is_scoped_and_paged(people):
    staff = _client(people, "staff")
    staff.post("/deployments/big/drain/", {"minutes": "5", "reason": "drill"})
    _client(people, "team_admin").post(f"/keys/{people.keys['member'].prefix}/revoke/")
    page = staff.get("/actions/").content
    assert b'data-action="deployment.drain"' in page and b'data-action="key.revoke"' in page
    team_page = _client(people, "team_admin").get("/actions/").content
    assert b'data-action="key.revoke"' in team_page
    assert b'data-action="deployment.drain"' not in team_page


def test_usage_page_shows_the_members_limits_and_calls(people):
    from django.utils import timezone

    from routing.models import CallRecord

    member = Member.objects.get(user=people.users["member"])
    CallRecord.objects.create(
        request_id="req-usage-1",
        created_at=timezone.now(),
        member=member,
        endpoint="chat",
        requested_model="smart",
        served_deployment="medium",
        fell_back=True,
        outcome="success",
        status_code=200,
    )
    page = _client(people, "member").get("/usage/").content
    assert b'data-request-id="req-usage-1"' in page
    assert b'data-testid="served-model">medium' in page
    assert b"req-usage-1" not in _client(people, "other_member").get("/usage/").content


def test_capacity_alert_banner_on_every_page(people, settings):
    from datetime import timedelta

    from django.utils import timezone

    from routing.models import Attempt, CallRecord

    settings.SLUICE_CAPACITY_ALERT_MIN_ATTEMPTS = 5
    now = timezone.now() - timedelta(seconds=30)
    for i in range(10):
        call = CallRecord.objects.create(
            request_id=f"cap-{i}",
            created_at=now,
            endpoint="chat",
            outcome="success",
            status_code=200,
        )
        Attempt.objects.create(
            call=call,
            number=1,
            deployment="big",
            started_at=now,
            duration_ms=1,
            error_class="capacity" if i < 3 else "",
        )
    client = _client(people, "member")
    for url in ("/", "/keys/", "/usage/", "/alerts/"):
        assert b'data-testid="capacity-alert" data-deployment="big"' in client.get(url).content


def test_the_board_shows_live_slots_and_an_open_breaker(people):
    """The board reads the shared deployment state (in process here, Redis with REDIS_URL):
    a held slot shows as in flight, three calls failing with server errors open the breaker
    (capacity errors only cut the adaptive limit until it is at its floor)."""
    import asyncio

    from routing.catalog.selectors import limits_of
    from routing.deployment_state import Result, deployment_state
    from routing.deployment_state.slot_policy import Claim

    big = Deployment.objects.get(name="big")
    limits = limits_of(big)
    state = deployment_state()
    batch = Claim("batch", member="m", estimate=1.0, wait=0.0)

    async def hold_then_fail() -> None:
        await state.reset("big")
        await state.acquire_slot("big", limits, "held-1", retry=False, claim=batch)
        for i in range(3):
            await state.acquire_slot("big", limits, f"x-{i}", retry=False)
            await state.release("big", limits, f"x-{i}", Result.FAILURE)

    asyncio.run(hold_then_fail())
    try:
        page = _client(people, "member").get("/board/").content.decode()
        row = page[page.index('data-deployment="big"') :].split("</tr>")[0]
        assert 'data-testid="in-flight">1 (1)' in row
        assert "breaker-open" in row and "until" in row
    finally:
        asyncio.run(state.reset("big"))


def test_team_admin_cannot_deactivate_or_demote_a_staff_member_of_their_team(people):
    staff = people.users["staff"]
    staff_member = Member.objects.create(user=staff, team=people.home, role="admin")
    client = _client(people, "team_admin")
    assert client.post(f"/members/{staff_member.pk}/deactivate/").status_code == 403
    assert client.post(f"/members/{staff_member.pk}/", {"role": "member"}).status_code == 403
    staff.refresh_from_db()
    staff_member.refresh_from_db()
    assert staff.is_active and staff_member.role == "admin"


@pytest.mark.parametrize(
    "target",
    ["https://evil.example/", "//evil.example/x", "http://evil.example", "/\\evil.example"],
)
def test_drain_never_redirects_off_the_console(people, target):
    client = _client(people, "staff")
    response = client.post(
        "/deployments/big/drain/", {"minutes": "15", "reason": "drill", "next": target}
    )
    assert response.status_code == 302
    assert response["Location"] == "/deployments/", response["Location"]


def test_drain_returns_to_a_console_page_it_was_sent_from(people):
    client = _client(people, "staff")
    response = client.post("/deployments/big/drain/", {"minutes": "15", "next": "/board/"})
    assert response["Location"] == "/board/"
