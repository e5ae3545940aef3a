"""The simulator's garbage collections, kept out of what it serves.

With thousands of streams open, CPython's full collections (each time its long-lived
objects grew by a quarter) stop the server for 50-150 ms, every few seconds while streams
open, and a benchmark run against the simulator counts each pause on whichever side it
falls. A server process (not the tests' in-process use) freezes what it loaded, collects
its young objects on Python's schedule (pauses of a few milliseconds) and the whole heap
once every `FULL_EVERY` seconds, as a gateway worker does.
"""

import gc
import threading
import time

FULL_EVERY = 300.0
_NEVER = 2**31 - 1  # a C int: the oldest generation's count never reaches it


def settle() -> None:
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, _NEVER)
    threading.Thread(target=_collect_on_a_clock, name="simulator-gc", daemon=True).start()


def _collect_on_a_clock() -> None:
    while True:
        time.sleep(FULL_EVERY)
        gc.collect()
