"""``rollouthub.utils.write_coalescing``: a response head and its body leave in one write; nothing is held past the
event loop's next turn, reordered or lost."""

from __future__ import annotations

import asyncio
from typing import Any, List

import pytest

from rollouthub.utils.write_coalescing import JOIN_LIMIT, CoalescingTransport, coalescing_protocol

pytestmark = pytest.mark.timeout(30)


class FakeTransport:
    """Records what reaches the socket."""

    def __init__(self) -> None:
        self.writes: List[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.writes.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        self.writes.append(b"|".join(bytes(c) for c in chunks))

    def write_eof(self) -> None:
        self.writes.append(b"<eof>")

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1)}.get(name, default)

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol


def wrap() -> tuple[FakeTransport, CoalescingTransport]:
    raw = FakeTransport()
    return raw, CoalescingTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]


async def test_head_and_body_written_once() -> None:
    raw, transport = wrap()
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    assert raw.writes == []  # held
    transport.write(b"{}")
    transport.write(b"")  # an empty write (uvicorn's end of message) is nothing
    assert raw.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    await asyncio.sleep(0)
    assert raw.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]


async def test_lone_write_flushed_on_the_next_loop_turn() -> None:
    raw, transport = wrap()
    buffer = bytearray(b"HTTP/1.1 204 No Content\r\n\r\n")
    transport.write(buffer)
    buffer[:] = b"reused"  # the held write is a copy
    assert transport.get_write_buffer_size() == len(b"HTTP/1.1 204 No Content\r\n\r\n")
    await asyncio.sleep(0)
    assert raw.writes == [b"HTTP/1.1 204 No Content\r\n\r\n"]
    transport.write(b"a")
    transport.write(b"b")
    transport.write(b"c")  # pairs: "ab" at once, "c" on the next turn
    assert raw.writes[1:] == [b"ab"]
    await asyncio.sleep(0)
    assert raw.writes[1:] == [b"ab", b"c"]


async def test_order_kept_around_close_writelines_and_eof() -> None:
    raw, transport = wrap()
    transport.write(b"head")
    transport.writelines([b"x", b"y"])
    assert raw.writes == [b"head", b"x|y"]
    transport.write(b"tail")
    transport.write_eof()
    assert raw.writes[2:] == [b"tail", b"<eof>"]
    transport.write(b"last")
    transport.close()
    assert raw.writes[-1] == b"last" and raw.closed and transport.is_closing()
    await asyncio.sleep(0)  # the scheduled flush finds nothing held
    assert raw.writes[-1] == b"last"


async def test_held_write_dropped_when_the_connection_is_gone() -> None:
    raw, transport = wrap()
    transport.write(b"head")
    raw.closed = True  # the peer left
    await asyncio.sleep(0)
    assert raw.writes == []
    _, aborted = wrap()
    aborted.write(b"head")
    aborted.abort()
    await asyncio.sleep(0)


async def test_large_writes_are_not_joined() -> None:
    raw, transport = wrap()
    transport.write(b"head")
    transport.write(b"x" * JOIN_LIMIT)
    assert raw.writes == [b"head|" + b"x" * JOIN_LIMIT]


async def test_everything_else_is_the_wrapped_transports() -> None:
    raw, transport = wrap()
    assert transport.wrapped is raw
    assert transport.get_extra_info("peername") == ("127.0.0.1", 1)
    transport.set_protocol("p")  # type: ignore[attr-defined]
    assert raw.protocol == "p"


async def test_factory_keeps_the_protocol_class() -> None:
    made: List[Any] = []

    class Protocol(asyncio.Protocol):
        def __init__(self, name: str) -> None:
            self.name = name

        def connection_made(self, transport: Any) -> None:
            made.append(transport)

    factory = coalescing_protocol(Protocol)
    protocol = factory("x")
    assert type(protocol) is Protocol and protocol.name == "x"  # type: ignore[attr-defined]
    raw = FakeTransport()
    protocol.connection_made(raw)  # type: ignore[arg-type]
    assert isinstance(made[0], CoalescingTransport) and made[0].wrapped is raw
