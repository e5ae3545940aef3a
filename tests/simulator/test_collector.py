"""A simulator server process keeps full garbage collections out of what it serves: what it
loaded frozen, young objects collected as Python does, the whole heap only on its clock.
Run in a process of its own: the collector's settings are the whole interpreter's."""

import json
import subprocess
import sys

_PROBE = """
import gc, json
from simulator import collector
collector.settle()
settled = gc.get_stats()[2]["collections"]
held = [[n] for n in range(300_000)]  # objects that live on, as open streams' do
print(json.dumps({
    "full_after_settling": gc.get_stats()[2]["collections"] - settled,
    "young": gc.get_stats()[0]["collections"],
    "frozen": gc.get_freeze_count(),
    "thresholds": gc.get_threshold(),
}))
"""


def test_objects_piling_up_in_a_server_process_cause_no_full_collection() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(out.stdout)
    assert seen["full_after_settling"] == 0  # Python's own schedule would run several
    assert seen["young"] > 0
    assert seen["frozen"] > 1000  # the modules loaded before serving
    assert seen["thresholds"][2] > 10**9
