"""The report and call explorer pages through Django's test client, for every role: what
each may open, what each sees (scope), 404 for a call out of scope, the CSV downloads
(header, totals, formula cells neutralised, streamed)."""

import csv
import io
import re
from datetime import timedelta

import pytest
from django.db import connections
from django.test import AsyncClient, Client
from django.utils import timezone

from console.csv_export import neutralise
from routing.models import Outcome
from tests.console.people import People, make_people
from tests.console.report_data import call, write

ROLES = ("staff", "team_admin", "member", "other_member", "other_team_admin")


@pytest.fixture
def people(db) -> People:
    return make_people(tag="rp")


@pytest.fixture
def calls(people):
    now = timezone.now() - timedelta(minutes=5)
    member, peer, rival = (people.keys[k] for k in ("member", "member_peer", "rival_member"))
    logs = [
        call(member, now, route="smart", served="big"),
        call(
            member,
            now - timedelta(minutes=1),
            route="smart",
            served="small",
            failed_on=(("big", "capacity"),),
        ),
        call(peer, now - timedelta(minutes=2), route="smart", served="big", stream=True),
        call(rival, now - timedelta(minutes=3), route="fast", served="small"),
        call(member, now - timedelta(minutes=4), served="", outcome=Outcome.RATE_LIMITED),
    ]
    write(logs)
    return {"member": logs[0], "failed_over": logs[1], "peer": logs[2], "rival": logs[3]}


def _client(people: People, role: str | None) -> Client:
    client = Client()
    if role:
        client.force_login(people.users[role])
    return client


@pytest.mark.parametrize(
    "path", ["/reports/", "/reports/served/", "/reports/weather/", "/calls/", "/calls/export.csv"]
)
def test_anonymous_visitors_go_to_the_login_page(people, path):
    response = _client(people, None).get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


@pytest.mark.parametrize("role", ROLES)
def test_every_role_opens_the_usage_report_and_sees_only_its_scope(people, calls, role):
    response = _client(people, role).get("/reports/", {"group_by": "member", "period": "day"})
    assert response.status_code == 200
    body = response.content.decode()
    visible = {
        "staff": {"member", "member_peer", "other_member"},
        "team_admin": {"member", "member_peer"},
        "member": {"member"},
        "other_member": {"other_member"},
        "other_team_admin": {"other_member"},
    }[role]
    for who in ("member", "member_peer", "other_member"):
        assert (people.email(who) in body) == (who in visible), who
    assert 'data-testid="report-totals"' in body


@pytest.mark.parametrize("role", ROLES)
def test_capacity_weather_is_for_admins_and_team_admins(people, calls, role):
    response = _client(people, role).get("/reports/weather/")
    assert response.status_code == (
        200 if role in ("staff", "team_admin", "other_team_admin") else 403
    )
    if role == "staff":
        assert b'data-testid="weather-big"' in response.content
        assert b"batch window suggestion" in response.content


@pytest.mark.parametrize("role", ROLES)
def test_requested_vs_served_per_role(people, calls, role):
    response = _client(people, role).get("/reports/served/", {"period": "day"})
    assert response.status_code == 200
    fast_visible = role in ("staff", "other_member", "other_team_admin")
    assert (b'data-route="fast"' in response.content) == fast_visible


def test_usage_report_shows_charts_with_a_table_alternative(people, calls):
    body = _client(people, "staff").get("/reports/", {"period": "day"}).content.decode()
    for key in ("calls", "tokens", "cost", "capacity"):
        assert f'data-testid="chart-{key}"' in body and f'data-testid="chart-table-{key}"' in body
    assert "<svg" in body and "Capacity-error share per deployment" in body


def test_a_bad_period_is_a_clear_400_not_a_500(people):
    client = _client(people, "staff")
    response = client.get(
        "/reports/", {"period": "custom", "since": "2026-02-31", "until": "2026-03-01"}
    )
    assert response.status_code == 400 and b"is not a day" in response.content
    response = client.get("/reports/", {"application": "nope"})
    assert response.status_code == 400 and b"No application" in response.content
    response = _client(people, "member").get("/reports/", {"team": people.rival.slug})
    assert response.status_code == 400  # a team out of scope is not found


