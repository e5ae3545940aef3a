"""A worker imports every app's URLs and views at its start, before it serves: imported by
its first request instead, they held the event loop (0.3-0.4 s) and every call that came in
meanwhile."""

import json
import os
import subprocess
import sys

# In a new process: importing the ASGI application does not import the URLs; its lifespan
# startup does, before it says the worker may serve.
_START = """
import asyncio, json, sys
from config.asgi import application
seen = {"imported": "console.urls" in sys.modules}
async def main():
    messages = asyncio.Queue()
    await messages.put({"type": "lifespan.startup"})
    async def send(message):
        if message["type"] == "lifespan.startup.complete":
            seen["started"] = "console.urls" in sys.modules
            await messages.put({"type": "lifespan.shutdown"})
    await application({"type": "lifespan"}, messages.get, send)
asyncio.run(main())
print(json.dumps(seen))
"""


def test_the_urls_are_imported_by_the_workers_start_not_by_its_first_request(tmp_path) -> None:
    env = os.environ | {"SLUICE_AUDIT_SPOOL_DIR": str(tmp_path / "spool")}
    done = subprocess.run(
        [sys.executable, "-c", _START], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"imported": False, "started": True}
