"""The HTTP/2 upstream client against real HTTP/2 servers: the simulator served by granian,
and a server scripted here on h2's own state machine. Calls share a connection up to the
upstream's limit of concurrent streams and read as they do over HTTP/1.1; a request body
larger than the upstream's window goes out whole; a stream the upstream refused or left
unprocessed as it went away is sent once more on a new connection; a stream reset, timed out
or cancelled fails that call alone (aiohttp's errors, classified as over HTTP/1.1) and the
connection serves the next; a reader that falls behind stops its own stream, not the
connection."""

import asyncio
import datetime
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path

import aiohttp
import h2.config
import h2.connection
import h2.events
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from h2.errors import ErrorCodes

from routing.catalog.specs import DeploymentSpec, UpstreamSpec
from routing.deployment_state import Limits
from routing.request_path import upstream_h2, upstream_http
from routing.request_path.classify import ErrorClass
from routing.request_path.upstream import close_sessions, open_response, transport_error_class
from routing.request_path.upstream_http import BUFFER_LIMIT
from tests.support import SimulatorHandle, start_simulator


def _deployment(base_url: str, model: str = "m", read_timeout: float = 5.0) -> DeploymentSpec:
    upstream = UpstreamSpec("h2", base_url, None, 5.0, read_timeout, http2=True)
    return DeploymentSpec("h2", model, upstream, "t", 4, 1000, Decimal(0), Decimal(0), Limits(4))


def _chat(stream: bool, content: str = "hi") -> bytes:
    messages = [{"role": "user", "content": content}]
    return json.dumps({"model": "m", "stream": stream, "messages": messages}).encode()


# --- against the simulator, served by granian over HTTP/1.1 and HTTP/2 ---------------------


@pytest.fixture(scope="module")
def h2_sim() -> Iterator[SimulatorHandle]:
    yield from start_simulator("--http2", "--model", "m:1000", "--token-latency-ms", "20")


@pytest.fixture
async def pools() -> AsyncIterator[None]:
    yield
    await close_sessions()


async def _read(deployment: DeploymentSpec, stream: bool) -> tuple[int, bytes]:
    response = await open_response(deployment, "chat/completions", _chat(stream), whole=not stream)
    if stream:
        body = b"".join([chunk async for chunk in response.content.iter_any()])
    else:
        body = await response.read()
    response.release()
    return response.status, body


def _text(stream: bool, body: bytes) -> str:
    if not stream:
        return json.loads(body)["choices"][0]["message"]["content"]
    events = [line[6:] for line in body.split(b"\n") if line.startswith(b"data: {")]
    return "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events if e)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_answer_reads_as_it_does_over_http1(h2_sim, pools, stream):
    over_h2 = _deployment(f"{h2_sim.url}/v1")
    over_h1 = replace(over_h2, upstream=replace(over_h2.upstream, http2=False))
    status, body = await _read(over_h2, stream)
    status1, body1 = await _read(over_h1, stream)
    assert (status, _text(stream, body)) == (status1, _text(stream, body1)) == (200, "tok " * 16)
    assert upstream_h2._pool().conns  # it went over HTTP/2


async def test_calls_in_flight_share_a_connection_up_to_the_upstreams_limit(h2_sim, pools):
    """Granian allows 200 streams a connection: 300 streamed calls at once take two."""
    deployment = _deployment(f"{h2_sim.url}/v1")
    results = await asyncio.gather(*[_read(deployment, True) for _ in range(300)])
    assert {status for status, _ in results} == {200}
    assert {_text(True, body) for _, body in results} == {"tok " * 16}
    (conns,) = upstream_h2._pool().conns.values()
    assert len(conns) == 2
    assert all(conn.h2.remote_settings.max_concurrent_streams == 200 for conn in conns)


# --- against a scripted HTTP/2 server ------------------------------------------------------


@dataclass
class Served:
    """One connection of the scripted server, for its `answer` to write on."""

    conn: h2.connection.H2Connection
    writer: asyncio.StreamWriter
    number: int  # the server's connections, counted from 1
    window: asyncio.Event = field(default_factory=asyncio.Event)
    sent: int = 0  # bytes sent by `data_as_window_allows` (the last of its streams)

    def respond(self, stream_id: int, status: int = 200, end: bool = False) -> None:
        headers = [(":status", str(status)), ("content-type", "text/event-stream")]
        self.conn.send_headers(stream_id, headers, end_stream=end)
        self.flush()

    def data(self, stream_id: int, data: bytes, end: bool = False) -> None:
        self.conn.send_data(stream_id, data, end_stream=end)
        self.flush()

    async def data_as_window_allows(self, stream_id: int, data: bytes) -> None:
        """Sends what the client's windows allow, waiting for more, then ends the stream."""
        self.sent = 0
        while self.sent < len(data):
            room = min(
                self.conn.local_flow_control_window(stream_id),
                self.conn.max_outbound_frame_size,
                len(data) - self.sent,
            )
            if room == 0:
                self.window.clear()
                await self.window.wait()
                continue
            self.data(stream_id, data[self.sent : self.sent + room])
            self.sent += room
        self.data(stream_id, b"", end=True)

    def flush(self) -> None:
        self.writer.write(self.conn.data_to_send())


