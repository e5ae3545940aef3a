"""Roles and scoping decided in accounts/selectors.py, and the admin actions log."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser

from accounts.keys import key_generate
from accounts.models import AdminAction, ApiKey, Application, Member, Team
from accounts.selectors import (
    admin_actions_visible_to,
    keys_visible_to,
    members_visible_to,
    viewer_for,
)
from accounts.services import Actor, admin_action_record

pytestmark = pytest.mark.django_db


def _member(email: str, team: Team, role: str = Member.Role.MEMBER) -> Member:
    user = get_user_model().objects.create_user(username=email, email=email, password="pw")
    return Member.objects.create(user=user, team=team, role=role)


def _key(member: Member, app: Application) -> ApiKey:
    new = key_generate()
    return ApiKey.objects.create(
        member=member, application=app, prefix=new.prefix, secret_hash=new.secret_hash
    )


@pytest.fixture
def world():
    red, blue = (
        Team.objects.create(slug="red", name="Red"),
        Team.objects.create(slug="blue", name="Blue"),
    )
    app_red = Application.objects.create(team=red, slug="app-red", name="A")
    app_blue = Application.objects.create(team=blue, slug="app-blue", name="B")
    boss = _member("boss@red.test", red, Member.Role.ADMIN)
    ann = _member("ann@red.test", red)
    bob = _member("bob@blue.test", blue)
    staff = get_user_model().objects.create_user(
        username="root@x.test", email="root@x.test", password="pw", is_staff=True
    )
    keys = {m.user.email: _key(m, app_red if m.team == red else app_blue) for m in (boss, ann, bob)}
    return {"red": red, "boss": boss, "ann": ann, "bob": bob, "staff": staff, "keys": keys}


def test_roles_are_decided_from_staff_flag_and_member_role(world):
    assert viewer_for(world["staff"]).role == "admin"
    assert viewer_for(world["boss"].user).role == "team_admin"
    assert viewer_for(world["boss"].user).team_admin_of == world["red"].pk
    assert viewer_for(world["ann"].user).role == "member"
    assert viewer_for(AnonymousUser()).role == "anonymous"
    world["ann"].user.is_active = False
    assert viewer_for(world["ann"].user).role == "anonymous"


def test_keys_and_members_are_scoped_by_role(world):
    emails = lambda qs: sorted(k.member.user.email for k in qs)  # noqa: E731
    assert emails(keys_visible_to(viewer_for(world["staff"]))) == [
        "ann@red.test",
        "bob@blue.test",
        "boss@red.test",
    ]
    assert emails(keys_visible_to(viewer_for(world["boss"].user))) == [
        "ann@red.test",
        "boss@red.test",
    ]
    assert emails(keys_visible_to(viewer_for(world["ann"].user))) == ["ann@red.test"]
    assert not keys_visible_to(viewer_for(AnonymousUser())).exists()
    assert members_visible_to(viewer_for(world["ann"].user)).get() == world["ann"]
    assert members_visible_to(viewer_for(world["boss"].user)).count() == 2


def test_admin_action_log_is_scoped_to_the_team_and_hidden_from_members(world):
    actor = Actor.of(viewer_for(world["boss"].user))
    admin_action_record(
        actor=actor,
        action="key.revoke",
        obj=world["keys"]["ann@red.test"],
        before={"revoked_at": None},
        after={"revoked_at": "now"},
        team_id=world["red"].pk,
    )
    admin_action_record(actor=Actor.command("drain"), action="deployment.drain", obj="big")
    row = AdminAction.objects.get(action="key.revoke")
    assert (row.actor_label, row.via, row.object_type) == ("boss@red.test", "console", "apikey")
    assert admin_actions_visible_to(viewer_for(world["staff"])).count() == 2
    assert list(admin_actions_visible_to(viewer_for(world["boss"].user))) == [row]
    assert not admin_actions_visible_to(viewer_for(world["ann"].user)).exists()
