"""The audit spool's file work on the event loop, per flush, side by side with a baseline.

    .venv/bin/python bench/audit_spool.py [--flushes 300] [--calls 60] [--baseline main]

A worker's audit writer seals its spool file at every flush (10 a second by default) and
deletes it once the calls in it are committed. What of that runs on the event loop is what
every call in flight waits for. Per flush this replays the loop's part, as
routing/observability/audit.py does it: `calls` lines appended (about 900 bytes each, the
size of a real call's line), the file sealed; the rest on a thread of its own, as the
writer's: a sealed file closed and the next opened ahead (`tidy`, where the Spool has it),
the written file deleted. A Spool without `tidy` (before the file work left the loop) is
replayed as it ran: its seal closed the file, the next call's line opened one, the delete
ran on the loop. Meanwhile another thread commits to the same disk (write + fsync, as the
audit database does), so the file system's journal is as busy as on a serving host.

Printed per version: the loop's time per flush (p50 / p99 / max, µs) and its share of a
second at 10 flushes a second.
"""

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SPOOL = "routing/observability/audit_spool.py"
LINE = b'{"request_id":"req_' + b"x" * 880 + b'"}\n'


def spool_module(ref: str | None, scratch: Path) -> ModuleType:
    """audit_spool.py of this checkout, or of git ref `ref` (it imports no other module of
    Sluice)."""
    path = ROOT / SPOOL
    if ref is not None:
        path = scratch / f"audit_spool_{ref.replace('/', '_')}.py"
        shown = subprocess.run(
            ["git", "show", f"{ref}:{SPOOL}"], cwd=ROOT, check=True, capture_output=True
        )
        path.write_bytes(shown.stdout)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def journal_load(folder: Path, stop: threading.Event) -> None:
    """Small commits with fsync, as a database on the same disk makes them."""
    with open(folder / "commits", "ab") as out:
        while not stop.is_set():
            out.write(b"x" * 4096)
            out.flush()
            os.fsync(out.fileno())
            time.sleep(0.002)


def replay(module: ModuleType, folder: Path, flushes: int, calls: int) -> list[float]:
    """The loop's seconds per flush."""
    spool = module.Spool(folder)
    tidies = hasattr(spool, "tidy")
    writer = ThreadPoolExecutor(max_workers=1)
    loop_time = []
    for _ in range(flushes):
        started = time.perf_counter()
        for _ in range(calls):
            spool.append(LINE)
        sealed = spool.seal()
        if not tidies:
            module.Spool.discard([sealed])
        loop_time.append(time.perf_counter() - started)
        if tidies:
            writer.submit(lambda s=sealed: (module.Spool.discard([s]), spool.tidy()))
        time.sleep(0.01)  # the rest of the 0.1 s between flushes, shortened
    writer.shutdown()
    if tidies:
        spool.close()
    return loop_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flushes", type=int, default=300)
    parser.add_argument("--calls", type=int, default=60, help="calls a flush writes")
    parser.add_argument("--baseline", metavar="REF", help="git ref to compare with")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each, in turns")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-spool-", dir=ROOT) as scratch:
        folder = Path(scratch)
        versions = {"this checkout": spool_module(None, folder)}
        if args.baseline:
            versions = {args.baseline: spool_module(args.baseline, folder)} | versions
        stop = threading.Event()
        load = threading.Thread(target=journal_load, args=(folder, stop), daemon=True)
        load.start()
        print(
            f"Audit spool, the loop's part of a flush ({args.calls} calls, {args.flushes} "
            f"flushes a run, commits with fsync beside it; {ROOT} on its disk)"
        )
        print(f"  {'version':24}{'p50 µs':>9}{'p99 µs':>9}{'max µs':>9}{'loop ms/s':>11}")
        for _ in range(args.rounds):
            for name, module in versions.items():
                times = sorted(replay(module, folder / name.replace("/", "_"), args.flushes,
                                      args.calls))  # fmt: skip
                p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
                print(
                    f"  {name:24}{p50 * 1e6:9.0f}{p99 * 1e6:9.0f}{times[-1] * 1e6:9.0f}"
                    f"{sum(times) / len(times) * 10 * 1000:11.2f}"
                )
        stop.set()
        load.join()


if __name__ == "__main__":
    sys.exit(main())
