"""The lean Redis connection the request path's scripts run on (core/redis_wire.py): what it
writes is what redis-py writes, what it reads is every reply in full, and against a real
Redis it matches concurrent calls to their own replies, loads a script the server lost,
logs in, and gives up on a server that does not answer."""

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid

import pytest
from redis.connection import Connection
from redis.exceptions import AuthenticationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core import redis_wire
from core.redis_wire import _INCOMPLETE, Script, ScriptWire, encode, parse
from tests.support.processes import free_port
from tests.support.waiting import wait_until

ECHO = Script("return {KEYS[1], ARGV[1], tonumber(ARGV[2]) * 2, redis.call('EXISTS', KEYS[1])}")


def test_a_command_is_written_byte_for_byte_as_redis_py_writes_it():
    parts = ["EVALSHA", "ab" * 20, 2, "k:{dep}:é", b"\x00raw", 1.5, 0.1, 10**12, -3, ""]
    for _ in range(2):  # the second time from the cache of strings sent before
        assert encode(parts) == b"".join(Connection().pack_command(*parts))


def test_a_value_redis_cannot_take_is_refused_before_it_is_written():
    with pytest.raises(Exception, match="cannot send bool"):
        encode(["SET", "k", True])


def test_every_kind_of_reply_is_read_and_only_once_whole():
    reply = b"*6\r\n:42\r\n$5\r\nhello\r\n$-1\r\n*2\r\n+OK\r\n$0\r\n\r\n*-1\r\n-ERR bad thing\r\n"
    buffer = bytearray(reply + b":7\r\n")
    value, end = parse(buffer, 0)
    assert value[:5] == [42, b"hello", None, [b"OK", b""], None]
    assert isinstance(value[5], ResponseError) and str(value[5]) == "ERR bad thing"
    assert parse(buffer, end) == (7, len(buffer))
    for cut in range(len(reply)):  # any prefix: not yet, and nothing consumed
        assert parse(bytearray(reply[:cut]), 0) == (_INCOMPLETE, 0)


@pytest.fixture
def url():
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    return url


async def test_concurrent_calls_on_one_connection_each_get_their_own_reply(url):
    wire = ScriptWire(url)
    try:
        replies = await asyncio.gather(
            *(wire.run(ECHO, [f"wire-test:{i}"], [f"call-{i}", i]) for i in range(300))
        )
        assert replies == [
            [f"wire-test:{i}".encode(), f"call-{i}".encode(), i * 2, 0] for i in range(300)
        ]
    finally:
        wire.close()


async def test_a_script_the_server_lost_is_loaded_again(url):
    wire = ScriptWire(url)
    script = Script(f"return '{uuid.uuid4().hex}'")  # never loaded before
    try:
        first = await wire.run(script, [], [])
        assert await wire.call("SCRIPT", "EXISTS", script.sha) == [1]
        await wire.call("SCRIPT", "FLUSH")
        assert await wire.run(script, [], []) == first
    finally:
        wire.close()


async def test_a_failing_script_raises_redis_pys_error_and_the_connection_goes_on(url):
    wire = ScriptWire(url)
    try:
        with pytest.raises(ResponseError, match="deliberate"):
            await wire.run(Script("return redis.error_reply('deliberate')"), [], [])
        assert await wire.run(ECHO, ["wire-test:after"], ["next", 1]) == [
            b"wire-test:after",
            b"next",
            2,
            0,
        ]
    finally:
        wire.close()


@pytest.fixture
def silent_server():
    """A TCP server that accepts and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    server.close()


async def test_a_server_that_does_not_answer_times_out_and_the_next_call_connects_again(
    silent_server, monkeypatch
):
    monkeypatch.setattr(redis_wire, "SOCKET_TIMEOUT", 0.3)
    wire = ScriptWire(silent_server)
    started = time.monotonic()
    with pytest.raises(RedisTimeoutError):
        await wire.run(ECHO, ["k"], ["a", 1])
    assert time.monotonic() - started < 2
    first = wire._wire
    assert first is not None and first.closed
    with pytest.raises(RedisTimeoutError):
        await wire.run(ECHO, ["k"], ["a", 1])
    assert wire._wire is not first  # a new connection, not the one out of step
    wire.close()


async def test_no_server_at_all_is_a_connection_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    wire = ScriptWire(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(RedisConnectionError):
        await wire.run(ECHO, ["k"], ["a", 1])


@pytest.fixture
def password_redis(tmp_path):
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path), "--requirepass", "s3cret"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    wait_until(lambda: _listening(port), timeout=10)
    yield port
    proc.kill()
    proc.wait()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_the_url_s_password_and_database_are_used(password_redis):
    wire = ScriptWire(f"redis://:s3cret@127.0.0.1:{password_redis}/3")
    try:
        await wire.run(Script("return redis.call('SET', KEYS[1], ARGV[1])"), ["k"], ["in-db-3"])
        assert await wire.call("GET", "k") == b"in-db-3"
        assert await wire.call("SELECT", 0) == b"OK"
        assert await wire.call("GET", "k") is None  # it was written to database 3
    finally:
        wire.close()
    wrong = ScriptWire(f"redis://:wrong@127.0.0.1:{password_redis}/0")
    with pytest.raises(AuthenticationError):
        await wrong.run(ECHO, ["k"], ["a", 1])


def test_on_uvloop_as_the_gateway_runs_it(url):
    uvloop = pytest.importorskip("uvloop")

    async def calls() -> list:
        wire = ScriptWire(url)
        try:
            return await asyncio.gather(
                *(wire.run(ECHO, ["wire-test:uv"], ["x", i]) for i in range(50))
            )
        finally:
            wire.close()

    loop = uvloop.new_event_loop()
    try:
        replies = loop.run_until_complete(calls())
    finally:
        loop.close()
    assert [r[2] for r in replies] == [i * 2 for i in range(50)]


@pytest.fixture
def counting_silent_server():
    """A TCP server that accepts (counting the connections) and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    server.close()
    for conn in accepted:
        conn.close()


async def test_calls_that_arrive_while_it_connects_share_the_one_attempt(
    counting_silent_server, monkeypatch
):
    port, accepted = counting_silent_server
    monkeypatch.setattr(redis_wire, "SOCKET_TIMEOUT", 0.3)
    wire = ScriptWire(f"redis://:pw@127.0.0.1:{port}/0")  # its AUTH is never answered
    results = await asyncio.gather(
        *(wire.run(ECHO, ["k"], ["a", i]) for i in range(20)), return_exceptions=True
    )
    assert all(isinstance(r, RedisTimeoutError) for r in results), results
    assert len(accepted) == 1  # one attempt for all twenty, not one each in turn
    assert wire._attempt is None  # the next call tries again
    with pytest.raises(RedisTimeoutError):
        await wire.run(ECHO, ["k"], ["a", 1])
    assert len(accepted) == 2
