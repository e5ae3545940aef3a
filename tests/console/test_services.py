"""The domain layer the console and the management API share: services record admin
actions, keys rotate with a grace period, deactivated members' keys stop working, limits keep
set_limit's semantics, drains carry a reason, and the catalog exports as TOML that
round-trips through apply_config unchanged."""

import asyncio
import io
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from accounts import authentication
from accounts.keys import key_prefix_of
from accounts.models import AdminAction, ApiKey, Application, Member, Team
from accounts.selectors import viewer_for
from accounts.services import (
    AccountError,
    Actor,
    application_create,
    application_update,
    key_create,
    key_revoke,
    key_rotate,
    member_create,
    member_set_active,
    team_create,
)
from quotas.models import Limit
from quotas.selectors import limit_rows, limits_visible_to
from quotas.services import LimitError, limit_set
from routing.catalog.config_export import config_diff, config_export
from routing.catalog.config_file import ConfigError, apply_config, load_config
from routing.catalog.selectors import capacity_alerts, capacity_error_share, deployment_board
from routing.catalog.services import RoutingError, deployment_drain, deployment_set_enabled
from routing.models import Attempt, CallRecord, Deployment, Route

pytestmark = pytest.mark.django_db(transaction=False)
DEMO = Path(__file__).resolve().parents[2] / "config" / "demo.toml"
ADMIN = Actor(user_id=None, label="root@example.com", via="console")


@pytest.fixture
def demo() -> dict:
    apply_config(load_config(DEMO))
    team = Team.objects.get(slug="demo")
    return {
        "team": team,
        "app": Application.objects.get(slug="demo"),
        "member": Member.objects.get(user__email="demo@example.com"),
    }


def _auth(plaintext: str):
    """The gateway's key check, with the key's row read here (inside the test's transaction)
    instead of on the gateway's worker thread."""
    principal = authentication._load(key_prefix_of(plaintext))

    async def loaded(prefix: str):
        return principal

    real, authentication._principal_for = authentication._principal_for, loaded
    try:
        return asyncio.run(authentication.authenticate(plaintext))
    finally:
        authentication._principal_for = real


def test_key_create_records_the_prefix_never_the_secret(demo):
    key, plaintext = key_create(actor=ADMIN, member=demo["member"], application=demo["app"])
    row = AdminAction.objects.get(action="key.create")
    assert row.object_repr == key.prefix and row.team_id == demo["team"].pk
    assert plaintext not in str(row.after) and key.secret_hash not in str(row.after)
    assert _auth(plaintext).prefix == key.prefix


def test_key_for_an_application_of_another_team_is_refused(demo):
    other = Team.objects.create(slug="other", name="Other")
    app = Application.objects.create(team=other, slug="other-app", name="x")
    with pytest.raises(AccountError, match="is not"):
        key_create(actor=ADMIN, member=demo["member"], application=app)


def test_rotate_gives_a_new_key_and_the_old_one_expires_after_the_grace(demo):
    old, old_plain = key_create(actor=ADMIN, member=demo["member"], application=demo["app"])
    new, new_plain = key_rotate(actor=ADMIN, key=old, grace=timedelta(hours=1))
    old.refresh_from_db()
    assert new.prefix != old.prefix and new.application == old.application
    assert old.revoked_at is None
    assert timedelta(minutes=59) < old.expires_at - timezone.now() <= timedelta(hours=1)
    assert _auth(old_plain) and _auth(new_plain)
    rotated = AdminAction.objects.get(action="key.rotate")
    assert rotated.after["replaced_by"] == new.prefix and rotated.before["expires_at"] is None


def test_rotate_without_grace_revokes_the_old_key_at_once(demo):
    old, old_plain = key_create(actor=ADMIN, member=demo["member"], application=demo["app"])
    key_rotate(actor=ADMIN, key=old, grace=timedelta(0))
    with pytest.raises(Exception, match="revoked"):
        _auth(old_plain)
    old.refresh_from_db()
    with pytest.raises(AccountError, match="revoked"):
        key_rotate(actor=ADMIN, key=old, grace=timedelta(hours=1))


