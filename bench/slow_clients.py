"""Slow and silent clients: how many connections that never finish their headers are still
open after the header deadline, and what a normal client waits meanwhile, with uvicorn's
own httptools protocol (baseline) and with Sluice's (config/http_protocol.py), in one run.

    .venv/bin/python bench/slow_clients.py [--connections 1000] [--deadline 5]
"""

import argparse
import asyncio
import resource
import statistics
import time

import httpx
from harness import stack

PROTOCOLS = {
    "uvicorn httptools": "httptools",
    "SluiceHttpProtocol": "config.http_protocol:SluiceHttpProtocol",
}


_held: list[asyncio.StreamWriter] = []  # a writer dropped closes its connection


async def _silent(port: int) -> asyncio.StreamReader:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    _held.append(writer)
    return reader


async def _trickle(port: int, stop: asyncio.Event) -> asyncio.StreamReader:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    _held.append(writer)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")

    async def drip() -> None:
        while not stop.is_set() and not writer.is_closing():
            try:
                writer.write(b"a")
                await writer.drain()
            except ConnectionError:
                return
            await asyncio.sleep(1.0)

    asyncio.get_running_loop().create_task(drip())
    return reader


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        await asyncio.wait_for(reader.read(), 0.01)
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return reader.at_eof()


async def _probe(url: str, rounds: int = 20) -> list[float]:
    took = []
    async with httpx.AsyncClient() as client:
        for _ in range(rounds):
            started = time.perf_counter()
            (await client.get(f"{url}/healthz")).raise_for_status()
            took.append((time.perf_counter() - started) * 1000)
    return took


async def measure(url: str, connections: int, deadline: float) -> tuple[int, int, float]:
    port = int(url.rsplit(":", 1)[1])
    stop = asyncio.Event()
    half = connections // 2
    silent = [await _silent(port) for _ in range(half)]
    trickling = [await _trickle(port, stop) for _ in range(connections - half)]
    await asyncio.sleep(deadline + 3)
    took = await _probe(url)
    open_silent = sum([not await _closed(r) for r in silent])
    open_trickling = sum([not await _closed(r) for r in trickling])
    stop.set()
    for writer in _held:
        writer.close()
    _held.clear()
    return open_silent, open_trickling, statistics.median(took)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--deadline", type=float, default=5.0)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    half = args.connections // 2
    print(
        f"{half} silent + {args.connections - half} trickling connections (a header byte a "
        f"second); counted {args.deadline + 3:g} s after opening; SLUICE_HEADER_TIMEOUT="
        f"{args.deadline:g}"
    )
    print(f"{'protocol':<22}{'silent open':>13}{'trickling open':>16}{'healthz p50 ms':>16}")
    with stack() as s:
        s.manage("migrate", "-v0")
        for label, http in PROTOCOLS.items():
            url, _ = s.gateway(env={"SLUICE_HEADER_TIMEOUT": str(args.deadline)}, http=http)
            silent, trickling, p50 = asyncio.run(measure(url, args.connections, args.deadline))
            print(f"{label:<22}{silent:>13}{trickling:>16}{p50:>16.2f}")
            s.stop_last()


if __name__ == "__main__":
    main()
