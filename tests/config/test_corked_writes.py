"""The gateway's connections send what one event-loop callback writes in one go (uvicorn
writes an answer's head and body apart), in order, and nothing is lost or reordered by a
close."""

import asyncio

from config.http_protocol import _CorkedTransport


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
