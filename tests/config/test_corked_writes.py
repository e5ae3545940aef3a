"""The gateway's connections send what one event-loop callback writes in one go (uvicorn
writes an answer's head and body apart), in order, and nothing is lost or reordered by a
close."""

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from config.http_protocol import SluiceHttpProtocol, _CorkedTransport


class _Recorded:
    """The transport under the cork: what reached it, call by call."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.events: list[str] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.events.append("write")

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        self.closing = True
        self.events.append("close")

    def abort(self) -> None:
        self.closing = True
        self.events.append("abort")

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def test_the_writes_of_one_callback_reach_the_socket_as_one_send() -> None:
    under = _Recorded()
    corked = _CorkedTransport(under, asyncio.get_running_loop())  # type: ignore[arg-type]
    head = bytearray(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    corked.write(head)
    corked.write(b"{}")
    head[:4] = b"XXXX"  # a writer reusing its buffer changes nothing already written
    assert under.writes == [] and corked.get_write_buffer_size() == len(head) + 2
    await asyncio.sleep(0)
    assert under.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    corked.write(b"next")  # a later callback: a send of its own
    await asyncio.sleep(0)
    assert under.writes[1:] == [b"next"]


async def test_a_close_sends_what_was_written_first_and_an_abort_drops_it() -> None:
    under = _Recorded()
    corked = _CorkedTransport(under, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
    corked.close()
    assert under.events == ["write", "close"]
    await asyncio.sleep(0)  # the flush scheduled by the write finds nothing left
    assert under.events == ["write", "close"]

    dropped = _Recorded()
    corked = _CorkedTransport(dropped, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"half an answer")
    corked.abort()
    await asyncio.sleep(0)
    assert dropped.events == ["abort"]
    assert corked.get_extra_info("peername") == "info:peername"  # the rest passes through


class _Socket(_Recorded):
    """A connection's transport as uvicorn's protocol reads it."""

    def get_extra_info(self, name: str) -> object:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


async def test_a_whole_answer_is_sent_as_it_completes_not_after_the_callbacks_behind_it() -> None:
    # In a burst of answers, each waited for every callback queued behind its own (the
    # others' answers, their audit and accounting) before its one send.
    under = _Socket()
    sent_by_then: list[list[bytes]] = []

    async def app(scope: dict, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})
        sent_by_then.append(list(under.writes))  # still this callback: the answer has gone

    config = Config(app=app, lifespan="off", http="httptools")
    config.load()
    protocol = SluiceHttpProtocol(config=config, server_state=ServerState(), app_state={})
    protocol.connection_made(under)  # type: ignore[arg-type]
    protocol.data_received(b"GET /v1/models HTTP/1.1\r\nhost: sluice\r\n\r\n")
    for _ in range(10):
        await asyncio.sleep(0)
    assert len(sent_by_then) == 1
    assert sent_by_then[0][0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert sent_by_then[0][0].endswith(b"\r\n\r\n{}")
    assert len(under.writes) == 1  # head and body still in one send
    protocol.connection_lost(None)
