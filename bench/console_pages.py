"""How long every console page takes on a big audit trail, for an admin and for a member.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/seed_audit.py
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/console_pages.py \\
        [--runs 20] [--only keys,usage] [--baseline main] 2>/dev/null

Starts the gateway under uvicorn (one worker) on that database, logs in through the login
form as bench-admin@example.com (staff) and as bench-member@example.com (the member with the
most calls), then opens every page `--runs` times in turn (after one warm-up) and prints
p50 and p95 per page for the two roles side by side, with the status each got (a member is
refused admin pages: 403, or 404 for an object out of scope). The mark is 300 ms at p95
(docs/benchmarks.md). Pages not built yet answer 404 for both roles. The table goes to stdout; the
gateway logs every 403 with a traceback on stderr (add `2>/dev/null` to drop it).

`--baseline REF` runs a second gateway from git ref REF (exported with `git archive`) on the
same database and times each page on both in turn, run by run, so load on the machine falls
on both alike; the table then shows before and after per role.
"""

import argparse
import logging
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from harness import stack  # noqa: E402

MARK_MS = 300.0


@dataclass(frozen=True)
class Page:
    name: str
    path: str  # may hold {placeholders} filled from `ids()`


# Every console page (docs/development.md lists them), with the reports and the call explorer.
PAGES = [
    Page("overview", "/"),
    Page("board (refresh)", "/board/"),
    Page("alerts (refresh)", "/alerts/"),
    Page("keys", "/keys/"),
    Page("key create form", "/keys/new/"),
    Page("teams", "/teams/"),
    Page("team", "/teams/{team_slug}/"),
    Page("members", "/members/"),
    Page("member", "/members/{member_id}/"),
    Page("applications", "/applications/"),
    Page("application", "/applications/{application_slug}/"),
    Page("limits", "/limits/"),
    Page("deployments", "/deployments/"),
    Page("config", "/config/"),
    Page("config export", "/config/export.toml"),
    Page("my usage", "/usage/"),
    Page("actions log", "/actions/"),
    Page("usage report (day)", "/reports/?period=day&group_by=member"),
    Page("usage report (week)", "/reports/"),
    Page("usage report (month)", "/reports/?period=month&group_by=member"),
    # The calendar month may have just begun: the last 30 days hold the whole seeded trail.
    Page(
        "usage report (30 days)",
        "/reports/?period=custom&since={days_ago_29}&until={today}&group_by=member",
    ),
    Page(
        "usage report (year)",
        "/reports/?period=custom&since={year_ago}&until={today}&group_by=member",
    ),
    Page("usage report csv", "/reports/?period=month&group_by=key&format=csv"),
    Page("requested vs served", "/reports/served/?period=month"),
    Page(
        "requested vs served (30 days)",
        "/reports/served/?period=custom&since={days_ago_29}&until={today}",
    ),
    Page(
        "requested vs served (year)",
        "/reports/served/?period=custom&since={year_ago}&until={today}",
    ),
    Page("capacity weather", "/reports/weather/"),
    Page("calls (explorer)", "/calls/"),
    Page("calls, by outcome", "/calls/?outcome=capacity_exhausted"),
    Page("call", "/calls/{request_id}/"),
]


def ids() -> dict[str, str]:
    """Objects the pages with an id open: the bench member's own, so both roles may."""
    import django

    django.setup()
    from accounts.models import Member
    from routing.models import CallRecord

    member = Member.objects.select_related("user", "team").get(
        user__email="bench-member@example.com"
    )
    call = (
        CallRecord.objects.filter(member_id=member.pk, attempt_count__gt=1)
        .order_by("-created_at")
        .only("request_id")
        .first()
    )
    today = datetime.now(UTC).date()
    return {
        "today": f"{today:%Y-%m-%d}",
        "days_ago_29": f"{today - timedelta(days=29):%Y-%m-%d}",
        "year_ago": f"{today - timedelta(days=364):%Y-%m-%d}",
        "member_id": str(member.pk),
        "team_slug": member.team.slug,
        "application_slug": member.api_keys.first().application.slug,
        "request_id": call.request_id if call else "none",
    }


def login(base: str, email: str, password: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=30)
    page = client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    if page.status_code != 200 or token is None:
        raise SystemExit(f"no login form at {base}/login/ ({page.status_code})")
    done = client.post(
        "/login/",
        data={"username": email, "password": password, "csrfmiddlewaretoken": token[1]},
    )
    if done.status_code != 302:
        raise SystemExit(f"login as {email} failed ({done.status_code})")
    return client


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def time_pages(clients: list[httpx.Client], path: str, runs: int) -> list[tuple[int, list[float]]]:
    """Each client (a gateway) in turn, run by run, after one warm-up each: templates, the
    pool, caches."""
    for client in clients:
        client.get(path)
    times: list[list[float]] = [[] for _ in clients]
    status = [0] * len(clients)
    for _ in range(runs):
        for i, client in enumerate(clients):
            started = time.perf_counter()
            answer = client.get(path)
            times[i].append((time.perf_counter() - started) * 1000)
            status[i] = answer.status_code
    return list(zip(status, times, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--password", default="bench-pass-1")
    parser.add_argument("--only", default="", help="comma-separated page names (substrings)")
    parser.add_argument("--baseline", default="", help="git ref of a 'before' gateway")
    args = parser.parse_args()
    if "DATABASE_URL" not in os.environ:
        raise SystemExit("set DATABASE_URL to the database bench/seed_audit.py filled")

    fill = ids()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # Django's settings log requests
    pages = [p for p in PAGES if not args.only or any(o in p.name for o in args.only.split(","))]
    with stack() as s:
        gateways = []
        if args.baseline:
            gateways.append((args.baseline, s.gateway(source=s.checkout(args.baseline))[0]))
        gateways.append(("after" if args.baseline else "", s.gateway()[0]))
        roles = {
            role: [login(base, email, args.password) for _, base in gateways]
            for role, email in (
                ("admin", "bench-admin@example.com"),
                ("member", "bench-member@example.com"),
            )
        }
        fmt: Callable[[float], str] = lambda ms: f"{ms:7.1f}"  # noqa: E731
        print(f"{args.runs} runs per page after one warm-up; ms; * = p95 over {MARK_MS:.0f} ms")
        heads = [f"{role} {name}".strip() for role in roles for name, _ in gateways]
        print(
            f"{'page':<30} " + "  ".join(f"{h + ' p50':>16} {'p95':>7}" for h in heads) + "  status"
        )
        slow = []
        for page in pages:
            path = page.path.format(**fill)
            cells, statuses = [], []
            for role, clients in roles.items():
                for (name, _), (status, times) in zip(
                    gateways, time_pages(clients, path, args.runs), strict=True
                ):
                    p50, p95 = statistics.median(times), percentile(times, 0.95)
                    flag = "*" if p95 > MARK_MS and status == 200 else " "
                    who = f"{role} {name}".strip()
                    if flag == "*":
                        slow.append(f"{page.name} ({who}): p95 {p95:.0f} ms")
                    cells.append(f"{fmt(p50):>16} {fmt(p95)}{flag}")
                    statuses.append(f"{who} {status}")
            print(f"{page.name:<30} {' '.join(cells)}  {', '.join(statuses)}")
        print("over the mark: " + ("; ".join(slow) if slow else "none"))
        for clients in roles.values():
            for client in clients:
                client.close()


if __name__ == "__main__":
    main()
