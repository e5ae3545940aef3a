"""An answer's head goes out with the first piece of its body, in one write; a head with no
body behind it still goes out by the end of the event loop's turn, and before a close."""

import asyncio

from config.http_protocol import _HeadWithBody


class _Recording:
    """A transport that records each call that writes or closes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[bytes, ...]]] = []

    def write(self, data: bytes) -> None:
        self.calls.append(("write", (data,)))

    def writelines(self, pieces: tuple[bytes, ...]) -> None:
        self.calls.append(("writelines", tuple(pieces)))

    def close(self) -> None:
        self.calls.append(("close", ()))

    def is_closing(self) -> bool:
        return False


async def test_the_head_and_the_first_body_piece_go_in_one_write() -> None:
    transport = _Recording()
    held = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    held.write(b"HTTP/1.1 200 OK\r\n\r\n")
    held.write(b"data: 1\n\n")
    held.write(b"data: 2\n\n")
    await asyncio.sleep(0)
    assert transport.calls == [
        ("writelines", (b"HTTP/1.1 200 OK\r\n\r\n", b"data: 1\n\n")),
        ("write", (b"data: 2\n\n",)),
    ]


async def test_a_head_alone_goes_out_by_the_end_of_the_loops_turn() -> None:
    transport = _Recording()
    held = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    held.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert transport.calls == []
    await asyncio.sleep(0)
    held.write(b"late body")
    assert transport.calls == [
        ("write", (b"HTTP/1.1 200 OK\r\n\r\n",)),
        ("write", (b"late body",)),
    ]


async def test_closing_writes_a_held_head_first() -> None:
    transport = _Recording()
    held = _HeadWithBody(transport, asyncio.get_running_loop())  # type: ignore[arg-type]
    held.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    held.close()
    await asyncio.sleep(0)
    assert transport.calls == [("write", (b"HTTP/1.1 204 No Content\r\n\r\n",)), ("close", ())]
    assert held.is_closing() is False  # everything else is the transport's own
