"""accounts/policy.py through the services: the rules hold whoever calls, not only the
views (config apply and commands call the services directly)."""

import pytest

from accounts.models import Member, Team
from accounts.policy import NotAllowed
from accounts.selectors import viewer_for
from accounts.services import Actor, member_ensure, member_set_active, team_create
from quotas.services import limit_set
from routing.catalog.services import config_apply

CONFIG = "[[teams]]\nslug = 'from-file'\nname = 'From a file'\n"


@pytest.fixture
def home(db: None) -> Team:
    return Team.objects.create(slug="home", name="Home")


def _actor_for(member: Member) -> Actor:
    return Actor.of(viewer_for(member.user))


def test_a_team_admin_may_not_apply_config_a_command_may(home: Team) -> None:
    tina = member_ensure(email="tina@home.test", team=home, role=Member.Role.ADMIN)
    with pytest.raises(NotAllowed, match="Only an admin may apply a config file"):
        config_apply(text=CONFIG, actor=_actor_for(tina))
    assert not Team.objects.filter(slug="from-file").exists()
    config_apply(text=CONFIG, actor=Actor.command("apply_config"))
    assert Team.objects.filter(slug="from-file").exists()


def test_a_team_admin_may_not_lock_out_a_staff_member_of_their_team(home: Team) -> None:
    tina = member_ensure(email="tina@home.test", team=home, role=Member.Role.ADMIN)
    eve = member_ensure(email="eve@home.test", team=home)
    eve.user.is_staff = True
    eve.user.save()
    with pytest.raises(NotAllowed):
        member_set_active(actor=_actor_for(tina), member=eve, active=False)
    eve.user.refresh_from_db()
    assert eve.user.is_active


def test_a_team_admin_may_not_lift_or_clear_their_teams_own_limit(home: Team) -> None:
    tina = member_ensure(email="tina@home.test", team=home, role=Member.Role.ADMIN)
    limit_set(scope="team", name="home", requests_per_minute=60)
    for kwargs in ({"requests_per_minute": 999_999}, {"clear": True}):
        with pytest.raises(NotAllowed, match="team's own limits"):
            limit_set(scope="team", name="home", actor=_actor_for(tina), **kwargs)
    home.refresh_from_db()
    assert home.limit.requests_per_minute == 60


def test_only_staff_create_teams(home: Team) -> None:
    tina = member_ensure(email="tina@home.test", team=home, role=Member.Role.ADMIN)
    with pytest.raises(NotAllowed):
        team_create(actor=_actor_for(tina), slug="mine", name="Mine")
    assert team_create(actor=Actor.command("x"), slug="mine", name="Mine").slug == "mine"


def test_a_member_moved_to_another_team_loses_the_old_teams_keys(home: Team) -> None:
    """Config apply (member_ensure) moves members: the old team's admin can no longer see
    them, so the keys they held on its applications must not keep working."""
    from accounts.models import AdminAction, Application
    from accounts.services import key_issue

    rival = Team.objects.create(slug="rival", name="Rival")
    Application.objects.create(team=home, slug="home-app", name="Home app")
    Application.objects.create(team=rival, slug="rival-app", name="Rival app")
    member_ensure(email="dev@home.test", team=home)
    key, _ = key_issue(member_email="dev@home.test", application_slug="home-app")
    config_apply(
        text="[[members]]\nemail = 'dev@home.test'\nteam = 'rival'\n",
        actor=Actor.command("apply_config"),
    )
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert AdminAction.objects.filter(
        action="key.revoke", team_id=home.pk, after__reason="member moved to another team"
    ).exists()
    fresh, _ = key_issue(member_email="dev@home.test", application_slug="rival-app")
    assert fresh.revoked_at is None


def test_the_django_admin_moving_a_member_revokes_their_old_keys(home: Team) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from accounts.models import Application
    from accounts.services import key_issue

    rival = Team.objects.create(slug="rival", name="Rival")
    Application.objects.create(team=home, slug="home-app", name="Home app")
    member = member_ensure(email="dev@home.test", team=home)
    key, _ = key_issue(member_email="dev@home.test", application_slug="home-app")
    root = get_user_model().objects.create_superuser("root", "root@x.test", "pw-long-enough-1")
    client = Client()
    client.force_login(root)
    response = client.post(
        f"/admin/accounts/member/{member.pk}/change/",
        {"user": member.user_id, "team": rival.pk, "role": "member"},
    )
    assert response.status_code == 302, response.content[:2000]
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_a_team_admin_may_not_limit_a_staff_member_or_their_keys(home: Team) -> None:
    from accounts.models import Application
    from accounts.services import key_issue

    Application.objects.create(team=home, slug="home-app", name="Home app")
    tina = member_ensure(email="tina@home.test", team=home, role=Member.Role.ADMIN)
    eve = member_ensure(email="eve@home.test", team=home)
    eve.user.is_staff = True
    eve.user.save()
    key, _ = key_issue(member_email="eve@home.test", application_slug="home-app")
    for scope, name in (("member", "eve@home.test"), ("key", key.prefix)):
        with pytest.raises(NotAllowed, match="an admin's limits"):
            limit_set(scope=scope, name=name, actor=_actor_for(tina), requests_per_minute=1)
    limit_set(scope="key", name=key.prefix, actor=Actor.of(viewer_for(eve.user)), max_concurrency=2)
