"""Closed-loop load from wrk (Debian's package), the tool the goals were first measured with.

wrk is C, one thread per core asked for: it takes far less CPU a call than bench/loadgen.py,
so on a small host more of the cores are left to the gateway and the upstream. It has no
warm-up of its own: a first run of a second, on its own connections, warms the gateway's
upstream pool; the counted run then opens its connections anew, so its first calls (one per
connection) are counted too, as wrk counts them.
"""

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# wrk's Lua hooks: the call, and a summary as one line of JSON (latencies in microseconds).
SCRIPT = """
wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
{headers}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{{"requests": %d, "duration_us": %d, "non2xx": %d, "errors": %d, "p50": %d, "p99": %d}}\\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


@dataclass
class WrkResult:
    requests: int
    seconds: float
    non2xx: int
    errors: int
    percentiles_ms: dict[float, float]

    def rps(self) -> float:
        return (self.requests - self.non2xx) / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        """Milliseconds (50 and 99 only: what wrk is asked for)."""
        return self.percentiles_ms[p]


def available() -> bool:
    return shutil.which("wrk") is not None


def _lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid Lua string literal for ASCII text


def run_wrk(
    url: str,
    body: dict,
    headers: dict[str, str],
    *,
    connections: int,
    seconds: float,
    threads: int = 1,
    warmed: Callable[[], None] | None = None,
) -> WrkResult:
    """`connections` calls in flight for `seconds`, after a warm-up second (`warmed` is
    called between the two)."""
    lines = "\n".join(
        f"wrk.headers[{_lua_string(k)}] = {_lua_string(v)}" for k, v in headers.items()
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(SCRIPT.format(body=_lua_string(json.dumps(body)), headers=lines))
        script = Path(f.name)
    try:
        for counted, duration in ((False, 1.0), (True, seconds)):
            if counted and warmed is not None:
                warmed()
            done = subprocess.run(
                ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(duration))}s",
                 "--timeout", "10s", "-s", str(script), url],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
    finally:
        script.unlink()
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return WrkResult(
        requests=summary["requests"],
        seconds=summary["duration_us"] / 1e6,
        non2xx=summary["non2xx"],
        errors=summary["errors"],
        percentiles_ms={q: summary[f"p{q}"] / 1000 for q in (50, 99)},
    )
