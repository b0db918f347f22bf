"""The store server's HTTP/1.1 protocol: an ``asyncio.Protocol`` on ``httptools``, run by uvicorn in place of its own.

uvicorn keeps everything around the protocol -- the (pre-bound) sockets, signals, graceful shutdown, the keep-alive
timeout setting, worker processes -- and creates one :class:`HttpProtocol` per connection through
``uvicorn.Config(http=protocol_factory(front_door))``. The protocol honours the contract of uvicorn's own httptools
protocol: it registers in ``server_state.connections`` / ``server_state.tasks``, counts ``total_requests``, sends
``server_state.default_headers`` (``date``, ``server``) on every response, implements ``shutdown()`` (idle connections
close at once, in-flight responses finish and then close), the keep-alive timer, ``pause_writing`` /
``resume_writing`` flow control, the access log (same line format) and ``root_path``.

Requests :func:`~rollouthub.store.server_fastpath.classify` matches (the hot routes of a training loop) are served
directly: the parser callbacks collect the body, ONE task per request runs
:meth:`~rollouthub.store.server_fastpath.FrontDoor.serve` on the request object (an
:class:`~rollouthub.store.server_fastpath.Exchange`), and the whole response -- status line, headers, body -- leaves in
ONE ``transport.write``. No ASGI scope, no message dicts, no proxy-headers middleware. Every other request -- and a hot
request the front door replays through the FastAPI app -- goes through a small ASGI 3 bridge (:class:`_Request` is also
the ASGI ``receive``/``send`` pair) to ``config.loaded_app``. With CORS configured the front door needs the ASGI request,
so then every request takes the bridge.

WebSocket upgrades are not supported (the store has no WebSocket route): like uvicorn without a WebSocket library, the
request is answered as plain HTTP (and the connection closed afterwards).

Slow and oversized request heads (beyond uvicorn's own httptools protocol, which bounds neither): the idle timer runs
from the moment the connection opens or answers a response until the next request's head is complete, so a client
that opens a connection and never completes its headers is closed after ``timeout_keep_alive`` seconds; a request head
(request line and headers) larger than ``config.h11_max_incomplete_event_size`` bytes (uvicorn's head limit of its h11
protocol; :data:`DEFAULT_MAX_HEAD_BYTES` when unset) is answered 431 and the connection closed.
"""

from __future__ import annotations

import asyncio
import contextvars
import http
import logging
import re
import urllib.parse
from collections import deque
from typing import Any, Callable, Deque, Iterable, List, Optional, Tuple, cast

import httptools
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.utils import get_local_addr, get_remote_addr, is_ssl

from .server_app import ASGIApp, Message, Scope
from .server_fastpath import BodyTooLarge, ClientGone, FrontDoor, ResponseHeaders, classify, replay_receive

__all__ = ["HttpProtocol", "encode_headers", "protocol_factory"]

logger = logging.getLogger("uvicorn.error")
access_logger = logging.getLogger("uvicorn.access")

HIGH_WATER_LIMIT = 65536
"""Buffered request body (ASGI bridge) above which reading pauses until the app calls ``receive()``."""

DEFAULT_MAX_HEAD_BYTES = 65536
"""Largest request head (request line + headers) when ``config.h11_max_incomplete_event_size`` is not set."""

_HEADER_NAME_RE = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
_HEADER_VALUE_RE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_CLOSE = b"connection: close\r\n"
_CHUNKED = b"transfer-encoding: chunked\r\n"
_JSON_HEAD = b"content-type: application/json\r\ncontent-length: %d\r\n"
_HEAD_500 = b"content-type: text/plain; charset=utf-8\r\ncontent-length: 21\r\nconnection: close\r\n"
_BODY_500 = b"Internal Server Error"
_NO_WS = (
    "No supported WebSocket library detected. Please use \"pip install 'uvicorn[standard]'\", or install 'websockets' "
    "or 'wsproto' manually."
)
_DISCONNECT: Message = {"type": "http.disconnect"}


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


STATUS_LINE = {status: _status_line(status) for status in range(100, 600)}


