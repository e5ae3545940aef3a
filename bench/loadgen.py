"""A lean HTTP/1.1 load generator for the benchmarks.

Keep-alive connections over raw asyncio streams, one coroutine per connection, so the
client costs far less CPU per request than httpx would and the figures describe the server.
Parses Content-Length and chunked bodies; that is all the gateway and simulator send.
"""

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class LoadResult:
    latencies: list[float] = field(default_factory=list)  # seconds, successful requests
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    elapsed: float = 0.0
    # Each connection's first call (a run with a warm-up): sent together on new connections.
    burst: list[float] = field(default_factory=list)
    counting: bool = True  # False while a warm-up runs

    @property
    def ok(self) -> int:
        return len(self.latencies)

    def merge(self, other: "LoadResult") -> None:
        self.latencies += other.latencies
        for status, count in other.statuses.items():
            self.statuses[status] = self.statuses.get(status, 0) + count
        self.errors += other.errors
        self.elapsed += other.elapsed
        self.burst += other.burst

    def rps(self) -> float:
        return self.ok / self.elapsed if self.elapsed else 0.0

    def percentile(self, p: float) -> float:
        """Milliseconds."""
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        index = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))
        return ordered[index] * 1000


def build_request(host: str, port: int, path: str, body: dict, headers: dict[str, str]) -> bytes:
    payload = json.dumps(body).encode()
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lowered = head.lower()
    if b"transfer-encoding: chunked" in lowered:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        start = lowered.find(b"content-length:")
        length = int(lowered[start + 15 : lowered.find(b"\r\n", start)]) if start >= 0 else 0
        await reader.readexactly(length)
    return status


async def _connection(
    host: str, port: int, request: bytes, more: Callable[[], bool], result: LoadResult
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    first = not result.counting
    try:
        while more():
            started, counted = time.perf_counter(), result.counting
            writer.write(request)
            try:
                status = await read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                result.errors += 1
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
                continue
            if first:
                result.burst.append(time.perf_counter() - started)
                first = False
            if not counted:
                continue
            result.statuses[status] = result.statuses.get(status, 0) + 1
            if status == 200:
                result.latencies.append(time.perf_counter() - started)
    finally:
        writer.close()


async def run_load(
    host: str,
    port: int,
    request: bytes,
    *,
    concurrency: int,
    seconds: float,
    warmup: float = 0.0,
    warmed: Callable[[], None] | None = None,
) -> LoadResult:
    """`concurrency` calls in flight for `seconds`. With a `warmup`, the load runs that long
    first on the same connections, uncounted, and until each connection has had its first
    answer (`warmed` is called when it ends): the figures are then the steady state, not the
    burst of `concurrency` calls sent at once on new connections as the run starts. That
    burst is kept apart (`burst`): in a 10 s run at 64 in flight its calls are one in a
    hundred, and would make the p99 by themselves."""
    if not warmup:
        deadline = time.perf_counter() + seconds
        return await _load(host, port, request, concurrency, lambda: time.perf_counter() < deadline)
    loop = asyncio.get_running_loop()
    result = LoadResult(counting=False)
    deadline = counted_from = float("inf")
    give_up = loop.time() + 30 * warmup  # a connection that never answers: count anyway

    def count() -> None:
        nonlocal counted_from, deadline
        if len(result.burst) < concurrency and loop.time() < give_up:
            loop.call_later(0.01, count)
            return
        result.counting, counted_from = True, time.perf_counter()
        deadline = counted_from + seconds
        if warmed is not None:
            warmed()

    loop.call_later(warmup, count)
    await _load(host, port, request, concurrency, lambda: time.perf_counter() < deadline, result)
    result.elapsed = time.perf_counter() - counted_from
    return result


async def run_calls(
    host: str, port: int, request: bytes, *, concurrency: int, calls: int
) -> LoadResult:
    """`calls` requests in all, whatever they take (a run under valgrind, say)."""
    left = calls

    def more() -> bool:
        nonlocal left
        left -= 1
        return left >= 0

    return await _load(host, port, request, concurrency, more)


async def _load(
    host: str,
    port: int,
    request: bytes,
    concurrency: int,
    more: Callable[[], bool],
    result: LoadResult | None = None,
) -> LoadResult:
    result = LoadResult() if result is None else result
    started = time.perf_counter()
    await asyncio.gather(
        *(_connection(host, port, request, more, result) for _ in range(concurrency))
    )
    result.elapsed = time.perf_counter() - started
    return result