Script = Callable[[Served, int, bytes], Awaitable[None]]


@dataclass
class H2Server:
    """Reads each request whole and lets `answer` write what it likes on its stream."""

    answer: Script
    connections: int = 0
    bodies: list[bytes] = field(default_factory=list)
    resets: list[int] = field(default_factory=list)  # streams the client reset
    errors: list[BaseException] = field(default_factory=list)  # a script's own failures
    server: asyncio.Server | None = field(default=None, repr=False)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        served = Served(h2.connection.H2Connection(config), writer, self.connections)
        served.conn.initiate_connection()
        served.flush()
        bodies: dict[int, bytes] = {}
        tasks = set()
        try:
            while data := await reader.read(65536):
                for event in served.conn.receive_data(data):
                    if isinstance(event, h2.events.DataReceived):
                        bodies[event.stream_id] = bodies.get(event.stream_id, b"") + event.data
                        served.conn.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                    elif isinstance(event, h2.events.StreamEnded):
                        body = bodies.pop(event.stream_id, b"")
                        self.bodies.append(body)
                        task = asyncio.create_task(self.answer(served, event.stream_id, body))
                        task.add_done_callback(self._failed)
                        tasks.add(task)
                    elif isinstance(event, h2.events.StreamReset):
                        self.resets.append(event.stream_id)
                    elif isinstance(event, h2.events.WindowUpdated):
                        served.window.set()
                served.flush()
        except ConnectionError:
            pass
        finally:
            for task in tasks:
                task.cancel()
            writer.close()

    def _failed(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.errors.append(task.exception())

    def deployment(self, read_timeout: float = 5.0) -> DeploymentSpec:
        port = self.server.sockets[0].getsockname()[1]
        return _deployment(f"http://127.0.0.1:{port}/v1", read_timeout=read_timeout)


@pytest.fixture
async def scripted(serving) -> AsyncIterator[Callable[[Script], Awaitable[H2Server]]]:
    started: list[H2Server] = []

    async def start(answer: Script) -> H2Server:
        served = H2Server(answer)
        served.server = await serving(served.handle)
        started.append(served)
        return served

    yield start
    for served in started:
        assert served.errors == []  # a script that failed proves nothing


async def _ok(served: Served, stream_id: int, body: bytes) -> None:
    served.respond(stream_id)
    served.data(stream_id, b"data: %d\n\n" % len(body), end=True)


async def _call(server: H2Server, body: bytes = b"{}", read_timeout: float = 5.0):
    deployment = server.deployment(read_timeout)
    return await open_response(deployment, "chat/completions", body, whole=False)


async def _all(response) -> bytes:
    body = b"".join([chunk async for chunk in response.content.iter_any()])
    response.release()
    return body


async def test_a_body_larger_than_the_upstreams_window_goes_out_whole(scripted):
    server = await scripted(_ok)
    body = json.dumps({"content": "x" * 300_000}).encode()  # the window starts at 64 KiB
    assert await _all(await _call(server, body)) == b"data: %d\n\n" % len(body)
    assert server.bodies == [body]


async def test_a_refused_stream_is_sent_once_more_on_a_new_connection(scripted):
    async def refuse_on_the_first(served, stream_id, body):
        if served.number == 1:
            served.conn.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)
            served.flush()
        else:
            await _ok(served, stream_id, body)

    server = await scripted(refuse_on_the_first)
    assert await _all(await _call(server)) == b"data: 2\n\n"
    assert (server.connections, len(server.bodies)) == (2, 2)


async def test_streams_left_unprocessed_by_a_goaway_are_sent_again(scripted):
    arrived: list[int] = []

    async def go_away_after_the_first(served, stream_id, body):
        arrived.append(stream_id)
        if served.number > 1:
            await _ok(served, stream_id, body)
        elif len(arrived) == 2:  # both in: answer the first, leave the second unprocessed
            await _ok(served, arrived[0], body)
            served.conn.close_connection(last_stream_id=arrived[0])
            served.flush()

    server = await scripted(go_away_after_the_first)
    answers = await asyncio.gather(_call(server), _call(server))
    assert [await _all(r) for r in answers] == [b"data: 2\n\n"] * 2
    assert (server.connections, len(server.bodies)) == (2, 3)


async def test_a_stream_reset_mid_answer_fails_that_call_alone(scripted):
    async def reset_once(served, stream_id, body):
        served.respond(stream_id)
        served.data(stream_id, b"data: 1\n\n")
        if stream_id == 1:
            served.conn.reset_stream(stream_id, ErrorCodes.INTERNAL_ERROR)
            served.flush()
        else:
            served.data(stream_id, b"data: 2\n\n", end=True)

    server = await scripted(reset_once)
    response = await _call(server)
    assert await response.content.readany() == b"data: 1\n\n"
    with pytest.raises(aiohttp.ClientPayloadError) as caught:
        await response.content.readany()
    response.close()
    assert transport_error_class(caught.value) is ErrorClass.CONNECTION
    assert await _all(await _call(server)) == b"data: 1\n\ndata: 2\n\n"
    assert server.connections == 1