def encode_headers(headers: Iterable[Tuple[bytes, bytes]]) -> Tuple[bytes, bool, int, Optional[bool]]:
    """Validate and serialize response headers like uvicorn does.

    Returns the ``name: value\\r\\n`` lines (names lower-cased), whether they contain ``connection: close``, the
    declared ``content-length`` (0 if none) and whether the body is chunked (``None``: neither header was given).
    Raises ``RuntimeError`` for a name or value with forbidden characters.
    """
    lines: List[bytes] = []
    close = False
    length = 0
    chunked: Optional[bool] = None
    for name, value in headers:
        if _HEADER_NAME_RE.search(name):
            raise RuntimeError("Invalid HTTP header name.")
        if _HEADER_VALUE_RE.search(value):
            raise RuntimeError("Invalid HTTP header value.")
        name = name.lower()
        if name == b"content-length" and chunked is None:
            length = int(value.decode())
            chunked = False
        elif name == b"transfer-encoding" and value.lower() == b"chunked":
            length = 0
            chunked = True
        elif name == b"connection" and b"close" in [token.lower().strip() for token in value.split(b",")]:
            close = True
        lines.append(b"%s: %s\r\n" % (name, value))
    return b"".join(lines), close, length, chunked


class _ServerContext:
    """What every connection of one uvicorn server shares (built by the first connection)."""

    def __init__(self, door: FrontDoor, config: Any, server_state: Any) -> None:
        self.door = door
        self.server_state = server_state
        self.connections = server_state.connections
        self.tasks = server_state.tasks
        self.app: ASGIApp = config.loaded_app
        self.direct = door.serves_directly
        self.limit = door.max_body_bytes
        self.root_path: str = config.root_path
        self.raw_root_path = self.root_path.encode("ascii")
        self.asgi_version: str = config.asgi_version
        self.limit_concurrency: Optional[int] = config.limit_concurrency
        self.timeout_keep_alive: float = config.timeout_keep_alive
        self.max_head_bytes: int = getattr(config, "h11_max_incomplete_event_size", None) or DEFAULT_MAX_HEAD_BYTES
        self.reset_contextvars = bool(getattr(config, "reset_contextvars", False))
        self._proxy_headers = bool(config.proxy_headers)
        self._forwarded_allow_ips = config.forwarded_allow_ips
        self._replay_source: Any = None
        self._replay_app: Any = None
        self.trusted_hosts: Any = self.replay_app(door.app).trusted_hosts if self._proxy_headers else None
        self._defaults_source: Any = None
        self._defaults = b""

    def default_headers(self) -> bytes:
        """``server_state.default_headers`` serialized (uvicorn replaces the list every second, for the date)."""
        source = self.server_state.default_headers
        if source is not self._defaults_source:
            self._defaults_source = source
            self._defaults = b"".join(b"%s: %s\r\n" % (name, value) for name, value in source)
        return self._defaults

    def replay_app(self, app: ASGIApp) -> Any:
        """``app`` behind uvicorn's proxy-headers middleware (when enabled), as every other request sees it."""
        if app is not self._replay_source:
            self._replay_source = app
            self._replay_app = (
                ProxyHeadersMiddleware(cast(Any, app), trusted_hosts=self._forwarded_allow_ips)
                if self._proxy_headers
                else app
            )
        return self._replay_app


def protocol_factory(door: FrontDoor) -> Callable[..., HttpProtocol]:
    """The ``uvicorn.Config(http=...)`` factory: one :class:`HttpProtocol` per connection, serving ``door``."""
    shared: List[_ServerContext] = []

    def create(
        config: Any, server_state: Any, app_state: Any, _loop: Optional[asyncio.AbstractEventLoop] = None
    ) -> Any:
        if not config.loaded:
            config.load()
        if not shared or shared[0].server_state is not server_state:
            shared[:] = [_ServerContext(door, config, server_state)]
        return HttpProtocol(shared[0], app_state, _loop)

    return create


class HttpProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection (see the module documentation)."""

    __slots__ = (
        "ctx",
        "loop",
        "app_state",
        "parser",
        "access_log",
        "transport",
        "server",
        "client",
        "scheme",
        "pipeline",
        "current",
        "active",
        "url",
        "headers",
        "expect_100",
        "read_paused",
        "write_paused",
        "drain_waiters",
        "idle_since",
        "keep_alive_handle",
        "in_head",
        "head_bytes",
        "head_parsed",
        "heads_done",
    )

    def __init__(self, ctx: _ServerContext, app_state: Any, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        self.ctx = ctx
        self.loop = loop or asyncio.get_running_loop()
        self.app_state = app_state
        self.parser: Any = httptools.HttpRequestParser(self)
        try:  # answer the first of pipelined requests even when the client half-closes after sending them
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        except AttributeError:  # httptools < 0.6.3
            pass
        self.access_log = access_logger.hasHandlers()
        self.transport: Any = None
        self.server: Optional[Tuple[str, Optional[int]]] = None
        self.client: Optional[Tuple[str, int]] = None
        self.scheme = "http"
        self.pipeline: Deque[Tuple[_Request, Optional[ASGIApp]]] = deque()
        self.current: Optional[_Request] = None  # the request parsed last
        self.active: Optional[_Request] = None  # the request being answered
        self.url = b""
        self.headers: List[Tuple[bytes, bytes]] = []
        self.expect_100 = False
        self.read_paused = False
        self.write_paused = False
        self.drain_waiters: List[asyncio.Future[None]] = []
        self.idle_since: Optional[float] = None
        self.keep_alive_handle: Optional[asyncio.TimerHandle] = None
        self.in_head = True  # the bytes arriving belong to a request head (request line and headers)
        self.head_bytes = 0  # bytes received while the head is incomplete (a huge header is buffered by the parser)
        self.head_parsed = 0  # bytes of the request line and headers parsed so far
        self.heads_done = 0  # request heads completed on this connection

    # -- connection ----------------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Register the connection with the server."""
        self.ctx.connections.add(self)
        self.transport = transport
        self.server = get_local_addr(transport)  # type: ignore[arg-type]
        self.client = get_remote_addr(transport)  # type: ignore[arg-type]
        self.scheme = "https" if is_ssl(transport) else "http"  # type: ignore[arg-type]
        self._arm_idle_timer()  # a client must complete its first request head within the keep-alive timeout

    def connection_lost(self, exc: Optional[Exception]) -> None:
        """Unregister; requests still waiting for their body or response see a disconnect."""
        self.ctx.connections.discard(self)
        for request in (self.active, self.current):
            if request is not None:
                if not request.response_complete:
                    request.disconnected = True
                request.wake()
        self.resume_writing()
        if exc is None:
            self.transport.close()
        self._cancel_keep_alive()
        self.parser = None

    def eof_received(self) -> None:
        """Half-closed by the client: keep answering what was received (the transport closes afterwards)."""

    def data_received(self, data: bytes) -> None:
        """Feed the parser; a malformed request is answered with 400, an oversized head with 431, and the connection
        closed."""
        in_head, heads_done = self.in_head, self.heads_done
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.head_parsed > self.ctx.max_head_bytes:  # raised by on_url / on_header
                self._head_too_large()
                return
            message = "Invalid HTTP request received."
            logger.warning(message)
            self._send_400(message)
        except httptools.HttpParserUpgrade:
            logger.warning("Unsupported upgrade request.")
            logger.warning(_NO_WS)
            request = self.current
            if request is not None and not request.response_complete:
                request.keep_alive = False  # answered as plain HTTP, then the connection closes
                self.pause_reading()  # nothing after the upgrade request is read
            else:
                self.transport.close()
            return
        if in_head and self.in_head and heads_done == self.heads_done:  # all of ``data`` belongs to one head
            self.head_bytes += len(data)
            if self.head_bytes > self.ctx.max_head_bytes and not self.transport.is_closing():
                self._head_too_large()

    def _head_too_large(self) -> None:
        logger.warning("Request head larger than %d bytes; closing the connection.", self.ctx.max_head_bytes)
        self._send_error(431, "Request header fields too large.")

    def _send_400(self, message: str) -> None:
        self._send_error(400, message)

    def _send_error(self, status: int, message: str) -> None:
        body = message.encode("ascii")
        head = b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n" % len(body)
        self.transport.write(STATUS_LINE[status] + self.ctx.default_headers() + head + _CLOSE + b"\r\n" + body)
        self.transport.close()

    # -- parser callbacks ----------------------------------------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        """Collect the request target (it may arrive in pieces)."""
        self.url += url
        self.head_parsed += len(url)
        if self.head_parsed > self.ctx.max_head_bytes:
            raise ValueError("request head too large")  # httptools aborts parsing; data_received answers 431

    def on_header(self, name: bytes, value: bytes) -> None:
        """Collect a header (name lower-cased, trailing whitespace of the value removed as RFC 9110 requires)."""
        name = name.lower()
        value = value.rstrip(b" \t")
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100 = True
        self.headers.append((name, value))
        self.head_parsed += len(name) + len(value) + 4
        if self.head_parsed > self.ctx.max_head_bytes:
            raise ValueError("request head too large")  # httptools aborts parsing; data_received answers 431

    def on_message_begin(self) -> None:
        """A request head begins."""
        self.in_head = True
        self.head_parsed = 0

    def on_headers_complete(self) -> None:
        """Create the request; start it, or queue it behind the one being answered (pipelining)."""
        self.in_head = False
        self.head_bytes = 0
        self.heads_done += 1
        self.idle_since = None
        parser = self.parser
        ctx = self.ctx
        url = self.url
        if url.startswith(b"/") and b"#" not in url:
            raw_path, _, query = url.partition(b"?")
        else:
            parsed = httptools.parse_url(url)
            raw_path, query = parsed.path, parsed.query or b""
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        if ctx.root_path:
            path = ctx.root_path + path
            raw_path = ctx.raw_root_path + raw_path
        version = parser.get_http_version()
        method = parser.get_method().decode("ascii")
        keep_alive = version != "1.0" and parser.should_keep_alive()
        request = _Request(self, method, path, raw_path, query, self.headers, version, keep_alive, self.expect_100)
        self.url = b""
        self.headers = []
        self.expect_100 = False
        app: Optional[ASGIApp] = ctx.app
        if ctx.limit_concurrency is not None and (
            len(ctx.connections) >= ctx.limit_concurrency or len(ctx.tasks) >= ctx.limit_concurrency
        ):
            app = cast(ASGIApp, service_unavailable)
            logger.warning("Exceeded concurrency limit.")
        elif ctx.direct:
            match = classify(method, path)
            if match is not None:
                request.route, request.params = match
                request.direct = True
                app = None
        self.current = request
        if self.active is None:
            self._start(request, app)
        else:
            self.pause_reading()
            self.pipeline.appendleft((request, app))

    def on_body(self, body: bytes) -> None:
        """Collect body bytes: up to the server's limit for a hot route, else buffered for the ASGI ``receive``."""
        request = self.current
        if request is None or request.response_complete:
            return
        if request.direct:
            if request.too_large:
                return
            request.received += len(body)
            limit = self.ctx.limit
            if limit > 0 and request.received > limit:
                request.too_large = True
                request.chunks = []
                request.wake()
                return
            request.chunks.append(body)
            return
        request.chunks.append(body)
        request.buffered += len(body)
        if request.buffered > HIGH_WATER_LIMIT:
            self.pause_reading()
        request.wake()

    def on_message_complete(self) -> None:
        """The request body is complete."""
        request = self.current
        if request is None or request.response_complete:
            return
        request.more_body = False
        request.wake()

    # -- serving -------------------------------------------------------------------------------------------------------
    def _start(self, request: _Request, app: Optional[ASGIApp]) -> None:
        self.active = request
        coro = self._serve_direct(request) if app is None else self._serve_asgi(request, app)
        if self.ctx.reset_contextvars:  # a task copies the context it is created in (Python 3.10 has no context=)
            task = contextvars.Context().run(self.loop.create_task, coro)
        else:
            task = self.loop.create_task(coro)
        tasks = self.ctx.tasks
        task.add_done_callback(tasks.discard)
        tasks.add(task)

    async def _serve_direct(self, request: _Request) -> None:
        try:
            await self.ctx.door.serve(request, request.route, request.params)
        except BaseException as exc:  # noqa: BLE001 - answered like uvicorn answers an app's exception
            self._failed(request, exc)
        else:
            self._check_finished(request)

    async def _serve_asgi(self, request: _Request, app: ASGIApp) -> None:
        try:
            result = await cast(Any, app)(request.asgi_scope(), request.receive, request.send)
        except BaseException as exc:  # noqa: BLE001
            self._failed(request, exc)
        else:
            if result is not None:
                logger.error("ASGI callable should return None, but returned '%s'.", result)
                request.abort()
            else:
                self._check_finished(request)

    def _failed(self, request: _Request, exc: BaseException) -> None:
        if isinstance(exc, asyncio.CancelledError):  # the graceful-shutdown timeout ran out: no traceback
            logger.warning("Cancelled %s %s before its response was complete", request.method, request.path)
        else:
            logger.error("Exception in ASGI application\n", exc_info=exc)
        request.abort()

    def _check_finished(self, request: _Request) -> None:
        if request.disconnected:
            return
        if not request.response_started:
            logger.error("ASGI callable returned without starting response.")
            request.abort()
        elif not request.response_complete:
            logger.error("ASGI callable returned without completing response.")
            request.abort()

    def on_response_complete(self, request: _Request) -> None:
        """Count the request; start the next pipelined one or arm the keep-alive timer."""
        self.ctx.server_state.total_requests += 1
        if self.active is request:
            self.active = None
        if self.transport.is_closing():
            return
        self.resume_reading()
        if self.pipeline:
            self._start(*self.pipeline.pop())
        else:
            self._arm_idle_timer()

    def _arm_idle_timer(self) -> None:
        """Start counting idle time: waiting for the next request head (after connecting or answering a response)."""
        self.idle_since = self.loop.time()
        if self.keep_alive_handle is None:
            self.keep_alive_handle = self.loop.call_later(self.ctx.timeout_keep_alive, self._keep_alive_expired)

    def _keep_alive_expired(self) -> None:
        # One timer per connection, re-armed only while the connection stays idle (not once per request). Bytes of an
        # incomplete request head do not make a connection busy: only a complete head does (``on_headers_complete``).
        self.keep_alive_handle = None
        idle_since = self.idle_since
        if idle_since is None or self.active is not None or self.transport.is_closing():
            return
        remaining = idle_since + self.ctx.timeout_keep_alive - self.loop.time()
        if remaining > 0:
            self.keep_alive_handle = self.loop.call_later(remaining, self._keep_alive_expired)
        else:
            self.transport.close()

    def _cancel_keep_alive(self) -> None:
        if self.keep_alive_handle is not None:
            self.keep_alive_handle.cancel()
            self.keep_alive_handle = None

    def shutdown(self) -> None:
        """Graceful shutdown (called by uvicorn): close when idle, else after the response in flight."""
        request = self.current
        if request is None or request.response_complete:
            self.transport.close()
        else:
            request.keep_alive = False

    # -- flow control --------------------------------------------------------------------------------------------------
    def pause_reading(self) -> None:
        """Stop reading from the socket (pipelined request queued, or request body buffer full)."""
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Read from the socket again."""
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        """The transport's write buffer is above its high-water mark: responses wait in :meth:`drain`."""
        self.write_paused = True

    def resume_writing(self) -> None:
        """The write buffer drained (or the connection was lost): release the waiting responses."""
        self.write_paused = False
        waiters, self.drain_waiters = self.drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def drain(self) -> None:
        """Wait until writing may resume."""
        waiter: asyncio.Future[None] = self.loop.create_future()
        self.drain_waiters.append(waiter)
        await waiter


