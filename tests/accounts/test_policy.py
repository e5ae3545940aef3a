"""accounts/policy.py through the services: the rules hold whoever calls, not only the
views (config apply and commands call the services directly)."""

import pytest

from accounts.models import Member, Team
from accounts.policy import NotAllowed
from accounts.selectors import viewer_for
from accounts.services import Actor, member_ensure, member_set_active, team_create
from quotas.services import limit_set
from routing.services import config_apply

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
