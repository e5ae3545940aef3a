"""What a Lua script call costs a worker, through redis-py and through Sluice's own
connection (core/redis_wire.py), side by side in one run.

    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/redis_scripts.py [--calls 3000]

The script is the deployment state's spare-slot look (`snapshot`, with its 15 keys and six
arguments, as a call sends it) on a throw-away key prefix. Each client runs `calls` calls one
after another, then the same with eight in flight at a time, on uvloop as the gateway does;
printed: the process's CPU (user and system) and wall time per call, and the server's own
time per script (INFO commandstats).
"""

import argparse
import asyncio
import os
import resource
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aredis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
IN_FLIGHT = 8


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


async def measure(call: Callable[[], Awaitable[Any]], calls: int, in_flight: int) -> str:
    async def worker(n: int) -> None:
        for _ in range(n):
            await call()

    await call()  # connected, script loaded
    user, system = cpu()
    started = time.perf_counter()
    await asyncio.gather(*(worker(calls // in_flight) for _ in range(in_flight)))
    wall = time.perf_counter() - started
    user2, system2 = cpu()
    done = calls // in_flight * in_flight
    return (
        f"{(user2 - user) / done * 1e6:8.0f} {(system2 - system) / done * 1e6:8.0f} "
        f"{wall / done * 1e6:8.0f}"
    )


async def server_us(client: aredis.Redis) -> tuple[float, int]:
    stats = (await client.info("commandstats")).get("cmdstat_evalsha", {})
    return float(stats.get("usec", 0)), int(stats.get("calls", 0))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = f"bench-scripts-{uuid.uuid4().hex[:8]}"
    keys = [f"{prefix}:dep:{{d}}:{i}" for i in range(15)]
    argv = [time.time(), f"{prefix}:dep:{{d}}", f"{prefix}:grants", 8, 6.0, 0.2]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from core.redis_wire import Script, ScriptWire
    from routing.deployment_state.redis import SCRIPTS

    source = SCRIPTS.sources["snapshot"]
    client = aredis.Redis.from_url(url)
    registered = client.register_script(source)
    wire, script = ScriptWire(url), Script(source)
    sides: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("redis-py", lambda: registered(keys=keys, args=argv)),
        ("Sluice's connection", lambda: wire.run(script, keys, argv)),
    ]
    print(f"One Lua script call (the spare-slot look), {args.calls} calls, {url}")
    print(f"{'':34} {'user µs':>8} {'sys µs':>8} {'wall µs':>8} {'server µs':>9}")
    for label, call in sides:
        for in_flight in (1, IN_FLIGHT):
            before = await server_us(client)
            row = await measure(call, args.calls, in_flight)
            after = await server_us(client)
            server = (after[0] - before[0]) / max(1, after[1] - before[1])
            print(f"  {label + f', {in_flight} in flight':32} {row} {server:9.1f}")
    wire.close()
    await client.aclose()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
