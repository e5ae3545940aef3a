"""The overview's last-24-hours charts through Django's test client, per role: the SVG with
its axes and units, the table alternative, each role's scope, capacity shares only for
those who manage, and an old call left out (at most 24 hours of rollups are read)."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from routing.models import Outcome
from tests.console.people import People, make_people
from tests.console.report_data import call, write

# Calls served on a deployment in each role's scope (the refused call has no deployment).
SERVED_IN_SCOPE = {"staff": 4, "team_admin": 3, "member": 2, "other_member": 1}


@pytest.fixture
def people(db) -> People:
    return make_people(tag="ov")


@pytest.fixture
def calls(people):
    now = timezone.now() - timedelta(minutes=5)
    member, peer, rival = (people.keys[k] for k in ("member", "member_peer", "rival_member"))
    write(
        [
            call(member, now, served="big"),
            call(
                member, now - timedelta(minutes=1), served="small", failed_on=(("big", "capacity"),)
            ),
            call(peer, now - timedelta(minutes=2), served="big"),
            call(rival, now - timedelta(minutes=3), served="small"),
            call(member, now - timedelta(minutes=4), served="", outcome=Outcome.RATE_LIMITED),
            # Two days ago: outside the 24 hours, never counted.
            call(member, now - timedelta(days=2), served="big"),
        ]
    )


def _overview(people: People, role: str) -> str:
    client = Client()
    client.force_login(people.users[role])
    response = client.get("/")
    assert response.status_code == 200
    return response.content.decode()


def _table_total(body: str, key: str) -> int:
    table = re.search(rf'data-testid="chart-table-{key}">(.*?)</table>', body, re.S)
    assert table, f"no table alternative for {key}"
    cells = re.findall(r"<tr><td>[^<]*</td>(.*?)</tr>", table.group(1), re.S)
    return sum(
        int(v.replace(",", "")) for row in cells for v in re.findall(r"<td>([\d,]+)</td>", row)
    )


@pytest.mark.parametrize("role", list(SERVED_IN_SCOPE))
def test_each_role_sees_charts_of_its_own_scope_with_axes_and_units(people, calls, role):
    body = _overview(people, role)
    for key in ("calls", "tokens", "cost"):
        assert f'data-testid="chart-{key}"' in body and f'data-testid="chart-table-{key}"' in body
    svg = re.search(r'<svg[^>]*data-testid="chart-calls".*?</svg>', body, re.S).group(0)
    assert ">calls</text>" in svg and "hour starting (UTC)" in svg  # y unit, x axis
    assert (
        len(
            re.findall(
                r"<tr><td>", body.split('data-testid="chart-table-calls"')[1].split("</table>")[0]
            )
        )
        == 24
    )
    assert _table_total(body, "calls") == SERVED_IN_SCOPE[role]
    assert _table_total(body, "tokens") == 30 * SERVED_IN_SCOPE[role]


@pytest.mark.parametrize("role,shown", [("staff", True), ("team_admin", True), ("member", False)])
def test_capacity_share_is_charted_only_for_those_who_manage(people, calls, role, shown):
    body = _overview(people, role)
    assert ('data-testid="chart-capacity"' in body) == shown
    assert ("Capacity-error share per deployment" in body) == shown


def test_without_calls_the_overview_says_so_instead_of_empty_charts(people):
    body = _overview(people, "member")
    assert 'data-testid="no-chart-data"' in body and "<svg" not in body


def test_anonymous_visitors_go_to_the_login_page(people):
    response = Client().get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
