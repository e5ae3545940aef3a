"""Budget forecasts read from the rollups: per team, application, member and key, in the
team's local days."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from quotas.forecast import INSUFFICIENT, RECENT, WEEKDAY
from quotas.models import Limit, Scope, UsageRollup
from quotas.selectors import budget_forecasts, limit_rows
from tests.console.people import make_people

BERLIN = ZoneInfo("Europe/Berlin")
# Friday 26 June 2026, noon in Berlin: half of the local day gone.
NOW = datetime(2026, 6, 26, 12, tzinfo=BERLIN)


def spend(key, at: datetime, cost: float, tokens: int = 1000) -> None:
    UsageRollup.objects.create(
        hour=at.astimezone(UTC).replace(minute=0),
        key_prefix=key.prefix,
        deployment="small",
        member_id=key.member_id,
        application_id=key.application_id,
        team_id=key.application.team_id,
        requests=1,
        tokens_in=tokens,
        tokens_out=0,
        cost=Decimal(str(cost)),
    )


@pytest.fixture
def people(db):
    people = make_people(tag="forecast")
    for team in (people.home, people.rival):
        team.time_zone = "Europe/Berlin"
        team.save()
    key = people.keys["member"]
    # Five weeks of weekday-only spend at 10:00 local: $10 a working day, nothing at weekends.
    day = NOW.replace(hour=10) - timedelta(days=35)
    while day.date() < NOW.date():
        if day.weekday() < 5:
            spend(key, day, 10.0)
        day += timedelta(days=1)
    spend(key, NOW.replace(hour=9), 4.0)  # this morning
    return people


def limits(people, **budget):
    key = people.keys["member"]
    member = key.member
    made = {
        "team": Limit.objects.create(scope=Scope.TEAM, team=people.home, **budget),
        "application": Limit.objects.create(
            scope=Scope.APPLICATION, application=people.home_app, **budget
        ),
        "member": Limit.objects.create(scope=Scope.MEMBER, member=member, **budget),
        "key": Limit.objects.create(scope=Scope.KEY, api_key=key, **budget),
        "rival": Limit.objects.create(scope=Scope.TEAM, team=people.rival, **budget),
    }
    return made


def test_every_scope_of_the_spender_gets_the_same_weekday_forecast(people):
    made = limits(people, cost_per_month=Decimal("300"), tokens_per_month=10**9)
    found = budget_forecasts(list(Limit.objects.all()), now=NOW.timestamp())
    # June 1-25: 19 working days x $10, and $4 this morning.
    for name in ("team", "application", "member", "key"):
        cost = found[made[name].pk]["cost_per_month"]
        assert cost.basis == WEEKDAY, name
        assert cost.spent == pytest.approx(194.0)
        # The rest of today (half a working day), Monday 29th and Tuesday 30th; weekend 0.
        assert cost.projected == pytest.approx(194 + 5 + 20)
        assert cost.budget == 300.0 and cost.runs_out_on is None
        tokens = found[made[name].pk]["tokens_per_month"]
        assert tokens.spent == pytest.approx(20 * 1000)
    rival = found[made["rival"].pk]["cost_per_month"]
    assert rival.basis == INSUFFICIENT and rival.spent == 0


def test_a_limit_without_a_monthly_budget_has_no_forecast(people):
    team = Limit.objects.create(scope=Scope.TEAM, team=people.home, tokens_per_day=1000)
    assert budget_forecasts([team], now=NOW.timestamp()) == {}
    (row,) = limit_rows([team], now=NOW.timestamp(), forecast=True)
    assert row.forecasts == {}


def test_days_are_the_teams_local_days(people):
    """23:30 UTC on 31 May is 01:30 on 1 June in Berlin: June's spend, not May's."""
    spend(people.keys["member"], datetime(2026, 5, 31, 23, 30, tzinfo=UTC), 50.0)
    made = limits(people, cost_per_month=Decimal("200"))
    found = budget_forecasts([made["team"]], now=NOW.timestamp())
    cost = found[made["team"].pk]["cost_per_month"]
    assert cost.spent == pytest.approx(244.0)
    # $50 on the 1st and $10 a working day reach $200 on the 15th working day, Friday 19th.
    assert cost.runs_out_on == datetime(2026, 6, 19).date()


def test_limit_rows_carry_forecasts_only_when_asked(people):
    made = limits(people, cost_per_month=Decimal("300"))
    plain = limit_rows([made["team"]], now=NOW.timestamp())
    assert plain[0].forecasts == {}
    (row,) = limit_rows([made["team"]], now=NOW.timestamp(), forecast=True)
    assert row.forecasts["cost_per_month"].basis in (RECENT, WEEKDAY)