def test_rotate_refuses_a_grace_over_30_days(demo):
    old, _ = key_create(actor=ADMIN, member=demo["member"], application=demo["app"])
    with pytest.raises(AccountError, match="30 days"):
        key_rotate(actor=ADMIN, key=old, grace=timedelta(days=31))


def test_revoke_records_before_and_after_once(demo):
    key, plaintext = key_create(actor=ADMIN, member=demo["member"], application=demo["app"])
    key_revoke(prefix=key.prefix, actor=ADMIN)
    key_revoke(prefix=key.prefix, actor=ADMIN)
    row = AdminAction.objects.get(action="key.revoke")
    assert row.before["revoked_at"] is None and row.after["revoked_at"]
    with pytest.raises(Exception, match="revoked"):
        _auth(plaintext)


def test_deactivated_member_keys_are_refused_and_reactivation_restores_them(demo):
    key, plaintext = key_create(actor=ADMIN, member=demo["member"], application=demo["app"])
    member_set_active(actor=ADMIN, member=demo["member"], active=False)
    with pytest.raises(Exception, match="deactivated"):
        _auth(plaintext)
    assert viewer_for(demo["member"].user).role == "anonymous"
    member_set_active(actor=ADMIN, member=demo["member"], active=True)
    assert _auth(plaintext).prefix == key.prefix
    assert [a.action for a in AdminAction.objects.order_by("id")][-2:] == [
        "member.deactivate",
        "member.activate",
    ]


def test_member_create_with_role_can_log_in_and_duplicates_are_refused(demo, client):
    member = member_create(
        actor=ADMIN, email="New@Example.com", team=demo["team"], role="admin", password="pw-12345!"
    )
    assert member.user.email == "new@example.com" and member.role == "admin"
    assert client.login(username="new@example.com", password="pw-12345!")
    with pytest.raises(AccountError, match="already exists"):
        member_create(actor=ADMIN, email="new@example.com", team=demo["team"])
    with pytest.raises(AccountError, match="valid email"):
        member_create(actor=ADMIN, email="nobody", team=demo["team"])


def test_team_and_application_create_and_edit_record_changes(demo):
    team = team_create(actor=ADMIN, slug="red", name="Red", time_zone="Europe/Berlin")
    with pytest.raises(AccountError, match="time zone"):
        team_create(actor=ADMIN, slug="blue", name="Blue", time_zone="Mars/Base")
    app = application_create(
        actor=ADMIN,
        team=team,
        slug="red-bot",
        routes=[Route.objects.get(name="fast")],
        default_priority="batch",
        fallback="same-tier",
        max_n=2,
    )
    assert list(app.routes.values_list("name", flat=True)) == ["fast"]
    application_update(
        actor=ADMIN,
        application=app,
        routes=list(Route.objects.all()),
        max_tokens_ceiling=4096,
        fallback="none",
    )
    app.refresh_from_db()
    assert app.fallback == "none" and app.max_tokens_ceiling == 4096
    row = AdminAction.objects.get(action="application.update")
    assert row.before["routes"] == ["fast"] and row.after["routes"] == [
        "claude-agent",
        "codex-agent",
        "fast",
        "mixed",
        "smart",
    ]
    with pytest.raises(AccountError, match="fallback"):
        application_update(actor=ADMIN, application=app, fallback="sometimes")


def test_limit_set_keeps_set_limit_semantics_and_records(demo):
    limit = limit_set(scope="application", name="demo", actor=ADMIN, requests_per_minute=60)
    limit = limit_set(scope="application", name="demo", actor=ADMIN, tokens_per_day=1000)
    assert (limit.requests_per_minute, limit.tokens_per_day) == (60, 1000)  # None kept rpm
    limit = limit_set(scope="application", name="demo", actor=ADMIN, requests_per_minute=0)
    assert limit.requests_per_minute is None  # 0 removes one limit
    with pytest.raises(LimitError, match="between 0"):
        limit_set(scope="application", name="demo", actor=ADMIN, tokens_per_day=-1)
    with pytest.raises(LimitError, match="no application"):
        limit_set(scope="application", name="nope", actor=ADMIN, tokens_per_day=1)
    limit_set(scope="application", name="demo", actor=ADMIN, clear=True)
    assert not Limit.objects.filter(application__slug="demo").exists()
    actions = list(AdminAction.objects.filter(object_type="limit").order_by("id"))
    assert [a.action for a in actions] == ["limit.set"] * 3 + ["limit.clear"]
    assert actions[1].before == {"requests_per_minute": 60}
    assert actions[-1].after is None


