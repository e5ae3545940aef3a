"""Every change is logged one way (accounts.services.recorded_change): the snapshot before
(None only for a new object), the change, the snapshot after and one admin action, in one
transaction. A service that wrote its row by hand again would break the invariants here."""

from datetime import timedelta

import pytest

from accounts.models import AdminAction, Member, Team
from accounts.services import (
    SYSTEM,
    AccountError,
    application_batch_windows_set,
    application_create,
    application_update,
    key_create,
    key_revoke,
    key_rotate,
    management_token_issue,
    management_token_revoke,
    member_create,
    member_set_active,
    member_team_move,
    member_update,
    recorded_change,
    snapshot_of,
    team_create,
    team_update,
)
from routing.catalog.services import deployment_drain, deployment_set_enabled
from routing.models import Deployment, Upstream

pytestmark = pytest.mark.django_db
CREATES = {
    "team.create",
    "application.create",
    "member.create",
    "key.create",
    "key.rotate.new",
    "management_token.create",
}


def _every_change() -> None:
    team = team_create(actor=SYSTEM, slug="home", name="Home")
    other = team_create(actor=SYSTEM, slug="away", name="Away")
    team_update(actor=SYSTEM, team=team, name="Home base", time_zone="Europe/Berlin")
    app = application_create(actor=SYSTEM, team=team, slug="app")
    application_update(actor=SYSTEM, application=app, default_max_tokens=99)
    application_batch_windows_set(actor=SYSTEM, application=app, windows="00:00-06:00")
    member = member_create(actor=SYSTEM, email="ann@x.test", team=team)
    member_update(actor=SYSTEM, member=member, role=Member.Role.ADMIN)
    key, _ = key_create(actor=SYSTEM, member=member, application=app)
    key_rotate(actor=SYSTEM, key=key, grace=timedelta(hours=1))
    spare, _ = key_create(actor=SYSTEM, member=member, application=app)
    key_revoke(actor=SYSTEM, prefix=spare.prefix)
    member_team_move(actor=SYSTEM, member=member, team=other)  # revokes the live keys too
    member_set_active(actor=SYSTEM, member=member, active=False)
    token, _ = management_token_issue(actor=SYSTEM, team_slug="home")
    management_token_revoke(actor=SYSTEM, prefix=token.prefix)
    upstream = Upstream.objects.create(name="up", base_url="http://127.0.0.1:9/v1")
    Deployment.objects.create(name="dep", upstream=upstream, model="m")
    deployment_drain(name="dep", minutes=10, reason="drill")
    deployment_set_enabled(name="dep", enabled=False)


def test_every_change_is_logged_with_its_before_and_after_the_same_way():
    _every_change()
    rows = list(AdminAction.objects.order_by("id"))
    assert {r.action for r in rows} >= CREATES | {
        "team.update",
        "application.update",
        "application.batch_windows",
        "member.update",
        "key.rotate",
        "key.revoke",
        "member.move",
        "member.deactivate",
        "management_token.revoke",
        "deployment.drain",
        "deployment.disable",
    }
    for row in rows:
        assert isinstance(row.after, dict), row.action
        if row.action in CREATES:
            assert row.before is None, row.action
        else:
            assert isinstance(row.before, dict), row.action
            assert set(row.before) <= set(row.after), row.action
            assert row.before != row.after, row.action


def test_a_change_that_changes_nothing_is_not_logged():
    team = team_create(actor=SYSTEM, slug="home", name="Home")
    app = application_create(actor=SYSTEM, team=team, slug="app", batch_windows="any")
    count = AdminAction.objects.count()
    team_update(actor=SYSTEM, team=team, name="Home", time_zone="UTC")
    application_update(actor=SYSTEM, application=app, name=app.name)
    application_batch_windows_set(actor=SYSTEM, application=app, windows="any")
    assert AdminAction.objects.count() == count


def test_a_change_that_fails_leaves_neither_the_change_nor_its_action():
    team = team_create(actor=SYSTEM, slug="home", name="Home")
    count = AdminAction.objects.count()
    with (
        pytest.raises(AccountError),
        recorded_change(
            actor=SYSTEM,
            action="team.update",
            obj=team,
            snapshot=lambda t: snapshot_of(t, ("name",)),
        ),
    ):
        team.name = "Renamed"
        team.save(update_fields=["name"])
        raise AccountError("no")
    assert Team.objects.get(pk=team.pk).name == "Home"
    assert AdminAction.objects.count() == count