def test_usage_csv_has_header_rows_and_a_totals_row_that_adds_up(people, calls):
    response = _client(people, "staff").get(
        "/reports/", {"group_by": "member", "period": "day", "format": "csv"}
    )
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode("utf-8"))))
    assert rows[0][:3] == ["member", "calls", "success"]
    body, totals = rows[1:-1], rows[-1]
    assert totals[0] == "Total"
    assert int(totals[1]) == sum(int(r[1]) for r in body) == 5


@pytest.mark.parametrize("role", ROLES)
def test_call_explorer_lists_calls_in_scope_only(people, calls, role):
    body = _client(people, role).get("/calls/").content.decode()
    expected = {
        "staff": {"member", "failed_over", "peer", "rival"},
        "team_admin": {"member", "failed_over", "peer"},
        "member": {"member", "failed_over"},
        "other_member": {"rival"},
        "other_team_admin": {"rival"},
    }[role]
    for name, log in calls.items():
        assert (log.request_id in body) == (name in expected), name


@pytest.mark.parametrize("role", ROLES)
def test_a_call_page_out_of_scope_is_404(people, calls, role):
    mine = role in ("staff", "team_admin", "member")
    response = _client(people, role).get(f"/calls/{calls['member'].request_id}/")
    assert response.status_code == (200 if mine else 404)


def test_call_page_shows_every_field_and_the_attempt_timeline(people, calls):
    log = calls["failed_over"]
    body = _client(people, "member").get(f"/calls/{log.request_id}/").content.decode()
    assert 'data-testid="timeline"' in body
    assert body.count('data-testid="attempt-row"') == 2
    assert "capacity" in body and "fell back" in body
    for label in ("Priority class", "Queued", "Tokens in · out", "Latency · first byte", "Key"):
        assert label in body


def test_lookup_by_request_id_opens_the_call_or_says_not_found(people, calls):
    client = _client(people, "member")
    response = client.get("/calls/", {"request_id": calls["member"].request_id})
    assert response.status_code == 302
    assert response["Location"] == f"/calls/{calls['member'].request_id}/"
    response = client.get("/calls/", {"request_id": calls["rival"].request_id})
    assert response.status_code == 200 and b'data-testid="not-found"' in response.content


def test_filters_narrow_the_list_and_bad_ones_are_400(people, calls):
    client = _client(people, "staff")
    body = client.get("/calls/", {"deployment": "small", "fell_back": "yes"}).content.decode()
    assert calls["failed_over"].request_id in body and calls["rival"].request_id not in body
    body = client.get("/calls/", {"stream": "yes"}).content.decode()
    assert calls["peer"].request_id in body and calls["member"].request_id not in body
    assert client.get("/calls/", {"outcome": "nope"}).status_code == 400
    assert client.get("/calls/", {"min_latency": "fast"}).status_code == 400
    assert client.get("/calls/", {"since": "yesterday"}).status_code == 400
    # A member may not name other members.
    member = _client(people, "member")
    assert member.get("/calls/", {"member": people.email("member_peer")}).status_code == 400