def test_limit_rows_show_usage_against_each_limit(demo):
    from quotas.models import UsageRollup

    member = demo["member"]
    UsageRollup.objects.create(
        hour=timezone.now().replace(minute=0, second=0, microsecond=0),
        key_prefix="sk-sluice-x",
        deployment="big",
        member_id=member.pk,
        application_id=demo["app"].pk,
        team_id=demo["team"].pk,
        requests=3,
        tokens_in=100,
        tokens_out=50,
        cost="0.25",
    )
    limit_set(scope="member", name="demo@example.com", actor=ADMIN, cost_per_month=10)
    rows = limit_rows(list(Limit.objects.filter(member=member)))
    assert rows[0].usage.tokens_today == 150 and rows[0].usage.in_flight == 0
    used, cap, share = rows[0].meters["cost_per_month"]
    assert (used, float(cap), share) == (used, 10.0, float(used) / 10) and float(used) == 0.25
    assert rows[0].meters["tokens_per_day"][:2] == (150, 2_000_000)


def test_member_sees_their_own_and_their_team_limits_only(demo):
    other = Team.objects.create(slug="other", name="Other")
    limit_set(scope="team", name="other", actor=ADMIN, requests_per_minute=5)
    limit_set(scope="team", name="demo", actor=ADMIN, requests_per_minute=5)
    viewer = viewer_for(demo["member"].user)
    names = sorted(str(limit) for limit in limits_visible_to(viewer))
    assert names == ["member demo@example.com", "team demo"]
    assert other.pk


def test_drain_with_reason_and_undrain_and_disable(demo):
    d = deployment_drain(name="big", minutes=10, reason="capacity drill", actor=ADMIN)
    assert d.drain_reason == "capacity drill" and d.drained_until > timezone.now()
    d = deployment_drain(name="big", minutes=None, actor=ADMIN)
    assert d.drained_until is None and d.drain_reason == ""
    with pytest.raises(RoutingError, match="one week"):
        deployment_drain(name="big", minutes=60 * 24 * 8, actor=ADMIN)
    with pytest.raises(RoutingError, match="no deployment"):
        deployment_drain(name="nope", minutes=1, actor=ADMIN)
    deployment_set_enabled(name="small", enabled=False, actor=ADMIN)
    assert not Deployment.objects.get(name="small").enabled
    assert list(AdminAction.objects.order_by("id").values_list("action", flat=True))[-3:] == [
        "deployment.drain",
        "deployment.undrain",
        "deployment.disable",
    ]


def test_commands_go_through_the_services_and_record_via_command(demo, tmp_path):
    out = io.StringIO()
    call_command(
        "issue_key",
        "--member",
        "demo@example.com",
        "--application",
        "demo",
        stdout=out,
        stderr=io.StringIO(),
    )
    prefix = ApiKey.objects.get().prefix
    call_command("revoke_key", prefix, stdout=out)
    call_command("set_limit", "team", "demo", "--rpm", "10", stdout=out)
    call_command("drain", "big", "--minutes", "5", "--reason", "drill", stdout=out)
    path = tmp_path / "c.toml"
    path.write_text(config_export().replace('tier = "large"', 'tier = "huge"'))
    call_command("apply_config", str(path), stdout=out)
    rows = list(AdminAction.objects.order_by("id"))
    assert [r.action for r in rows] == [
        "key.create",
        "key.revoke",
        "limit.set",
        "deployment.drain",
        "config.apply",
    ]
    assert {r.via for r in rows} == {"command"}
    assert "manage.py drain" in rows[3].actor_label
    assert any("tier='huge'" in line for line in rows[4].after["changes"])


