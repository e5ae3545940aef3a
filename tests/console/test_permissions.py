"""Every console URL and action, for every role, with Django's test client.

Roles: anonymous; `member` (alice, team home); `other_member` (carl, team rival); `team_admin`
(tina, admin of home); `other_team_admin` (olga, admin of rival); `staff` (sam). Bob is
another member of home: alice must never see his things.

The rules (accounts/selectors.py, console/access.py): anonymous visitors are sent to the
login page; a page or action a role may never use answers 403; an object outside the
viewer's scope answers 404, so its existence is not revealed. List pages are also searched
for what must and must not appear. A new page or action is one line in PAGES or ACTIONS.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tests.console.people import People, make_people

ROLES = ("anonymous", "member", "other_member", "team_admin", "other_team_admin", "staff")
LOGIN = "login"  # a redirect to the login page
DONE = "done"  # the action ran: a page (200) or a redirect that is not to the login page


def expect(default: int | str, **roles: int | str) -> dict[str, int | str]:
    unknown = set(roles) - set(ROLES)
    assert not unknown, unknown
    return {role: roles.get(role, default) for role in ROLES} | {"anonymous": LOGIN}


EVERYONE = expect(200)
MANAGERS = expect(200, member=403, other_member=403)
STAFF = expect(403, staff=200)
# A page about an object of team home: its admin and staff; rival's admin may not know it.
HOME_OBJECT = expect(200, member=403, other_member=403, other_team_admin=404)
RIVAL_OBJECT = expect(200, member=403, other_member=403, team_admin=404)


@dataclass(frozen=True)
class Page:
    path: str  # str.format()ted with `names(people)`
    expect: dict[str, int | str]
    shows: dict[str, tuple[str, ...]] = field(default_factory=dict)  # role -> must appear
    hides: dict[str, tuple[str, ...]] = field(default_factory=dict)  # role -> must not


# The key prefixes, emails and call ids of alice (member), bob (her peer), carl (rival).
MINE, PEER, RIVAL = ("{alice_key}", "{alice}"), ("{bob_key}", "{bob}"), ("{carl_key}", "{carl}")
CALLS = ("{alice_call}", "{bob_call}", "{carl_call}")
CALLS_SHOWN = {
    "member": CALLS[:1],
    "other_member": CALLS[2:],
    "team_admin": CALLS[:2],
    "other_team_admin": CALLS[2:],
    "staff": CALLS,
}
CALLS_HIDDEN = {
    "member": CALLS[1:],
    "other_member": CALLS[:2],
    "team_admin": CALLS[2:],
    "other_team_admin": CALLS[:2],
}
PAGES = [
    Page("/", EVERYONE),
    Page("/board/", EVERYONE),
    Page("/alerts/", EVERYONE),
    Page(
        "/keys/",
        EVERYONE,
        shows={
            "member": MINE[:1],
            "other_member": RIVAL[:1],
            "team_admin": (*MINE[:1], *PEER[:1]),
            "other_team_admin": RIVAL[:1],
            "staff": (*MINE[:1], *PEER[:1], *RIVAL[:1]),
        },
        hides={
            "member": (*PEER[:1], *RIVAL[:1]),
            "other_member": (*MINE[:1], *PEER[:1]),
            "team_admin": RIVAL[:1],
            "other_team_admin": (*MINE[:1], *PEER[:1]),
        },
    ),
    Page("/keys/new/", EVERYONE, hides={"member": ("{bob}",), "other_member": ("{alice}",)}),
    Page("/keys/{alice_key}/rotate/", expect(200, other_member=404, other_team_admin=404)),
    Page("/keys/{carl_key}/rotate/", expect(200, member=404, team_admin=404)),
    Page(
        "/teams/",
        MANAGERS,
        shows={"team_admin": ("{home}",), "other_team_admin": ("{rival}",)},
        hides={"team_admin": ("{rival}",), "other_team_admin": ("{home}",)},
    ),
    Page("/teams/new/", STAFF),
    Page("/teams/{home}/", HOME_OBJECT),
    Page("/teams/{rival}/", RIVAL_OBJECT),
    Page(
        "/members/",
        MANAGERS,
        shows={
            "team_admin": ("{alice}", "{bob}"),
            "other_team_admin": ("{carl}",),
            "staff": ("{alice}", "{bob}", "{carl}"),
        },
        hides={"team_admin": ("{carl}",), "other_team_admin": ("{alice}", "{bob}")},
    ),
    Page("/members/new/", MANAGERS),
    Page("/members/{alice_id}/", HOME_OBJECT),
    Page("/members/{carl_id}/", RIVAL_OBJECT),
    Page(
        "/applications/",
        MANAGERS,
        shows={"team_admin": ("{home_app}",), "other_team_admin": ("{rival_app}",)},
        hides={"team_admin": ("{rival_app}",), "other_team_admin": ("{home_app}",)},
    ),
    Page("/applications/new/", MANAGERS),
    Page("/applications/{home_app}/", HOME_OBJECT),
    Page("/applications/{rival_app}/", RIVAL_OBJECT),
    Page(
        "/limits/",
        EVERYONE,
        shows={"member": ("{alice}",), "team_admin": ("{alice}", "{bob}"), "staff": ("{carl}",)},
        hides={
            "member": ("{bob}", "{carl}"),
            "other_member": ("{alice}", "{bob}"),
            "team_admin": ("{carl}",),
            "other_team_admin": ("{alice}", "{bob}"),
        },
    ),
    Page(
        "/limits/edit/?scope=member&name={alice}",
        expect(200, member=403, other_member=404, other_team_admin=404),
    ),
    Page(
        "/limits/edit/?scope=team&name={home}",
        expect(403, other_member=404, other_team_admin=404, staff=200),
    ),
    Page("/deployments/", EVERYONE),
    Page("/config/", STAFF),
    Page("/config/export.toml", STAFF),
    Page(
        "/usage/",
        EVERYONE,
        shows={"member": ("{alice_call}",), "other_member": ("{carl_call}",)},
        hides={
            "member": ("{bob_call}", "{carl_call}"),
            "other_member": ("{alice_call}", "{bob_call}"),
            "team_admin": ("{alice_call}", "{bob_call}", "{carl_call}"),
        },
    ),
    # Reports and the call explorer.
    Page(
        "/reports/?group_by=member",
        EVERYONE,
        shows={"member": ("{alice}",), "team_admin": ("{alice}", "{bob}"), "staff": ("{carl}",)},
        hides={
            "member": ("{bob}", "{carl}"),
            "other_member": ("{alice}", "{bob}"),
            "team_admin": ("{carl}",),
            "other_team_admin": ("{alice}", "{bob}"),
        },
    ),
    Page(
        "/reports/?group_by=member&format=csv",
        EVERYONE,
        shows={"member": ("{alice}",), "other_team_admin": ("{carl}",)},
        hides={"member": ("{bob}", "{carl}"), "other_team_admin": ("{alice}", "{bob}")},
    ),
    Page("/reports/served/", EVERYONE),
    Page("/reports/weather/", MANAGERS),
    Page("/calls/", EVERYONE, shows=CALLS_SHOWN, hides=CALLS_HIDDEN),
    Page("/calls/export.csv", EVERYONE, shows=CALLS_SHOWN, hides=CALLS_HIDDEN),
    Page("/calls/{alice_call}/", expect(200, other_member=404, other_team_admin=404)),
    Page("/calls/{carl_call}/", expect(200, member=404, team_admin=404)),
    # Batches (a member: their own keys' batches; a team admin: their team's).
    Page(
        "/batches/",
        EVERYONE,
        shows={
            "member": ("{alice_batch}",),
            "team_admin": ("{alice_batch}", "{bob_batch}"),
            "other_team_admin": ("{carl_batch}",),
            "staff": ("{alice_batch}", "{bob_batch}", "{carl_batch}"),
        },
        hides={
            "member": ("{bob_batch}", "{carl_batch}"),
            "other_member": ("{alice_batch}", "{bob_batch}"),
            "team_admin": ("{carl_batch}",),
            "other_team_admin": ("{alice_batch}", "{bob_batch}"),
        },
    ),
    Page("/batches/{alice_batch}/", expect(200, other_member=404, other_team_admin=404)),
    Page("/batches/{carl_batch}/", expect(200, member=404, team_admin=404)),
    Page(
        "/actions/",
        MANAGERS,
        shows={"team_admin": MINE[:1], "staff": (*MINE[:1], *RIVAL[:1])},
        hides={"team_admin": RIVAL[:1], "other_team_admin": (*MINE[:1], *PEER[:1])},
    ),
]


def _landed_key_revoked(label: str) -> Callable[[People], bool]:
    def landed(people: People) -> bool:
        people.keys[label].refresh_from_db()
        return people.keys[label].revoked_at is not None

    return landed


def _landed_rotated(label: str) -> Callable[[People], bool]:
    def landed(people: People) -> bool:
        key = people.keys[label]
        return key.member.api_keys.exclude(pk=key.pk).exists()

    return landed


def _landed_app_renamed(people: People) -> bool:
    people.rival_app.refresh_from_db()
    return people.rival_app.name == "Renamed by a test"


def _landed_alice_inactive(people: People) -> bool:
    user = people.users["member"]
    user.refresh_from_db()
    return not user.is_active


def _landed_dora_active(people: People) -> bool:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username=_dora(people)).is_active


def _dora(people: People) -> str:
    return people.email("member").replace("alice", "dora")


def _landed_deployment(attr: str, value: Any, name: str = "perm-dep") -> Callable[[People], bool]:
    def landed(people: People) -> bool:
        from routing.models import Deployment

        got = getattr(Deployment.objects.get(name=name), attr)
        return got is not None if value is ... else got == value

    return landed


def _landed_limit(member_role: str, rpm: int) -> Callable[[People], bool]:
    def landed(people: People) -> bool:
        from quotas.models import Limit

        limit = Limit.objects.filter(member=people.users[member_role].member).first()
        return limit is not None and limit.requests_per_minute == rpm

    return landed


def _landed_team_limit_cleared(people: People) -> bool:
    from quotas.models import Limit

    limit = Limit.objects.filter(team=people.home).first()
    return limit is None or limit.requests_per_minute is None


def _eve(people: People) -> Any:
    from accounts.models import Member

    return Member.objects.select_related("user").get(
        user__username=people.email("member").replace("alice", "eve")
    )


def _landed_alice_admin(people: People) -> bool:
    member = people.users["member"].member
    member.refresh_from_db()
    return member.role == "admin"


def _landed_rival_renamed(people: People) -> bool:
    people.rival.refresh_from_db()
    return people.rival.name == "Renamed rival"


def _landed_app_in_rival(people: People) -> bool:
    from accounts.models import Application

    return Application.objects.filter(slug="made-in-rival", team=people.rival).exists()


def _landed_team(people: People) -> bool:
    from accounts.models import Team

    return Team.objects.filter(slug="made-by-test").exists()


def _landed_member_in_rival(people: People) -> bool:
    from accounts.models import Member

    return Member.objects.filter(user__email="newbie@example.com", team=people.rival).exists()


def _landed_batch_cancelled(batch_id: str) -> Callable[[People], bool]:
    def landed(people: People) -> bool:
        from batches.models import Batch

        return Batch.objects.get(pk=batch_id).status == Batch.Status.CANCELLING

    return landed


def _landed_app_windows(windows: str) -> Callable[[People], bool]:
    def landed(people: People) -> bool:
        people.home_app.refresh_from_db()
        return people.home_app.batch_windows == windows

    return landed


@dataclass(frozen=True)
class Action:
    name: str
    path: str
    data: dict[str, Any]
    expect: dict[str, int | str]
    lands_for: frozenset[str]  # roles whose request must make the change; others must not
    landed: Callable[[People], bool]


def _lands(*roles: str) -> frozenset[str]:
    return frozenset(roles)


APP_EDIT = {
    "name": "Renamed by a test",
    "default_priority": "interactive",
    "fallback": "any",
    "default_max_tokens": 1024,
}
ACTIONS = [
    Action(
        "revoke bob's key (alice's team-mate)",
        "/keys/{bob_key}/revoke/",
        {},
        expect(404, team_admin=DONE, staff=DONE),
        _lands("team_admin", "staff"),
        _landed_key_revoked("member_peer"),
    ),
    Action(
        "revoke alice's own key",
        "/keys/{alice_key}/revoke/",
        {},
        expect(404, member=DONE, team_admin=DONE, staff=DONE),
        _lands("member", "team_admin", "staff"),
        _landed_key_revoked("member"),
    ),
    Action(
        "revoke carl's key (team rival)",
        "/keys/{carl_key}/revoke/",
        {},
        expect(404, other_member=DONE, other_team_admin=DONE, staff=DONE),
        _lands("other_member", "other_team_admin", "staff"),
        _landed_key_revoked("rival_member"),
    ),
    Action(
        "rotate bob's key",
        "/keys/{bob_key}/rotate/",
        {"grace": "0"},
        expect(404, team_admin=DONE, staff=DONE),
        _lands("team_admin", "staff"),
        _landed_rotated("member_peer"),
    ),
    Action(
        "create a key for bob",
        "/keys/new/",
        {"application": "{home_app_id}", "member": "{bob_id}", "name": "for bob"},
        # A member's form has no member field (the key is theirs): not a key of bob's.
        expect(DONE, other_member=200, other_team_admin=200),
        _lands("team_admin", "staff"),
        lambda people: people.users["member_peer"].member.api_keys.filter(name="for bob").exists(),
    ),
    Action(
        "edit team rival's application",
        "/applications/{rival_app}/",
        APP_EDIT,
        expect(403, team_admin=404, other_team_admin=DONE, staff=DONE),
        _lands("other_team_admin", "staff"),
        _landed_app_renamed,
    ),
    Action(
        "deactivate alice",
        "/members/{alice_id}/deactivate/",
        {},
        expect(403, team_admin=DONE, other_team_admin=404, staff=DONE),
        _lands("team_admin", "staff"),
        _landed_alice_inactive,
    ),
    Action(
        "create a member in team rival",
        "/members/new/",
        {"email": "newbie@example.com", "team": "{rival_id}", "role": "member"},
        # tina's form offers only her own team: the form comes back with an error.
        expect(403, team_admin=200, other_team_admin=DONE, staff=DONE),
        _lands("other_team_admin", "staff"),
        _landed_member_in_rival,
    ),
    Action(
        "deactivate eve (staff, a member of team home)",
        "/members/{eve_id}/deactivate/",
        {},
        # A team admin may not lock out an admin of everything who sits in their team.
        expect(403, other_team_admin=404, staff=DONE),
        _lands("staff"),
        lambda people: not _eve(people).user.is_active,
    ),
    Action(
        "make alice a team admin",
        "/members/{alice_id}/",
        {"role": "admin"},
        expect(403, team_admin=DONE, other_team_admin=404, staff=DONE),
        _lands("team_admin", "staff"),
        _landed_alice_admin,
    ),
    Action(
        "rename team rival",
        "/teams/{rival}/",
        {"name": "Renamed rival", "time_zone": "UTC"},
        expect(403, team_admin=404, other_team_admin=DONE, staff=DONE),
        _lands("other_team_admin", "staff"),
        _landed_rival_renamed,
    ),
    Action(
        "create an application in team rival",
        "/applications/new/",
        {**APP_EDIT, "slug": "made-in-rival", "team": "{rival_id}"},
        # tina's form offers only her own team: the form comes back with an error.
        expect(403, team_admin=200, other_team_admin=DONE, staff=DONE),
        _lands("other_team_admin", "staff"),
        _landed_app_in_rival,
    ),
    Action(
        "create a team",
        "/teams/new/",
        {"slug": "made-by-test", "name": "Made by a test", "time_zone": "UTC"},
        expect(403, staff=DONE),
        _lands("staff"),
        _landed_team,
    ),
    Action(
        "drain a deployment",
        "/deployments/{dep}/drain/",
        {"minutes": 5, "reason": "drill"},
        expect(403, staff=DONE),
        _lands("staff"),
        _landed_deployment("drained_until", ...),
    ),
    Action(
        "disable a deployment",
        "/deployments/{dep}/disable/",
        {},
        expect(403, staff=DONE),
        _lands("staff"),
        _landed_deployment("enabled", False),
    ),
    Action(
        "undrain a deployment",
        "/deployments/{drained_dep}/undrain/",
        {},
        expect(403, staff=DONE),
        _lands("staff"),
        _landed_deployment("drained_until", None, name="perm-drained"),
    ),
    Action(
        "enable a deployment",
        "/deployments/{drained_dep}/enable/",
        {},
        expect(403, staff=DONE),
        _lands("staff"),
        _landed_deployment("enabled", True, name="perm-drained"),
    ),
    Action(
        "activate dora (home, deactivated)",
        "/members/{dora_id}/activate/",
        {},
        expect(403, team_admin=DONE, other_team_admin=404, staff=DONE),
        _lands("team_admin", "staff"),
        _landed_dora_active,
    ),
    Action(
        "set carl's limits (team rival)",
        "/limits/edit/",
        {"scope": "member", "name": "{carl}", "requests_per_minute": 7},
        expect(404, other_member=403, other_team_admin=DONE, staff=DONE),
        _lands("other_team_admin", "staff"),
        _landed_limit("other_member", 7),
    ),
    Action(
        "set alice's limits",
        "/limits/edit/",
        {"scope": "member", "name": "{alice}", "requests_per_minute": 9},
        expect(404, member=403, team_admin=DONE, staff=DONE),
        _lands("team_admin", "staff"),
        _landed_limit("member", 9),
    ),
    Action(
        "clear team home's limits",
        "/limits/clear/",
        {"scope": "team", "name": "{home}"},
        expect(403, other_team_admin=404, staff=DONE),
        _lands("staff"),
        _landed_team_limit_cleared,
    ),
    Action(
        "cancel bob's batch (alice's team-mate)",
        "/batches/{bob_batch}/cancel/",
        {},
        expect(404, team_admin=DONE, staff=DONE),
        _lands("team_admin", "staff"),
        _landed_batch_cancelled("batch_perm_bob"),
    ),
    Action(
        "cancel carl's batch (team rival)",
        "/batches/{carl_batch}/cancel/",
        {},
        expect(404, other_member=DONE, other_team_admin=DONE, staff=DONE),
        _lands("other_member", "other_team_admin", "staff"),
        _landed_batch_cancelled("batch_perm_carl"),
    ),
    Action(
        "use the weather's batch window for team home's application",
        "/reports/weather/use/",
        {"application": "{home_app_id}", "start_hour": "1", "hours": "5", "zone": "UTC"},
        expect(403, team_admin=DONE, other_team_admin=404, staff=DONE),
        _lands("team_admin", "staff"),
        _landed_app_windows("01:00-06:00"),
    ),
    Action(
        "upload a config (dry run)",
        "/config/upload/",
        {"text": "[[teams]]\nslug = 'from-upload'\nname = 'x'\n"},
        expect(403, staff=200),
        _lands(),
        lambda people: False,
    ),
]


@pytest.fixture
def people(db: None) -> People:
    from accounts.services import member_ensure
    from quotas.models import Limit, UsageRollup
    from quotas.rollups import daily_rollups_rebuild
    from routing.models import CallRecord, Deployment, Upstream

    found = make_people(tag="m")
    upstream = Upstream.objects.create(name="perm-up", base_url="http://127.0.0.1:9/v1")
    Deployment.objects.create(name="perm-dep", upstream=upstream, model="m")
    Deployment.objects.create(
        name="perm-drained",
        upstream=upstream,
        model="m",
        enabled=False,
        drained_until=timezone.now() + timedelta(hours=1),
    )
    eve = member_ensure(email=found.email("member").replace("alice", "eve"), team=found.home)
    eve.user.is_staff = True
    eve.user.save(update_fields=["is_staff"])
    dora = member_ensure(email=_dora(found), team=found.home)
    dora.user.is_active = False
    dora.user.save(update_fields=["is_active"])
    now = timezone.now()
    for label, role in (
        ("member", "member"),
        ("member_peer", "member_peer"),
        ("rival_member", "other_member"),
    ):
        member = found.users[role].member
        Limit.objects.create(scope="member", member=member, requests_per_minute=100)
        CallRecord.objects.create(
            request_id=f"req_perm_{label}",
            created_at=timezone.now() - timedelta(minutes=5),
            member=member,
            member_email=member.user.email,
            application=found.keys[label].application,
            key_prefix=found.keys[label].prefix,
            endpoint="chat.completions",
            requested_model="smart",
            outcome="success",
            status_code=200,
        )
        UsageRollup.objects.create(
            hour=now.replace(minute=0, second=0, microsecond=0),
            key_prefix=found.keys[label].prefix,
            deployment="perm-dep",
            member_id=member.pk,
            application_id=found.keys[label].application_id,
            team_id=member.team_id,
            requests=3,
        )
    daily_rollups_rebuild()  # rows made by hand: the audit writer would add their days too
    Limit.objects.create(scope="team", team=found.home, requests_per_minute=1000)
    from tests.console.batch_data import make_batch

    for label, name in (("member", "alice"), ("member_peer", "bob"), ("rival_member", "carl")):
        make_batch(found.keys[label], f"batch_perm_{name}", completed=1, pending=1)
    return found


def names(people: People) -> dict[str, str]:
    from accounts.models import Member

    return {
        "alice": people.email("member"),
        "bob": people.users["member_peer"].email,
        "carl": people.email("other_member"),
        "alice_key": people.keys["member"].prefix,
        "bob_key": people.keys["member_peer"].prefix,
        "carl_key": people.keys["rival_member"].prefix,
        "alice_call": "req_perm_member",
        "bob_call": "req_perm_member_peer",
        "carl_call": "req_perm_rival_member",
        "alice_id": str(people.users["member"].member.pk),
        "dora_id": str(Member.objects.get(user__username=_dora(people)).pk),
        "eve_id": str(_eve(people).pk),
        "bob_id": str(people.users["member_peer"].member.pk),
        "carl_id": str(people.users["other_member"].member.pk),
        "home": people.home.slug,
        "rival": people.rival.slug,
        "rival_id": str(people.rival.pk),
        "home_app": people.home_app.slug,
        "home_app_id": str(people.home_app.pk),
        "rival_app": people.rival_app.slug,
        "alice_batch": "batch_perm_alice",
        "bob_batch": "batch_perm_bob",
        "carl_batch": "batch_perm_carl",
        "dep": "perm-dep",
        "drained_dep": "perm-drained",
    }


def client_as(people: People, role: str) -> Client:
    client = Client()
    if role != "anonymous":
        client.force_login(people.users[role])
    return client


def check_status(response: Any, wanted: int | str, what: str) -> None:
    location = response.headers.get("Location", "")
    if wanted == LOGIN:
        assert response.status_code == 302 and location.startswith("/login/"), (
            f"{what}: expected a redirect to the login page, got {response.status_code} {location}"
        )
    elif wanted == DONE:
        ok = response.status_code == 200 or (
            response.status_code == 302 and not location.startswith("/login/")
        )
        assert ok, f"{what}: expected the action to run, got {response.status_code} {location}"
    else:
        assert response.status_code == wanted, (
            f"{what}: expected {wanted}, got {response.status_code} {location}"
        )


def read_body(response: Any) -> str:
    """The page, or a streamed download (sync or async iterator) read to the end."""
    if not getattr(response, "streaming", False):
        return response.content.decode()
    content = response.streaming_content
    if hasattr(content, "__aiter__"):
        from asgiref.sync import async_to_sync

        async def read() -> bytes:
            return b"".join([chunk async for chunk in content])

        return async_to_sync(read)().decode()
    return b"".join(content).decode()


def _page_id(page: Page) -> str:
    return page.path


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_page_answers_each_role_as_the_rules_say(people: People, page: Page, role: str) -> None:
    fill = names(people)
    path = page.path.format(**fill)
    response = client_as(people, role).get(path)
    check_status(response, page.expect[role], f"GET {path} as {role}")
    if response.status_code != 200:
        return
    body = read_body(response)
    for shown in page.shows.get(role, ()):
        assert shown.format(**fill) in body, f"GET {path} as {role}: {shown} missing"
    for hidden in page.hides.get(role, ()):
        assert hidden.format(**fill) not in body, f"GET {path} as {role}: shows {hidden}"


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: a.name)
def test_action_is_allowed_or_refused_for_each_role(
    people: People, action: Action, role: str
) -> None:
    fill = names(people)
    path = action.path.format(**fill)
    data = {k: v.format(**fill) if isinstance(v, str) else v for k, v in action.data.items()}
    response = client_as(people, role).post(path, data)
    check_status(response, action.expect[role], f"POST {path} ({action.name}) as {role}")
    assert action.landed(people) == (role in action.lands_for), (
        f"{action.name} as {role}: the change "
        + ("did not land" if role in action.lands_for else "landed anyway")
    )


def test_matrix_covers_every_console_url() -> None:
    """The other way round: a console URL without a row here fails (add new pages above)."""
    from django.urls import get_resolver

    resolver = get_resolver("console.urls")
    covered = {_pattern_of(p.path) for p in PAGES} | {_pattern_of(a.path) for a in ACTIONS}
    missing = []
    for pattern in resolver.url_patterns:
        route = "/" + str(pattern.pattern)
        if route in ("/login/", "/logout/", "/password/", "/password/done/"):
            continue  # Django's own authentication views
        if route in ("/sso/login/", "/sso/callback/"):
            continue  # signing in, open to anyone: tests/console/test_sso_*.py
        if _route_shape(route) not in covered:
            missing.append(route)
    assert not missing, f"console URLs without a row in the permission matrix: {missing}"


def _pattern_of(path: str) -> str:
    import re

    return _route_shape(re.sub(r"\{[^}]+\}", "<x>", path.split("?")[0]))


def _route_shape(route: str) -> str:
    import re

    return re.sub(r"<[^>]+>", "<x>", route)
