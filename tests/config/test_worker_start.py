"""A worker imports every app's URLs and views and builds its upstream clients' TLS contexts
at its start, before it serves: left to its first request (or first upstream connection),
they held the event loop (0.3-0.4 s, then 30-40 ms) and every call that came in meanwhile."""

import json
import os
import subprocess
import sys

# In a new process: importing the ASGI application neither imports the URLs nor builds the
# TLS contexts; its lifespan startup does both, before it says the worker may serve.
_START = """
import asyncio, json, sys
from config.asgi import application
from routing.request_path import upstream_h2, upstream_http
clients = (upstream_http, upstream_h2)
def built():
    return [module.tls_context.cache_info().currsize for module in clients]
seen = {"imported": "console.urls" in sys.modules, "tls": built()}
async def main():
    messages = asyncio.Queue()
    await messages.put({"type": "lifespan.startup"})
    async def send(message):
        if message["type"] == "lifespan.startup.complete":
            seen["started"] = "console.urls" in sys.modules
            seen["tls at start"] = built()
            await messages.put({"type": "lifespan.shutdown"})
    await application({"type": "lifespan"}, messages.get, send)
asyncio.run(main())
print(json.dumps(seen))
"""


def test_urls_and_tls_contexts_are_ready_at_the_workers_start_not_its_first_call(tmp_path) -> None:
    env = os.environ | {"SLUICE_AUDIT_SPOOL_DIR": str(tmp_path / "spool")}
    done = subprocess.run(
        [sys.executable, "-c", _START], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"imported": False, "tls": [0, 0], "started": True, "tls at start": [1, 1]}
