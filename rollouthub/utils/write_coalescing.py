"""One socket write per small HTTP response: a transport wrapper for uvicorn's stock HTTP protocols.

uvicorn's protocols (``zttp``, ``h11``, ``httptools``) write a response in (at least) two ``transport.write`` calls:
the status line and headers on ``http.response.start``, the body on ``http.response.body``. uvloop sends each write
at once when nothing is queued, so a small JSON response costs two ``send`` system calls and two TCP segments -- on
the store server's small requests, the largest single item of the server's CPU per request (py-spy: ~30 % of the
samples of an ``update_worker`` load sat in these two writes).

:func:`coalescing_protocol` wraps a uvicorn protocol *class* into a protocol *factory* (uvicorn's ``http`` setting
accepts either): the protocol is uvicorn's own, unchanged -- same class, same parsing, same ASGI behaviour -- except
that the transport it writes to is a :class:`CoalescingTransport`. That wrapper holds a write while nothing is held
and sends it together with the next write (one ``send``), or on its own at the latest when the event loop runs its
next callbacks (``loop.call_soon``), before ``close()`` and before ``writelines()``/``write_eof()``. So a response
head and its body go out in one segment; nothing is reordered, dropped or held longer than the current loop turn.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable, Optional

__all__ = ["CoalescingTransport", "coalescing_protocol", "JOIN_LIMIT"]

JOIN_LIMIT = 64 * 1024
"""Above this many bytes the held write and the next one are handed over as two buffers (``writelines``, one vectored
send) instead of being joined into one new ``bytes`` object (a copy)."""


class CoalescingTransport:
    """A transport whose writes are sent in pairs: a write is held until the next one (sent together) or until the
    event loop's next turn (sent alone). Everything else is the wrapped transport's.

    Args:
        transport: The connection's transport (uvloop's or asyncio's).
        loop: The event loop serving the connection (schedules the flush of a held write).
    """

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: Optional[bytes] = None

    @property
    def wrapped(self) -> asyncio.Transport:
        """The transport this one writes to."""
        return self._transport

    def write(self, data: Any) -> None:
        """Hold ``data`` when nothing is held (flushed on the loop's next turn at the latest), else send the held
        write and ``data`` in one go."""
        if not data:
            return
        held = self._held
        if held is None:
            self._held = data if type(data) is bytes else bytes(data)  # the caller may reuse a bytearray
            self._loop.call_soon(self.flush)
            return
        self._held = None
        if len(held) + len(data) <= JOIN_LIMIT:
            self._transport.write(held + data)
        else:
            self._transport.writelines((held, data))

    def flush(self) -> None:
        """Send the held write now, if any (dropped when the transport is already closing: the peer is gone or the
        connection is being closed, and the transport refuses writes then)."""
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def writelines(self, list_of_data: Iterable[Any]) -> None:
        """The held write, then these buffers."""
        self.flush()
        self._transport.writelines(list_of_data)

    def write_eof(self) -> None:
        """Send the held write, then close the write side."""
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        """Send the held write, then close the transport."""
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Drop the held write and abort the connection."""
        self._held = None
        self._transport.abort()

    def is_closing(self) -> bool:
        """Whether the transport is closing or closed."""
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        """Bytes queued in the transport, the held write included."""
        held = self._held
        return self._transport.get_write_buffer_size() + (len(held) if held is not None else 0)

    def pause_reading(self) -> None:
        """Stop reading from the socket."""
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        """Resume reading from the socket."""
        self._transport.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The wrapped transport's extra information (``socket``, ``peername``, ``sslcontext``...)."""
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def coalescing_protocol(protocol_class: Callable[..., asyncio.Protocol]) -> Callable[..., asyncio.Protocol]:
    """A uvicorn ``http`` protocol factory: instances of ``protocol_class`` (unchanged) that write to a
    :class:`CoalescingTransport` around their connection's transport."""

    def create_protocol(*args: Any, **kwargs: Any) -> asyncio.Protocol:
        protocol = protocol_class(*args, **kwargs)
        connection_made = protocol.connection_made

        def coalescing_connection_made(transport: asyncio.BaseTransport) -> None:
            loop = asyncio.get_running_loop()
            connection_made(CoalescingTransport(transport, loop))  # type: ignore[arg-type]

        protocol.connection_made = coalescing_connection_made  # type: ignore[method-assign]
        return protocol

    create_protocol.__name__ = f"coalescing_{getattr(protocol_class, '__name__', 'protocol')}"
    create_protocol.__doc__ = f"{create_protocol.__name__}: see rollouthub.utils.write_coalescing."
    return create_protocol
