"""Instructions a call costs one gateway worker, counted by valgrind's callgrind: a figure
that stays put from run to run, where the CPU time of bench/overhead.py moves by 10-15 % on
a shared machine, so a change of a few per cent can be seen.

    .venv/bin/python bench/instructions.py [--calls 1200] [--rounds 3] [--concurrency 16]
                                           [--only KIND ...] [--baseline REF]

The gateway (uvicorn, one worker, SQLite, bench/overhead.py's config) runs under callgrind
with counting off while it starts and warms up; then, per kind of call (bench/overhead.py's
kinds but the paced one) and per run, the counters are zeroed, `--calls` calls are sent at
`--concurrency` in flight, and the counters read. Before each run the worker is left idle
for a while and counted too: what it spends each second on its own (the change reader, the
key prefixes' reload, the audit writer's rounds; the median of those idle spells) is taken
out of each run by the run's length, so a call's figure does not grow with the ~30x
slowdown of valgrind. Printed per kind: the median of the runs in millions of instructions
a call (all threads of the worker, user space: the kernel's work of the sends and receives
is not counted) and the spread of the runs around it; with `--baseline REF`, a gateway of
that git ref beside this checkout's, runs in alternation.

Under valgrind the audit writer flushes every 2 s instead of every 0.1 s: at valgrind's pace
that puts about as many calls in a flush as a loaded worker has, so a write's fixed cost
(its transaction, the rollups) is shared by as many calls as in production. The work done
every few minutes whatever the traffic (the full garbage collection, the capacity and budget
alerts) is put off past the bench: one of them in an idle spell or a run would swing it.
"""

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ROOT, Stack, stack
from loadgen import build_request, run_calls
from overhead import VERSUS, call_body, upstreams

KINDS = [kind for kind in VERSUS if "paced" not in kind[3]]
IDLE_SECONDS = 3.0
UNDER_VALGRIND = {
    "SLUICE_AUDIT_FLUSH_SECONDS": "2",
    "SLUICE_DB_REQUEST_SECONDS": "30",  # a reload ~30x slower is no database outage
    "SLUICE_GC_FULL_SECONDS": "86400",
    "SLUICE_CAPACITY_ALERT_EVERY_SECONDS": "86400",
    "SLUICE_BUDGET_ALERT_EVERY_SECONDS": "86400",
}


@dataclass
class Counted:
    """A gateway worker under callgrind: its port, its process and where its dumps land."""

    port: int
    pid: int
    dumps: Path

    def control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.pid)], check=True, capture_output=True)

    def count(self, action: Callable[[], object]) -> tuple[int, float]:
        """The instructions the worker ran during `action`, and the seconds it took."""
        self.control("--zero")
        started = time.monotonic()
        action()
        elapsed = time.monotonic() - started
        before = set(self.dumps.parent.glob(f"{self.dumps.name}.*"))
        self.control("--dump")
        total = 0
        for dump in set(self.dumps.parent.glob(f"{self.dumps.name}.*")) - before:
            total += summary(dump)
            dump.unlink()
        return total, elapsed


def summary(dump: Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {dump}")


def per_call(runs: list[tuple[int, float]], idle: float, calls: int) -> list[float]:
    """Millions of instructions a call in each run, less the worker's own for its length."""
    return [(total - idle * seconds) / calls / 1e6 for total, seconds in runs]


def start(s: Stack, name: str, source: Path = ROOT) -> Counted:
    dumps = s.tmp / f"callgrind-{name}.out"
    wrapper = (
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={dumps}",
        f"--log-file={s.tmp}/valgrind-{name}.log",
    )  # fmt: skip
    url, pids = s.gateway(env=UNDER_VALGRIND, wrapper=wrapper, source=source)
    return Counted(int(url.rsplit(":", 1)[1]), pids[-1], dumps)


def request(port: int, key: str, route: str, path: str, extra: dict) -> bytes:
    body = call_body(route, path, extra)
    return build_request("127.0.0.1", port, path, body, {"Authorization": f"Bearer {key}"})


def calls(gateway: Counted, payload: bytes, concurrency: int, count: int) -> None:
    """The calls, then a wait for the audit writer to write the last of them (its work is
    theirs, not the next idle spell's)."""
    result = asyncio.run(
        run_calls("127.0.0.1", gateway.port, payload, concurrency=concurrency, calls=count)
    )
    if result.errors or set(result.statuses) - {200}:
        print(f"    note: statuses {result.statuses}, connection errors {result.errors}")
    time.sleep(float(UNDER_VALGRIND["SLUICE_AUDIT_FLUSH_SECONDS"]) + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1200, help="calls a run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per kind and gateway")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--only", action="append", help="a kind to run, by its label (say chat); repeatable"
    )
    parser.add_argument("--baseline", help="git ref (say main) to count beside this checkout")
    args = parser.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        raise SystemExit("needs valgrind (Debian's package valgrind)")
    kinds = [k for k in KINDS if not args.only or k[0] in args.only]

    with stack() as s:
        _, _, key = upstreams(s)
        sides = {"this": start(s, "this")}
        if args.baseline:
            sides = {"before": start(s, "before", s.checkout(args.baseline)), **sides}
        print(
            f"Instructions a call (callgrind; one worker, SQLite; {args.calls} calls at "
            f"{args.concurrency} in flight a run, median of {args.rounds} runs, the worker's "
            "own idle rounds taken out; millions)"
        )
        for gateway in sides.values():  # warm: caches, connections, lazy imports
            for _, route, path, extra in kinds:
                payload = request(gateway.port, key, route, path, extra)
                calls(gateway, payload, args.concurrency, 200)
            gateway.control("--instr=on")
        header = "".join(f"{side:>14}{'±':>7}" for side in sides)
        print(f"  {'':30}{header}{'change' if args.baseline else '':>9}")
        idle: dict[str, list[float]] = {side: [] for side in sides}
        for label, route, path, extra in kinds:
            runs: dict[str, list[tuple[int, float]]] = {side: [] for side in sides}
            payloads = {side: request(g.port, key, route, path, extra) for side, g in sides.items()}
            for _ in range(args.rounds):
                for side, gateway in sides.items():
                    ran, _ = gateway.count(lambda: time.sleep(IDLE_SECONDS))
                    idle[side].append(ran / IDLE_SECONDS)
                    payload = payloads[side]
                    runs[side].append(
                        gateway.count(
                            lambda g=gateway, p=payload: calls(g, p, args.concurrency, args.calls)
                        )
                    )
            medians, line = [], f"  {label:30}"
            for side, counted in runs.items():
                each = per_call(counted, statistics.median(idle[side]), args.calls)
                medians.append(statistics.median(each))
                spread = (max(each) - min(each)) / 2 / medians[-1]
                line += f"{medians[-1]:14.3f}{spread * 100:6.1f}%"
            if args.baseline:
                line += f"{(medians[1] - medians[0]) / medians[0] * 100:+8.1f}%"
            print(line)
        print(
            f"  {'idle, a second':30}"
            + "".join(f"{statistics.median(r) / 1e6:14.1f}{'':7}" for r in idle.values())
        )


if __name__ == "__main__":
    main()