class _Request:
    """One request of a connection: the front door's :class:`~rollouthub.store.server_fastpath.Exchange` for a hot
    route, and the ASGI ``receive`` / ``send`` bridge for everything else."""

    __slots__ = (
        "proto",
        "method",
        "path",
        "raw_path",
        "query_string",
        "headers",
        "http_version",
        "keep_alive",
        "expect_100",
        "route",
        "params",
        "direct",
        "chunks",
        "buffered",
        "received",
        "too_large",
        "more_body",
        "signalled",
        "waiter",
        "disconnected",
        "response_started",
        "response_complete",
        "chunked",
        "remaining",
        "head",
        "scope",
    )

    def __init__(
        self,
        proto: HttpProtocol,
        method: str,
        path: str,
        raw_path: bytes,
        query_string: bytes,
        headers: List[Tuple[bytes, bytes]],
        http_version: str,
        keep_alive: bool,
        expect_100: bool,
    ) -> None:
        self.proto = proto
        self.method = method
        self.path = path
        self.raw_path = raw_path
        self.query_string = query_string
        self.headers = headers
        self.http_version = http_version
        self.keep_alive = keep_alive
        self.expect_100 = expect_100  # "100 Continue" not sent yet
        self.route: Any = None
        self.params: Tuple[str, ...] = ()
        self.direct = False
        self.chunks: List[bytes] = []  # request body not consumed yet
        self.buffered = 0
        self.received = 0
        self.too_large = False
        self.more_body = True
        self.signalled = False
        self.waiter: Optional[asyncio.Future[None]] = None
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        self.chunked: Optional[bool] = None
        self.remaining = 0  # bytes still due under the response's content-length
        self.head = b""  # ASGI response head, written together with the first body part
        self.scope: Optional[Scope] = None

    # -- waiting for the parser ----------------------------------------------------------------------------------------
    def wake(self) -> None:
        """Something happened (body bytes, end of body, disconnect, response complete): wake the waiting reader."""
        self.signalled = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        if not self.signalled:
            waiter = self.waiter = self.proto.loop.create_future()
            try:
                await waiter
            finally:
                self.waiter = None
        self.signalled = False

    def _take_body(self) -> bytes:
        chunks = self.chunks
        if not chunks:
            return b""
        self.chunks = []
        self.buffered = 0
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _send_continue(self) -> None:
        self.expect_100 = False
        transport = self.proto.transport
        if not transport.is_closing():
            transport.write(_CONTINUE)

    # -- Exchange (hot routes) -----------------------------------------------------------------------------------------
    @property
    def client(self) -> Optional[Tuple[str, int]]:
        """The client address as uvicorn's proxy-headers middleware would report it (for log lines only)."""
        proto = self.proto
        client = proto.client
        trusted = proto.ctx.trusted_hosts
        if trusted is None or client is None:
            return client
        try:
            if client[0] not in trusted:
                return client
            forwarded = [value for name, value in self.headers if name == b"x-forwarded-for"]
            if not forwarded:
                return client
            host, port = trusted.get_trusted_client_address(b", ".join(forwarded).decode("latin1"))
        except Exception:  # noqa: BLE001 - only used for logging
            return client
        return (host, port) if host else client

    def client_gone(self) -> bool:
        """Whether the connection was lost before the response was complete."""
        return self.disconnected

    async def read_body(self, limit: int) -> bytes:
        """The body collected by the parser (the limit was enforced while collecting: ``limit`` is the server's)."""
        if self.expect_100:
            self._send_continue()
        while self.more_body and not self.too_large and not self.disconnected:
            self.proto.resume_reading()
            await self._wait()
        self.signalled = False
        if self.too_large:
            raise BodyTooLarge()
        body = self._take_body()
        if self.more_body:
            raise ClientGone(body)
        return body

    async def respond(self, status: int, body: bytes, headers: ResponseHeaders = None, *, cors: bool = True) -> None:
        """Write the whole response in one ``transport.write`` (``cors`` is moot: with CORS the bridge is used)."""
        proto = self.proto
        if proto.write_paused and not self.disconnected:
            await proto.drain()
        if self.disconnected or self.response_started:
            return
        if headers is None:
            head, close = _JSON_HEAD % len(body), False
        else:
            head, close, _, _ = encode_headers(headers)
        proto.transport.write(b"".join((self._start_head(status, head, close), b"\r\n", body)))
        self._complete()

    async def replay(self, app: ASGIApp, body: bytes) -> None:
        """Hand the request, with ``body`` already read, to ``app`` through the ASGI bridge."""
        await self.proto.ctx.replay_app(app)(self.asgi_scope(), replay_receive(body, self.receive), self.send)

    # -- response helpers ----------------------------------------------------------------------------------------------
    def _start_head(self, status: int, head: bytes, close: bool) -> bytes:
        """Status line + default headers + ``head`` (+ ``connection: close`` when the connection ends after this)."""
        self.response_started = True
        self.expect_100 = False
        proto = self.proto
        if proto.access_log:
            self._log_access(status)
        if close:
            self.keep_alive = False
        elif not self.keep_alive:
            head += _CLOSE
        return STATUS_LINE[status] + proto.ctx.default_headers() + head

    def _log_access(self, status: int) -> None:
        client = self.scope.get("client") if self.scope is not None else self.client
        target = self.raw_path.decode("latin1")
        if self.query_string:
            target = f"{target}?{self.query_string.decode('latin1')}"
        access_logger.info(
            '%s - "%s %s HTTP/%s" %d',
            f"{client[0]}:{client[1]}" if client else "",
            self.method,
            target.replace('"', "%22"),
            self.http_version,
            status,
        )

    def _complete(self) -> None:
        self.response_complete = True
        self.wake()
        proto = self.proto
        if not self.keep_alive:
            proto.transport.close()
        proto.on_response_complete(self)

    def abort(self) -> None:
        """The app failed: answer 500 if nothing was sent yet, else cut the connection."""
        transport = self.proto.transport
        if self.disconnected:
            return
        if not self.response_started:
            transport.write(self._start_head(500, _HEAD_500, True) + b"\r\n" + _BODY_500)
            self._complete()
        else:
            if self.head:
                transport.write(self.head)
                self.head = b""
            transport.close()

    # -- ASGI bridge ---------------------------------------------------------------------------------------------------
    def asgi_scope(self) -> Scope:
        """The ASGI ``http`` scope of the request."""
        proto = self.proto
        ctx = proto.ctx
        scope: Scope = {
            "type": "http",
            "asgi": {"version": ctx.asgi_version, "spec_version": "2.3"},
            "http_version": self.http_version,
            "server": proto.server,
            "client": proto.client,
            "scheme": proto.scheme,
            "root_path": ctx.root_path,
            "headers": self.headers,
            "state": proto.app_state.copy(),
            "method": self.method,
            "path": self.path,
            "raw_path": self.raw_path,
            "query_string": self.query_string,
        }
        self.scope = scope
        return scope

    async def receive(self) -> Message:
        """ASGI ``receive``: the body as it arrives, then ``http.disconnect`` once disconnected or answered."""
        if self.expect_100:
            self._send_continue()
        if not self.disconnected and not self.response_complete:
            self.proto.resume_reading()
            await self._wait()
        if self.disconnected or self.response_complete:
            return dict(_DISCONNECT)
        return {"type": "http.request", "body": self._take_body(), "more_body": self.more_body}

    async def send(self, message: Message) -> None:
        """ASGI ``send``; the response head goes out together with the first body part."""
        proto = self.proto
        if proto.write_paused and not self.disconnected:
            await proto.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{kind}'.")
            status = message["status"]
            head, close, self.remaining, self.chunked = encode_headers(message.get("headers", ()))
            head = self._start_head(status, head, close)
            if self.chunked is None and self.method != "HEAD" and status not in (204, 304):
                self.chunked = True  # neither content-length nor transfer-encoding
                head += _CHUNKED
            self.head = head + b"\r\n"
        elif not self.response_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
            body = message.get("body", b"")
            more_body = message.get("more_body", False)
            data, self.head = self.head, b""
            if self.method == "HEAD":
                self.remaining = 0
            elif self.chunked:
                if body:
                    data += b"%x\r\n%s\r\n" % (len(body), body)
                if not more_body:
                    data += b"0\r\n\r\n"
            else:
                if len(body) > self.remaining:
                    raise RuntimeError("Response content longer than Content-Length")
                self.remaining -= len(body)
                data += body
            if data:
                proto.transport.write(data)
            if not more_body:
                if self.remaining != 0:
                    raise RuntimeError("Response content shorter than Content-Length")
                self._complete()
        else:
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent, after response already completed.")