def test_keyset_paging_walks_every_call_once(people):
    key = people.keys["member"]
    now = timezone.now()
    logs = [call(key, now - timedelta(seconds=i // 2)) for i in range(120)]  # equal times too
    write(logs)
    client = _client(people, "member")
    seen, query = [], {}
    for _ in range(5):
        response = client.get("/calls/", query)
        page = response.context["page"]
        seen += [c.request_id for c in page.calls]
        if not page.next_cursor:
            break
        query = {"cursor": page.next_cursor}
    assert len(seen) == len(set(seen)) == 120
    assert client.get("/calls/", {"cursor": "garbage!"}).status_code == 400


def test_formula_cells_are_neutralised():
    assert neutralise("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    for start in "+-@\t":
        assert neutralise(start + "x").startswith("'")
    assert neutralise("plain") == "plain" and neutralise(-3) == -3


@pytest.mark.django_db(transaction=True)
async def test_call_csv_is_streamed_with_a_header_and_neutralised_cells():
    from asgiref.sync import sync_to_async

    people = await sync_to_async(make_people)(tag="csv")
    key = people.keys["member"]
    now = timezone.now()
    logs = [call(key, now - timedelta(seconds=i)) for i in range(7)]
    logs[0].error_message = "=cmd|' /C calc'!A0"
    logs[0].outcome = Outcome.UPSTREAM_ERROR
    await sync_to_async(write)(logs)
    client = AsyncClient()
    await sync_to_async(client.force_login)(people.users["member"])
    response = await client.get("/calls/export.csv")
    assert response.status_code == 200 and response.streaming
    chunks = [chunk async for chunk in response.streaming_content]
    assert len(chunks) >= 2  # the header first, then the batch
    rows = list(csv.reader(io.StringIO(b"".join(chunks).decode("utf-8"))))
    assert rows[0][:3] == ["request_id", "created_at", "member_email"]
    assert len(rows) == 8
    by_id = {r[0]: r for r in rows[1:]}
    message = by_id[logs[0].request_id][rows[0].index("error_message")]
    assert message == "'=cmd|' /C calc'!A0"
    # The streamed batches ran on asgiref's thread: close its connection, so the test
    # database can be dropped at the end of the session.
    await sync_to_async(connections.close_all)()


def test_a_call_page_shows_protocols_what_was_degraded_and_the_agent(people):
    log = call(people.keys["member"], timezone.now() - timedelta(minutes=1))
    log.client_protocol, log.upstream_protocol = "openai-responses", "openai"
    log.degraded = ["include.reasoning.encrypted_content: nothing of it to return"]
    log.user_agent = "codex_exec/0.171.0 (Debian 12.0.0; x86_64)"
    write([log])
    client = _client(people, "member")
    body = client.get(f"/calls/{log.request_id}/").content.decode()
    assert "openai-responses → openai" in body
    assert "include.reasoning.encrypted_content: nothing of it to return" in body
    assert "codex_exec/0.171.0" in body
    listed = client.get("/calls/?since=&user_agent=codex_exec").content.decode()
    assert log.request_id in listed
    assert log.request_id not in client.get("/calls/?since=&user_agent=claude-cli").content.decode()
    by_upstream = client.get("/calls/?since=&upstream_protocol=openai").content.decode()
    assert log.request_id in by_upstream
    assert 'data-testid="filter-upstream-protocol"' in by_upstream
    elsewhere = client.get("/calls/?since=&upstream_protocol=anthropic").content.decode()
    assert log.request_id not in elsewhere
    grouped = client.get("/calls/?since=&view=agents").content.decode()
    assert 'data-testid="agent-row"' in grouped and "<code>codex_exec</code>" in grouped
    assert "openai-responses → openai" in grouped


def test_the_agents_view_sorts_and_pages_like_every_table(people):
    now = timezone.now() - timedelta(minutes=1)
    logs = []
    for i, agent in enumerate(["zeta-cli/1", "alpha-cli/1", "mid-cli/1"]):
        for _ in range(i + 1):  # zeta 1 call, alpha 2, mid 3
            log = call(people.keys["member"], now)
            log.user_agent = agent
            logs.append(log)
    write(logs)
    client = _client(people, "member")

    def agents(query: str) -> list[str]:
        body = client.get(f"/calls/?since=&view=agents{query}").content.decode()
        return re.findall(r'data-testid="agent-row"><td><code>([^<]+)</code>', body)

    assert agents("") == ["mid-cli", "alpha-cli", "zeta-cli"]  # most calls first
    assert agents("&sort=agent") == ["alpha-cli", "mid-cli", "zeta-cli"]
    assert agents("&sort=-agent") == ["zeta-cli", "mid-cli", "alpha-cli"]
    body = client.get("/calls/?since=&view=agents").content.decode()
    assert 'data-testid="sort-agent"' in body and "view=agents" in body
