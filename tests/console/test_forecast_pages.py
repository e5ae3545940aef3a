"""Budget forecasts on the console's Limits page and Overview, per role: each sees the
forecast of the limits it may see (team admins their team's, members their own and their
team's), the empty state where there is too little data, and never another team's."""

import re
from datetime import UTC, timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from quotas.models import Limit, Scope, UsageRollup
from tests.console.people import make_people


def _spend(key, days: int, cost: float) -> None:
    """`cost` a day on each of the last `days` whole days (UTC, the teams' zone here)."""
    today = timezone.now().astimezone(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    for i in range(1, days + 1):
        UsageRollup.objects.create(
            hour=today - timedelta(days=i),
            key_prefix=key.prefix,
            deployment="small",
            member_id=key.member_id,
            application_id=key.application_id,
            team_id=key.application.team_id,
            requests=1,
            tokens_in=100,
            cost=Decimal(str(cost)),
        )


@pytest.fixture
def budget_world(db):
    people = make_people(tag="fc")
    alice, bob = people.keys["member"], people.keys["member_peer"]
    _spend(alice, 20, 3.0)
    _spend(bob, 20, 2.0)  # carl (rival) spent nothing: his team's forecast has no data
    Limit.objects.create(scope=Scope.TEAM, team=people.home, cost_per_month=Decimal("100"))
    Limit.objects.create(scope=Scope.MEMBER, member=alice.member, cost_per_month=Decimal("40"))
    Limit.objects.create(scope=Scope.MEMBER, member=bob.member, cost_per_month=Decimal("900"))
    Limit.objects.create(scope=Scope.TEAM, team=people.rival, cost_per_month=Decimal("100"))
    return people


def _client(people, role: str) -> Client:
    client = Client()
    client.force_login(people.users[role])
    return client


def _forecast_cells(html: str) -> dict[tuple[str, str], str]:
    """(scope, name) -> the row's forecast cell."""
    cells = {}
    for m in re.finditer(
        r'data-testid="limit-row" data-scope="(\w+)" data-name="([^"]+)">(.*?)</tr>', html, re.S
    ):
        cell = re.search(r'<td data-testid="forecast">(.*?)</td>\s*<td', m[3], re.S)
        assert cell, m[0]
        cells[(m[1], m[2])] = cell[1]
    return cells


def _names(people):
    return {
        "home": ("team", people.home.slug),
        "rival": ("team", people.rival.slug),
        "alice": ("member", people.email("member")),
        "bob": ("member", people.email("member_peer")),
    }


SEES = {
    "member": {"home", "alice"},
    "team_admin": {"home", "alice", "bob"},
    "other_member": {"rival"},
    "other_team_admin": {"rival"},
    "staff": {"home", "rival", "alice", "bob"},
}


@pytest.mark.parametrize("role", sorted(SEES))
def test_limits_page_shows_the_forecasts_each_role_may_see(budget_world, role):
    response = _client(budget_world, role).get("/limits/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Month-end forecast" in html
    cells = _forecast_cells(html)
    names = _names(budget_world)
    assert set(cells) == {names[n] for n in SEES[role]}
    for who in SEES[role]:
        cell = cells[names[who]]
        if who == "rival":
            assert "not enough data yet" in cell and 'data-testid="forecast-cost"' not in cell
        else:
            assert 'data-testid="forecast-cost"' in cell and "not enough data" not in cell
            assert "$" in cell and "/day" in cell
    if "alice" in SEES[role]:
        # $3 a day against $40; the cell names the daily rate in dollars.
        assert "$3.00/day" in cells[names["alice"]]
    for who in {"home", "rival", "alice", "bob"} - SEES[role]:
        assert names[who][1] not in html


@pytest.mark.parametrize("role", sorted(SEES))
def test_overview_lists_the_budgets_each_role_may_see(budget_world, role):
    html = _client(budget_world, role).get("/").content.decode()
    section = html[html.index('data-testid="budget-forecasts"') : html.index('id="board"')]
    rows = set(
        re.findall(r'data-testid="budget-row" data-scope="(\w+)" data-name="([^"]+)"', section)
    )
    names = _names(budget_world)
    assert rows == {names[n] for n in SEES[role]}
    if "rival" in SEES[role]:
        assert "not enough data yet" in section


def test_my_usage_shows_the_forecasts_of_the_members_own_limits(budget_world):
    html = _client(budget_world, "member").get("/usage/").content.decode()
    cells = _forecast_cells(html)
    names = _names(budget_world)
    assert set(cells) == {names["home"], names["alice"]}
    assert "$3.00/day" in cells[names["alice"]] and "$5.00/day" in cells[names["home"]]


def test_overview_without_budgets_says_so(db):
    people = make_people(tag="fc0")
    html = _client(people, "member").get("/").content.decode()
    assert 'data-testid="no-budgets"' in html and 'data-testid="budget-row"' not in html