async def test_a_stream_silent_past_its_read_timeout_is_reset_and_the_connection_goes_on(
    scripted,
):
    async def stalls_once(served, stream_id, body):
        served.respond(stream_id)
        served.data(stream_id, b"data: 1\n\n", end=stream_id != 1)

    server = await scripted(stalls_once)
    response = await _call(server, read_timeout=0.3)
    assert await response.content.readany() == b"data: 1\n\n"
    with pytest.raises(asyncio.TimeoutError) as caught:
        await response.content.readany()
    response.close()
    assert transport_error_class(caught.value) is ErrorClass.READ_TIMEOUT
    assert await _all(await _call(server)) == b"data: 1\n\n"
    assert (server.connections, server.resets) == (1, [1])


async def test_a_call_cancelled_while_waiting_resets_its_stream_alone(scripted):
    async def slow_then_fast(served, stream_id, body):
        if stream_id == 1:
            await asyncio.sleep(10)
        await _ok(served, stream_id, body)

    server = await scripted(slow_then_fast)
    waiting = asyncio.create_task(_call(server))
    await asyncio.sleep(0.1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await _all(await _call(server)) == b"data: 2\n\n"
    assert (server.connections, server.resets) == (1, [1])


async def test_a_reader_that_falls_behind_stops_its_own_stream_not_the_connection(scripted):
    flood = b"x" * (4 * 1024 * 1024)
    connections: list[Served] = []

    async def flood_the_first(served, stream_id, body):
        connections.append(served)
        if stream_id == 1:
            served.respond(stream_id)
            await served.data_as_window_allows(stream_id, flood)
        else:
            await _ok(served, stream_id, body)

    server = await scripted(flood_the_first)
    slow = await _call(server)
    await asyncio.sleep(0.3)  # its reader is away: the upstream waits for the window
    assert 0 < connections[0].sent <= BUFFER_LIMIT
    assert await _all(await _call(server)) == b"data: 2\n\n"  # the call beside it goes on
    assert await _all(slow) == flood
    assert (server.connections, connections[0].sent) == (1, len(flood))


# --- over TLS: the upstream chooses ---------------------------------------------------------


@pytest.fixture
def tls_cert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1 that the clients trust (SSL_CERT_FILE, read
    by `ssl.create_default_context`); the server's context."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    for module in (upstream_h2, upstream_http):
        module.tls_context.cache_clear()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    yield server
    for module in (upstream_h2, upstream_http):
        module.tls_context.cache_clear()


def _tls_deployment(server: asyncio.Server) -> DeploymentSpec:
    return _deployment(f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")


async def test_an_upstream_that_chooses_http2_over_tls_is_called_over_it(tls_cert, serving):
    tls_cert.set_alpn_protocols(["h2", "http/1.1"])
    served = H2Server(_ok)
    served.server = await serving(served.handle, ssl=tls_cert)
    deployment = _tls_deployment(served.server)
    for _ in range(2):
        response = await open_response(deployment, "chat/completions", b"{}", whole=True)
        assert (response.status, await response.read()) == (200, b"data: 2\n\n")
        response.release()
    assert (served.connections, served.errors) == (1, [])


async def test_an_upstream_that_chooses_http1_over_tls_is_called_over_http1(tls_cert, serving):
    tls_cert.set_alpn_protocols(["http/1.1"])
    connections = 0

    async def http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await serving(http1, ssl=tls_cert)
    deployment = _tls_deployment(server)
    for _ in range(2):
        response = await open_response(deployment, "chat/completions", b"{}", whole=True)
        assert (response.status, await response.read()) == (200, b"ok")
        response.release()
    # The handshake that chose HTTP/1.1, then one kept-alive HTTP/1.1 connection.
    assert connections == 2
    assert upstream_h2._pool().http1 == {("127.0.0.1", server.sockets[0].getsockname()[1], True)}


async def test_a_connections_window_is_handed_back_whatever_its_streams_readers_do(
    scripted, monkeypatch
):
    """A connection's window of 200 KB and 40 answers of 50 KB on it, read whole, streamed
    or abandoned unread: the window runs dry unless every byte received is handed back."""
    monkeypatch.setattr(upstream_h2, "CONNECTION_WINDOW", 200_000)
    monkeypatch.setattr(upstream_h2, "CONNECTION_STEP", 16_384)
    answer = b"y" * 50_000

    async def fifty_kb(served, stream_id, body):
        served.respond(stream_id)
        await served.data_as_window_allows(stream_id, answer)

    server = await scripted(fifty_kb)
    deployment = server.deployment(read_timeout=2.0)
    for n in range(40):
        if n % 3 == 0:  # abandoned once its head is in
            response = await open_response(deployment, "chat/completions", b"{}", whole=False)
            response.close()
            continue
        whole = n % 3 == 1
        response = await open_response(deployment, "chat/completions", b"{}", whole=whole)
        assert await (response.read() if whole else _all(response)) == answer
        response.release()
    assert server.connections == 1