def test_export_round_trips_through_an_empty_database(demo):
    limit_set(scope="team", name="demo", actor=ADMIN, cost_per_month="12.5", tokens_per_day=7)
    application_create(
        actor=ADMIN,
        team=demo["team"],
        slug="odd",
        name='Quote " and \\ and ünï',
        routes=[Route.objects.get(name="smart")],
        max_tokens_ceiling=100,
    )
    exported = config_export()
    # An empty database: remove everything the file describes, then apply it again.
    Limit.objects.all().delete()
    Member.objects.all().delete()
    get_user_model().objects.all().delete()
    Application.objects.all().delete()
    Team.objects.all().delete()
    Route.objects.all().delete()
    Deployment.objects.all().delete()
    from routing.models import Upstream

    Upstream.objects.all().delete()
    diff = config_diff(exported, apply=True)
    assert diff.report.created and not diff.report.updated
    assert config_export() == exported
    # And applying it again changes nothing.
    assert not config_diff(exported, apply=True).changes


def test_dry_run_says_what_would_change_and_changes_nothing(demo):
    text = config_export().replace("max_concurrency = 4", "max_concurrency = 6")
    text += '\n[[teams]]\nslug = "new-team"\nname = "New"\ntime_zone = "UTC"\n'
    diff = config_diff(text, apply=False)
    kinds = {(c.section, c.name, c.kind) for c in diff.changes}
    assert kinds == {("deployments", "big", "updated"), ("teams", "new-team", "created")}
    big = next(c for c in diff.changes if c.name == "big")
    assert big.fields == {"max_concurrency": (4, 6)}
    assert Deployment.objects.get(name="big").max_concurrency == 4
    assert not Team.objects.filter(slug="new-team").exists()


def test_a_bad_file_is_refused_whole(demo):
    text = config_export() + '\n[[teams]]\nslug = "x"\ntime_zone = "Nowhere/Land"\n'
    with pytest.raises(ConfigError, match="time zone"):
        config_diff(text, apply=True)
    with pytest.raises(ConfigError, match="not valid TOML"):
        config_diff("[[teams]\n", apply=False)


def _attempts(deployment: str, ok: int, capacity: int, *, ago: timedelta) -> None:
    now = timezone.now() - ago
    for i in range(ok + capacity):
        call = CallRecord.objects.create(
            request_id=f"{deployment}-{ago.total_seconds()}-{i}",
            created_at=now,
            endpoint="chat",
            outcome="success",
            status_code=200,
        )
        Attempt.objects.create(
            call=call,
            number=1,
            deployment=deployment,
            started_at=now,
            duration_ms=1,
            error_class="capacity" if i < capacity else "",
        )


def test_capacity_error_share_over_windows_and_the_alert(demo, settings):
    settings.SLUICE_CAPACITY_ALERT_MIN_ATTEMPTS = 5
    _attempts("big", ok=6, capacity=4, ago=timedelta(minutes=1))  # 40 % in 5 min
    _attempts("big", ok=10, capacity=0, ago=timedelta(minutes=30))  # 20 % over the hour
    _attempts("small", ok=9, capacity=1, ago=timedelta(minutes=2))  # 10 %
    five = capacity_error_share(window=timedelta(minutes=5))
    hour = capacity_error_share(window=timedelta(hours=1))
    assert five["big"].share == pytest.approx(0.4) and hour["big"].share == pytest.approx(0.2)
    assert [name for name, _ in capacity_alerts()] == ["big"]
    board = {row.name: row for row in deployment_board()}
    assert board["big"].alert and not board["small"].alert
    assert board["big"].breaker == "closed" and board["big"].configured_limit == 4


def test_member_usage_adds_up_per_day_with_empty_days_kept(demo):
    from quotas.models import UsageRollup
    from quotas.selectors import member_usage

    member = demo["member"]
    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    for hour, calls in (
        (today + timedelta(minutes=1), 2),
        (today - timedelta(hours=3), 5),
        (today - timedelta(hours=5), 1),
        (today - timedelta(days=40), 9),
    ):
        UsageRollup.objects.create(
            hour=hour.replace(minute=0),
            key_prefix=f"k{calls}",
            deployment="big",
            member_id=member.pk,
            requests=calls,
            tokens_in=10 * calls,
            cost="0.5",
        )
    days = member_usage(member=member, days=30)
    assert len(days) == 30 and days[-1].day == today
    assert (days[-1].calls, days[-1].tokens) == (2, 20)
    assert (days[-2].calls, days[-2].tokens, days[-2].cost) == (6, 60, 1)
    assert sum(d.calls for d in days) == 8  # the 40-day-old hour is outside
