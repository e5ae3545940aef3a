"""The call explorer and report pages on a big audit trail, and the CSV export of every call.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/seed_audit.py
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/call_explorer.py \\
        [--runs 20] [--skip-export]

Starts the gateway (uvicorn, one worker) on that database, logs in as the seeded admin and
member, and prints p50/p95 per page over `--runs` requests after a warm-up: the explorer's
first page with each filter, a page deep in the keyset (the 20th), a call's page, the
lookup by request id, and the reports over a day, a month and a whole year. Then it
downloads the CSV of every call in scope as the admin and prints rows, seconds, rows/s,
and the gateway's memory (RSS) before and at its peak during the export.
"""

import argparse
import csv
import io
import logging
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DATABASE_URL", "")

from console_pages import ids, login, percentile  # noqa: E402
from harness import stack  # noqa: E402

MARK_MS = 300.0
PAGES = [
    ("explorer, first visit (24 h)", "/calls/"),
    ("explorer, outcome=capacity_exhausted", "/calls/?since={day_ago}&outcome=capacity_exhausted"),
    ("explorer, served by small", "/calls/?since={day_ago}&deployment=small"),
    ("explorer, route smart, fell back", "/calls/?since={day_ago}&route=smart&fell_back=yes"),
    ("explorer, batch + streaming", "/calls/?since={day_ago}&priority=batch&stream=yes"),
    ("explorer, min latency 5 s", "/calls/?since={day_ago}&min_latency=5000"),
    ("explorer, one application", "/calls/?since={day_ago}&application={application_slug}"),
    ("explorer, key prefix", "/calls/?since={day_ago}&key={key_prefix}"),
    ("all time, outcome=capacity_exhausted", "/calls/?outcome=capacity_exhausted"),
    ("all time, served by small", "/calls/?deployment=small"),
    ("all time, batch + streaming", "/calls/?priority=batch&stream=yes"),
    ("all time, min latency 5 s", "/calls/?min_latency=5000"),
    ("explorer, 20th page", "{deep_page}"),
    ("lookup by request id", "/calls/?request_id={request_id}"),
    ("call page", "/calls/{request_id}/"),
    ("usage report, day", "/reports/?period=day&group_by=member"),
    ("usage report, month", "/reports/?period=month&group_by=deployment"),
    ("usage report, a year", "/reports/?period=custom&since={year_ago}&until={today}"),
    ("usage csv, month by key", "/reports/?period=month&group_by=key&format=csv"),
    ("requested vs served, month", "/reports/served/?period=month"),
    ("capacity weather", "/reports/weather/"),
]


def rss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total


def deep_page(client: httpx.Client, pages: int) -> str:
    """The URL of the explorer's `pages`-th page, following the Older links."""
    import re

    path = "/calls/"
    for _ in range(pages - 1):
        found = re.search(
            r'href="(\?[^"]*cursor=[^"]+)" data-testid="page-next"', client.get(path).text
        )
        if not found:
            break
        path = "/calls/" + found[1].replace("&amp;", "&")
    return path


def export(base: str, client: httpx.Client, pids: list[int]) -> None:
    peak = [rss_kb(pids)]
    before = peak[0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_kb(pids))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    rows = 0
    size = 0
    started = time.perf_counter()
    first_byte = None
    tail = b""
    with client.stream("GET", "/calls/export.csv", timeout=600) as response:
        for chunk in response.iter_bytes():
            if first_byte is None:
                first_byte = time.perf_counter() - started
            size += len(chunk)
            rows += chunk.count(b"\n")  # no cell holds a newline
            tail = chunk[-2000:]
    seconds = time.perf_counter() - started
    done.set()
    watcher.join()
    last = list(csv.reader(io.StringIO(tail.decode("utf-8", "replace"))))[-1]
    print("\nCSV export of every call (admin, no filter)")
    print(
        f"  rows {rows - 1:,} (+ header), {size / 1e6:.0f} MB, {seconds:.1f} s, "
        f"{(rows - 1) / seconds:,.0f} rows/s, first byte after {first_byte * 1000:.0f} ms"
    )
    print(
        f"  gateway RSS {before / 1024:.0f} MB before, {peak[0] / 1024:.0f} MB at peak "
        f"(last row {last[0]})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--password", default="bench-pass-1")
    parser.add_argument("--skip-export", action="store_true")
    parser.add_argument("--export-only", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated page names (substrings)")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        raise SystemExit("set DATABASE_URL to the database bench/seed_audit.py filled")
    from datetime import UTC, datetime, timedelta

    fill = ids()  # sets Django up
    from accounts.models import ApiKey, Member
    from routing.models import CallRecord

    member = Member.objects.get(user__email="bench-member@example.com")
    fill["key_prefix"] = ApiKey.objects.filter(member=member).values_list("prefix", flat=True)[0]
    now = datetime.now(UTC)
    fill |= {
        "now": now.strftime("%Y-%m-%dT%H:%M"),
        "day_ago": (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"),
        "year_ago": (now - timedelta(days=365)).strftime("%Y-%m-%d"),
        "today": now.strftime("%Y-%m-%d"),
    }
    total = CallRecord.objects.count()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with stack() as s:
        base, pids = s.gateway(env={"SLUICE_LOG_LEVEL": "ERROR"})
        clients = {
            "admin": login(base, "bench-admin@example.com", args.password),
            "member": login(base, "bench-member@example.com", args.password),
        }
        print(f"{total:,} calls in the database; {args.runs} runs per page after a warm-up; ms")
        print(f"{'page':<38} {'admin p50':>9} {'p95':>7}  {'member p50':>10} {'p95':>7}  status")
        slow = []
        wanted = [
            (name, path)
            for name, path in PAGES
            if not args.only or any(o in name for o in args.only.split(","))
        ]
        for name, template in [] if args.export_only else wanted:
            cells, statuses = [], []
            for role, client in clients.items():
                fill["deep_page"] = deep_page(client, 20) if "{deep_page}" in template else ""
                path = template.format(**fill)
                client.get(path)
                times, status = [], 0
                for _ in range(args.runs):
                    started = time.perf_counter()
                    status = client.get(path).status_code
                    times.append((time.perf_counter() - started) * 1000)
                p50, p95 = statistics.median(times), percentile(times, 0.95)
                flag = "*" if p95 > MARK_MS and status == 200 else " "
                if flag == "*":
                    slow.append(f"{name} ({role}) p95 {p95:.0f} ms")
                cells.append(f"{p50:9.1f} {p95:7.1f}{flag}")
                statuses.append(f"{role} {status}")
            print(f"{name:<38} {cells[0]}  {cells[1]:>18}  {', '.join(statuses)}")
        print("over 300 ms at p95: " + ("; ".join(slow) if slow else "none"))
        if not args.skip_export:
            export(base, clients["admin"], pids)
        for client in clients.values():
            client.close()


if __name__ == "__main__":
    main()
