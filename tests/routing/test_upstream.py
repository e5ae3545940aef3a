"""The upstream client against a real socket: a pooled connection the upstream closed while
we reused it (its idle timeout ran out first) is replaced once, without an attempt lost."""

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal

import aiohttp
import pytest

from routing.catalog.specs import DeploymentSpec, UpstreamSpec
from routing.deployment_state import Limits
from routing.request_path.upstream import close_sessions, open_response

ANSWER = b'{"ok": true}'


@dataclass
class Upstream:
    """Answers `answers_per_connection` requests on a connection, then reads the next
    request and closes without a word, as a server whose keep-alive just ran out."""

    answers_per_connection: int
    connections: int = 0
    requests: int = 0
    server: asyncio.Server | None = field(default=None, repr=False)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                self.requests += 1
                if answered == self.answers_per_connection:
                    return
                answered += 1
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    def deployment(self) -> DeploymentSpec:
        port = self.server.sockets[0].getsockname()[1]
        upstream = UpstreamSpec("raw", f"http://127.0.0.1:{port}/v1", None, 5.0, 5.0)
        return DeploymentSpec("raw", "m", upstream, "t", 4, 1000, Decimal(0), Decimal(0), Limits(4))


@pytest.fixture
async def upstream(request: pytest.FixtureRequest) -> AsyncIterator[Upstream]:
    served = Upstream(request.param)
    served.server = await asyncio.start_server(served.handle, "127.0.0.1", 0)
    yield served
    await close_sessions()
    served.server.close()
    await served.server.wait_closed()


async def _call(upstream: Upstream) -> int:
    response = await open_response(upstream.deployment(), "chat/completions", b"{}")
    await response.read()
    response.release()
    return response.status


@pytest.mark.parametrize("upstream", [1], indirect=True)
async def test_a_pooled_connection_the_upstream_dropped_is_replaced_once(upstream):
    assert await _call(upstream) == 200
    # The pooled connection is dropped under the second request: sent again on a new one.
    assert await _call(upstream) == 200
    assert (upstream.connections, upstream.requests) == (2, 3)


@pytest.mark.parametrize("upstream", [0], indirect=True)
async def test_an_upstream_that_drops_every_request_fails_after_one_more_try(upstream):
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await _call(upstream)
    assert (upstream.connections, upstream.requests) == (2, 2)
