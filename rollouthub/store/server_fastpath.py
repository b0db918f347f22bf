"""The store server's *front door*: the ASGI callable given to uvicorn, serving the hot routes by itself.

Every request of a training loop (runners' dequeue/heartbeat/span/attempt updates, the algorithm's enqueue/resources/
wait calls, OTLP exports) is handled here completely -- bearer auth, body limit, request parsing, the store call, error
mapping, metrics, the debug timing log and CORS -- without FastAPI's routing, dependency injection and middleware
layers. Everything else (other routes, other methods, ``OPTIONS`` preflights, the dashboard, docs) goes to the FastAPI
app (``LightningStoreServer.app``) with its full middleware stack, unchanged.

A hot request the front door cannot take as is -- a body that is not JSON with an ``application/json`` content type,
fails validation, or a missing required body -- is replayed unchanged through the FastAPI app, so error responses keep
FastAPI's exact shape. The responses of the front door equal those of the FastAPI route (same status codes, JSON bodies
and headers; ``tests/store/test_server_fastpath.py`` checks every hot route against the app).

Outermost first, the order of the checks mirrors the FastAPI app's middleware: error mapping (store ``ValueError`` etc.
→ 400 with ``error_type``, sent without CORS headers like :class:`~rollouthub.store.server_app.ErrorMappingMiddleware`)
→ metrics → CORS → bearer auth → body limit → route.

The hot-route logic is transport independent: :meth:`FrontDoor.serve` works on an :class:`Exchange` (one request: its
method, path, headers, a way to read the body, to send the whole response at once and to replay the request through
the FastAPI app). :meth:`FrontDoor.__call__` wraps an ASGI request in :class:`AsgiExchange`; the store server's own
HTTP protocol (:mod:`rollouthub.store.server_protocol`) implements the same interface straight on the socket.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, Iterable, List, Optional, Protocol, Tuple

from starlette.exceptions import HTTPException as StarletteHTTPException

from rollouthub.types import Span
from rollouthub.utils.otlp import export_otlp

from . import server_routes as routes
from .client_server import (
    DequeueManyRolloutsRequest,
    EnqueueManyRolloutsRequest,
    NextSequenceIdRequest,
    QueryAttemptsRequest,
    QueryRolloutsRequest,
    QuerySpansRequest,
    RolloutRequest,
    UpdateAttemptRequest,
    UpdateWorkerRequest,
    WaitForRolloutsRequest,
)
from .domains import InputDomainError
from .server_app import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    error_payload,
    logger,
    template_http_path,
)
from .utils import LATENCY_BUCKETS

if TYPE_CHECKING:
    from .client_server import LightningStoreServer

__all__ = [
    "AsgiExchange",
    "BodyTooLarge",
    "ClientGone",
    "Exchange",
    "FrontDoor",
    "HotRoute",
    "build_front_door",
    "classify",
    "replay_receive",
]

_DEBUG = logging.DEBUG
_perf_counter = time.perf_counter
_compare_digest = hmac.compare_digest
_JSON_HEADER = (b"content-type", b"application/json")
_TEXT_500 = b"Internal Server Error"
_RESPONSE_KEY = "rollouthub.response"
_FALLBACK: Any = object()
"""Marker of a request body the front door does not take (it is replayed through the FastAPI app)."""

Handler = Callable[..., Awaitable[bytes]]
"""``(server, path parameters, parsed body)`` -- plus the :class:`Exchange` for routes with ``takes_exchange`` -- to
the awaitable JSON bytes of the success response."""


class HotRoute:
    """One route served by the front door.

    ``validate`` parses a JSON body (``None`` for routes without a body), ``optional_body`` makes an empty body mean
    ``None`` (FastAPI's ``Optional[Model] = None`` body), ``status`` is the success status code and ``templated`` says
    whether the metrics path label needs :func:`template_http_path` (routes with path parameters); a handler with
    ``takes_exchange`` also gets the :class:`Exchange` (a long-polling route asks it whether the client is gone).
    """

    __slots__ = ("name", "handler", "validate", "optional_body", "status", "templated", "auth_exempt", "takes_exchange")

    def __init__(
        self,
        name: str,
        handler: Handler,
        validate: Optional[Callable[[bytes], Any]] = None,
        *,
        optional_body: bool = False,
        status: int = 200,
        templated: bool = False,
        auth_exempt: bool = False,
        takes_exchange: bool = False,
    ) -> None:
        self.name = name
        self.handler = handler
        self.validate = validate
        self.optional_body = optional_body
        self.status = status
        self.templated = templated
        self.auth_exempt = auth_exempt
        self.takes_exchange = takes_exchange


# -- handlers: (server, path parameters, parsed body) -> awaitable JSON bytes of the success response -----------------


async def _health(server: Any, params: Tuple[str, ...], request: Any) -> bytes:
    return b'{"status":"ok"}'


def _validator(model: Any) -> Callable[[bytes], Any]:
    return model.__pydantic_validator__.validate_json  # type: ignore[no-any-return]


HEALTH = HotRoute("health", _health, auth_exempt=True)
ENQUEUE = HotRoute(
    "enqueue", lambda s, p, r: routes.op_enqueue(s, r), _validator(EnqueueManyRolloutsRequest), status=201
)
DEQUEUE = HotRoute(
    "dequeue",
    lambda s, p, r, x: routes.op_dequeue(s, r, x.client_gone),
    _validator(DequeueManyRolloutsRequest),
    optional_body=True,
    takes_exchange=True,
)
START_ROLLOUT = HotRoute(
    "start_rollout", lambda s, p, r: routes.op_start_rollout(s, r), _validator(RolloutRequest), status=201
)
SEARCH_ROLLOUTS = HotRoute(
    "search_rollouts", lambda s, p, r: routes.op_search_rollouts(s, r), _validator(QueryRolloutsRequest)
)
GET_ROLLOUT = HotRoute("get_rollout", lambda s, p, r: routes.op_get_rollout_by_id(s, p[0]), templated=True)
SEARCH_ATTEMPTS = HotRoute(
    "search_attempts",
    lambda s, p, r: routes.op_query_attempts(s, p[0], r),
    _validator(QueryAttemptsRequest),
    templated=True,
)
UPDATE_ATTEMPT = HotRoute(
    "update_attempt",
    lambda s, p, r: routes.op_update_attempt(s, p[0], p[1], r),
    _validator(UpdateAttemptRequest),
    templated=True,
)
UPDATE_WORKER = HotRoute(
    "update_worker",
    lambda s, p, r: routes.op_update_worker(s, p[0], r),
    _validator(UpdateWorkerRequest),
    optional_body=True,
    templated=True,
)
ADD_RESOURCES = HotRoute(
    "add_resources", lambda s, p, r: routes.op_add_resources(s, r), routes.NAMED_RESOURCES.validate_json, status=201
)
UPDATE_RESOURCES = HotRoute(
    "update_resources",
    lambda s, p, r: routes.op_update_resources(s, p[0], r),
    routes.NAMED_RESOURCES.validate_json,
    templated=True,
)
GET_LATEST_RESOURCES = HotRoute("get_latest_resources", lambda s, p, r: routes.op_get_latest_resources(s))
GET_RESOURCES = HotRoute("get_resources", lambda s, p, r: routes.op_get_resources_by_id(s, p[0]), templated=True)
ADD_SPAN = HotRoute("add_span", lambda s, p, r: routes.op_add_span(s, r), _validator(Span), status=201)
SEARCH_SPANS = HotRoute("search_spans", lambda s, p, r: routes.op_query_spans(s, r), _validator(QuerySpansRequest))
NEXT_SEQUENCE_ID = HotRoute(
    "next_sequence_id", lambda s, p, r: routes.op_get_next_span_sequence_id(s, r), _validator(NextSequenceIdRequest)
)
WAIT_FOR_ROLLOUTS = HotRoute(
    "wait_for_rollouts", lambda s, p, r: routes.op_wait_for_rollouts(s, r), _validator(WaitForRolloutsRequest)
)
OTLP_TRACES = HotRoute("otlp_traces", _health)  # handled specially (raw body, OTLP responses)

_EXACT_GET: Dict[str, HotRoute] = {"health": HEALTH, "resources/latest": GET_LATEST_RESOURCES}
_EXACT_POST: Dict[str, HotRoute] = {
    "queues/rollouts/enqueue": ENQUEUE,
    "queues/rollouts/dequeue": DEQUEUE,
    "rollouts": START_ROLLOUT,
    "rollouts/search": SEARCH_ROLLOUTS,
    "resources": ADD_RESOURCES,
    "spans": ADD_SPAN,
    "spans/search": SEARCH_SPANS,
    "spans/next": NEXT_SEQUENCE_ID,
    "waits/rollouts": WAIT_FOR_ROLLOUTS,
}
_NO_PARAMS: Tuple[str, ...] = ()


def classify(method: str, path: str) -> Optional[Tuple[HotRoute, Tuple[str, ...]]]:
    """The hot route serving ``method path`` and its path parameters, or ``None`` (the request goes to FastAPI).

    Matches exactly the paths FastAPI's router would send to the same handler (route registration order included,
    e.g. ``POST /workers/search`` is the search route, not ``update_worker("search")``); path parameters never contain
    ``/`` and are never empty.
    """
    if not path.startswith("/v1/agl/"):
        if path == "/v1/traces" and method == "POST":
            return OTLP_TRACES, _NO_PARAMS
        return None
    rest = path[8:]
    if method == "POST":
        route = _EXACT_POST.get(rest)
        if route is not None:
            return route, _NO_PARAMS
        parts = rest.split("/")
        n = len(parts)
        if n == 4:
            rollout_id, attempt_id = parts[1], parts[3]
            if parts[0] == "rollouts" and parts[2] == "attempts" and rollout_id and attempt_id:
                if attempt_id == "search":
                    return SEARCH_ATTEMPTS, (rollout_id,)
                return UPDATE_ATTEMPT, (rollout_id, attempt_id)
        elif n == 2 and parts[1]:
            if parts[0] == "workers":
                return (UPDATE_WORKER, (parts[1],)) if parts[1] != "search" else None
            if parts[0] == "resources":
                return UPDATE_RESOURCES, (parts[1],)
        return None
    if method == "GET":
        route = _EXACT_GET.get(rest)
        if route is not None:
            return route, _NO_PARAMS
        parts = rest.split("/")
        if len(parts) == 2 and parts[1]:
            if parts[0] == "rollouts":
                return GET_ROLLOUT, (parts[1],)
            if parts[0] == "resources":  # "latest" is matched above
                return GET_RESOURCES, (parts[1],)
    return None


def _is_json_content_type(value: bytes) -> bool:
    """``application/json`` (optionally with parameters): a type FastAPI also parses as JSON. Others fall back."""
    return value == b"application/json" or value.startswith(b"application/json;")


def replay_receive(body: bytes, receive: Receive, pending: Optional[Message] = None) -> Receive:
    """A ``receive`` that first yields the already-read ``body``, then ``pending`` (if any), then defers to ``receive``."""
    sent = [False]

    async def replayed() -> Message:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        if pending is not None:
            return pending
        return await receive()

    return replayed


class BodyTooLarge(Exception):
    """The request body exceeds the server's limit (answered with 413)."""


class ClientGone(Exception):
    """The client disconnected before the end of the request body; ``body`` holds what was read."""

    def __init__(self, body: bytes) -> None:
        super().__init__("client disconnected before the end of the request body")
        self.body = body


ResponseHeaders = Optional[List[Tuple[bytes, bytes]]]
"""Response headers (lower-case names); ``None`` means JSON: ``content-type: application/json`` + ``content-length``."""


class Exchange(Protocol):
    """One HTTP request served by :meth:`FrontDoor.serve`, independent of the transport that carries it.

    Implemented by :class:`AsgiExchange` (an ASGI request) and by the store server's HTTP protocol
    (:mod:`rollouthub.store.server_protocol`), which serves the hot routes straight from the socket.
    """

    @property
    def method(self) -> str:
        """Request method (upper case)."""
        ...

    @property
    def path(self) -> str:
        """Percent-decoded request path, root path included (like the ASGI ``scope["path"]``)."""
        ...

    @property
    def headers(self) -> Iterable[Tuple[bytes, bytes]]:
        """Request headers in order, names in lower case."""
        ...

    @property
    def client(self) -> Optional[Tuple[str, int]]:
        """The client's address (for the debug log line), if known."""
        ...

    @property
    def http_version(self) -> str:
        """``"1.1"``, ``"1.0"``, …"""
        ...

    async def read_body(self, limit: int) -> bytes:
        """The whole request body; :class:`BodyTooLarge` above ``limit`` bytes (``<= 0``: no limit) and
        :class:`ClientGone` when the client disconnects before its end."""
        ...

    async def respond(self, status: int, body: bytes, headers: ResponseHeaders = None, *, cors: bool = True) -> None:
        """Send the complete response. ``cors=False``: skip CORS processing (mapped application errors, as in the app)."""
        ...

    def client_gone(self) -> bool:
        """Whether the client is known to have disconnected (a long-polling route stops waiting and claims nothing)."""
        ...

    async def replay(self, app: ASGIApp, body: bytes) -> None:
        """Hand the request to the ASGI ``app``, with ``body`` (already read) as its request body."""
        ...


async def _send_response(send: Send, status: int, body: bytes, headers: ResponseHeaders = None) -> None:
    if headers is None:
        headers = [_JSON_HEADER, (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class AsgiExchange:
    """:class:`Exchange` over an ASGI request (``scope``, ``receive``, ``send``) of the front door ``door``."""

    __slots__ = ("door", "scope", "receive", "send", "pending")

    def __init__(self, door: FrontDoor, scope: Scope, receive: Receive, send: Send) -> None:
        self.door = door
        self.scope = scope
        self.receive = receive
        self.send = send
        self.pending: Optional[Message] = None  # the disconnect message that ended a body early

    @property
    def method(self) -> str:
        """``scope["method"]``."""
        return str(self.scope["method"])

    @property
    def path(self) -> str:
        """``scope["path"]``."""
        return str(self.scope["path"])

    @property
    def headers(self) -> Iterable[Tuple[bytes, bytes]]:
        """``scope["headers"]``."""
        return self.scope["headers"]  # type: ignore[no-any-return]

    @property
    def client(self) -> Optional[Tuple[str, int]]:
        """``scope["client"]``."""
        return self.scope.get("client")

    @property
    def http_version(self) -> str:
        """``scope["http_version"]``."""
        return str(self.scope.get("http_version", "1.1"))

    async def read_body(self, limit: int) -> bytes:
        """Read ``http.request`` messages up to the end of the body (see :meth:`Exchange.read_body`)."""
        receive = self.receive
        chunks: List[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                self.pending = message
                raise ClientGone(b"".join(chunks))
            chunk = message.get("body", b"")
            received += len(chunk)
            if limit > 0 and received > limit:
                raise BodyTooLarge()
            if not message.get("more_body", False):
                if not chunks:
                    return chunk  # type: ignore[no-any-return]
                chunks.append(chunk)
                return b"".join(chunks)
            chunks.append(chunk)

    async def respond(self, status: int, body: bytes, headers: ResponseHeaders = None, *, cors: bool = True) -> None:
        """Send ``http.response.start`` + ``http.response.body`` (through the front door's CORS wrapper if any)."""
        door = self.door
        if cors and door._cors is not None:
            self.scope[_RESPONSE_KEY] = (status, body, headers)
            await door._cors(self.scope, self.receive, self.send)
        else:
            await _send_response(self.send, status, body, headers)

    def client_gone(self) -> bool:
        """True when a disconnect was received while reading the body (ASGI gives no way to look without reading)."""
        return self.pending is not None

    async def replay(self, app: ASGIApp, body: bytes) -> None:
        """Call ``app`` with a ``receive`` that yields ``body`` first (then the disconnect that ended it, if any)."""
        await app(self.scope, replay_receive(body, self.receive, self.pending), self.send)


class FrontDoor:
    """ASGI front door of the store server: serves the :func:`classify` routes itself, the rest through ``app``.

    Args:
        app: The FastAPI app with its full middleware stack (receives every request the front door does not serve).
        server: The :class:`~rollouthub.store.client_server.LightningStoreServer` whose methods the routes call.
        api_token: Bearer token required on every hot route except the health check (``None``: no auth).
        max_body_bytes: Request body limit (413 above it; ``<= 0`` disables it).
        tracker: Metrics backend recording ``agl.http.total`` / ``agl.http.latency``, or ``None``.
        cors_origins: Allowed CORS origins (``None``: no CORS); responses then pass Starlette's ``CORSMiddleware``
            configured exactly like the app's.
    """

    def __init__(
        self,
        app: ASGIApp,
        server: LightningStoreServer,
        *,
        api_token: Optional[str] = None,
        max_body_bytes: int = 0,
        tracker: Any = None,
        cors_origins: Optional[List[str]] = None,
    ) -> None:
        self.app = app
        self.server = server
        self._expected_auth = f"Bearer {api_token}".encode() if api_token else None
        self._limit = int(max_body_bytes)
        self._tracker = tracker
        if tracker is not None:  # the same definitions as MetricsMiddleware's (registering twice is a no-op)
            tracker.register_counter("agl.http.total", ["path", "method", "status"], group_level=2)
            tracker.register_histogram(
                "agl.http.latency", ["path", "method", "status"], buckets=LATENCY_BUCKETS, group_level=2
            )
        self._cors: Optional[ASGIApp] = None
        if cors_origins:
            from starlette.middleware.cors import CORSMiddleware

            self._cors = CORSMiddleware(
                self._emit,
                allow_origins=cors_origins,
                allow_methods=["*"],
                allow_headers=["*"],
                allow_credentials=True,
                expose_headers=["*"],
            )

    @property
    def max_body_bytes(self) -> int:
        """The request body limit (``<= 0``: none)."""
        return self._limit

    @property
    def serves_directly(self) -> bool:
        """Whether a transport may call :meth:`serve` itself; ``False`` with CORS (hot requests then go through
        :meth:`__call__`, where CORS needs the ASGI request)."""
        return self._cors is None

    def http_protocol_factory(self) -> Callable[..., Any]:
        """A uvicorn ``Config(http=...)`` protocol factory serving this front door straight from the socket."""
        from .server_protocol import protocol_factory

        return protocol_factory(self)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI request (or hand it to the FastAPI app)."""
        if scope["type"] == "http":
            match = classify(scope["method"], scope["path"])
            if match is not None:
                await self.serve(AsgiExchange(self, scope, receive, send), match[0], match[1])
                return
        await self.app(scope, receive, send)

    async def _emit(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Innermost app of the CORS wrapper: send the response prepared in ``scope``."""
        status, body, headers = scope.pop(_RESPONSE_KEY)
        await _send_response(send, status, body, headers)

    # -- request handling (transport independent) ----------------------------------------------------------------------
    async def serve(self, exchange: Exchange, route: HotRoute, params: Tuple[str, ...]) -> None:
        """Serve a request :func:`classify` matched to ``route``: metrics, debug log, errors, auth, limit, route."""
        debug = logger.isEnabledFor(_DEBUG)
        if not debug and self._tracker is None:
            try:
                await self._handle(exchange, route, params)
            except _MappedError:
                pass
            return
        t0 = _perf_counter()
        try:
            status = await self._handle(exchange, route, params)
        except asyncio.CancelledError:
            await self._finish(exchange, route, t0, debug, 500, "499")
            raise
        except _MappedError as mapped:
            await self._finish(exchange, route, t0, debug, mapped.status, mapped.label)
            return
        except Exception as exc:
            await self._finish(exchange, route, t0, debug, 500, type(exc).__name__)
            raise
        if status is not None:  # None: replayed through the FastAPI app, which logs and records the request itself
            await self._finish(exchange, route, t0, debug, status, str(status))

    async def _finish(
        self, exchange: Exchange, route: HotRoute, t0: float, debug: bool, log_status: int, metric_status: str
    ) -> None:
        """Record the HTTP metrics (like ``MetricsMiddleware``) and the debug timing line (like the error mapping)."""
        tracker = self._tracker
        if tracker is not None:
            path = exchange.path
            labels = {
                "path": template_http_path(path) if route.templated else path,
                "method": exchange.method,
                "status": metric_status,
            }
            try:
                await tracker.inc_counter("agl.http.total", 1.0, labels)
                await tracker.observe_histogram("agl.http.latency", _perf_counter() - t0, labels)
            except Exception:  # noqa: BLE001 - metrics must never break a request
                logger.debug("Failed to record HTTP metrics", exc_info=True)
        if debug:
            client = exchange.client
            logger.debug(
                '%s - "%s %s HTTP/%s" %s in %.2f ms',
                f"{client[0]}:{client[1]}" if client else "-",
                exchange.method,
                exchange.path,
                exchange.http_version,
                log_status,
                (_perf_counter() - t0) * 1000,
            )

    async def _handle(self, exchange: Exchange, route: HotRoute, params: Tuple[str, ...]) -> Optional[int]:
        """Serve the request; the status code sent, or ``None`` when the request was replayed through the app."""
        authorization: Optional[bytes] = None
        content_type = b""
        content_length: Optional[bytes] = None
        for key, value in exchange.headers:
            if key == b"content-type":
                if not content_type:
                    content_type = value
            elif key == b"content-length":
                if content_length is None:
                    content_length = value
            elif key == b"authorization":
                if authorization is None:
                    authorization = value
        expected = self._expected_auth
        if expected is not None and not route.auth_exempt:
            provided = authorization or b""
            if not _compare_digest(provided, expected):
                detail = b"Missing bearer token" if not provided else b"Invalid bearer token"
                body = b'{"detail":"' + detail + b'"}'
                headers = [_JSON_HEADER, (b"content-length", b"%d" % len(body)), (b"www-authenticate", b"Bearer")]
                await exchange.respond(401, body, headers)
                return 401
        limit = self._limit
        if limit > 0 and content_length is not None:
            try:
                declared = int(content_length)
            except ValueError:
                await exchange.respond(400, b'{"detail":"Invalid Content-Length header"}')
                return 400
            if declared > limit:
                return await self._too_large(exchange)
        if route is OTLP_TRACES:
            return await self._otlp(exchange)
        request: Any = None
        if route.validate is not None:
            try:
                body = await exchange.read_body(limit)
            except BodyTooLarge:
                return await self._too_large(exchange)
            except ClientGone as gone:  # FastAPI decides what a partial body means
                await exchange.replay(self.app, gone.body)
                return None
            try:
                request = self._parse(route, body, content_type)
            except InputDomainError as exc:  # raised by the request model's own validator
                raise await self._map_error(exchange, exc) from exc
            if request is _FALLBACK:
                await exchange.replay(self.app, body)
                return None
        try:
            if route.takes_exchange:
                payload = await route.handler(self.server, params, request, exchange)
            else:
                payload = await route.handler(self.server, params, request)
        except StarletteHTTPException as exc:
            return await self._detail(exchange, exc)
        except Exception as exc:
            raise await self._map_error(exchange, exc) from exc
        status = route.status
        await exchange.respond(status, payload)
        return status

    async def _too_large(self, exchange: Exchange) -> int:
        body = routes.dump_json({"detail": f"Request body too large (limit {self._limit} bytes)"})
        await exchange.respond(413, body)
        return 413

    async def _detail(self, exchange: Exchange, exc: StarletteHTTPException) -> int:
        """Answer an ``HTTPException`` like the app's exception handler (``{"detail": …}`` plus its headers)."""
        body = routes.dump_json({"detail": exc.detail})
        headers = [_JSON_HEADER, (b"content-length", b"%d" % len(body))]
        for key, value in (getattr(exc, "headers", None) or {}).items():
            headers.append((key.lower().encode("latin-1"), value.encode("latin-1")))
        await exchange.respond(exc.status_code, body, headers)
        return exc.status_code

    @staticmethod
    def _parse(route: HotRoute, body: bytes, content_type: bytes) -> Any:
        """Validate a JSON body into the route's request model; ``_FALLBACK`` for anything unusual."""
        if not body:
            return None if route.optional_body else _FALLBACK
        if not _is_json_content_type(content_type):
            return _FALLBACK
        try:
            return route.validate(body)  # type: ignore[misc]
        except ValueError:  # pydantic's ValidationError is a ValueError
            return _FALLBACK

    async def _map_error(self, exchange: Exchange, exc: Exception) -> _MappedError:
        """Answer an exception of a ``/v1/agl`` store call like ``ErrorMappingMiddleware`` (no CORS headers)."""
        status, payload = error_payload(exc)
        method, path = exchange.method, exchange.path
        if status >= 500:
            logger.error("Error while handling %s %s", method, path, exc_info=exc)
        else:
            logger.info("Rejected %s %s: %s: %s", method, path, type(exc).__name__, exc)
        await exchange.respond(status, routes.dump_json(payload), cors=False)
        return _MappedError(status, type(exc).__name__)

    # -- OTLP ----------------------------------------------------------------------------------------------------------
    async def _otlp(self, exchange: Exchange) -> int:
        """``POST /v1/traces``: OTLP export (a body over the limit is a 413, like on the REST routes)."""
        content_type = content_encoding = accept_encoding = None
        for key, value in exchange.headers:
            if key == b"content-type":
                content_type = content_type or value.decode("latin-1")
            elif key == b"content-encoding":
                content_encoding = content_encoding or value.decode("latin-1")
            elif key == b"accept-encoding":
                accept_encoding = accept_encoding or value.decode("latin-1")
        limit = self._limit

        async def read_body() -> bytes:
            try:
                return await exchange.read_body(limit)
            except ClientGone:
                from starlette.requests import ClientDisconnect

                raise ClientDisconnect() from None

        server = self.server
        try:
            result = await export_otlp(
                content_type,
                content_encoding,
                accept_encoding,
                read_body,
                server.add_many_spans,
                server.get_many_span_sequence_ids,
                add_many_spans_assigning_ids=server.add_many_spans_assigning_ids,
                max_body_bytes=limit,
            )
        except BodyTooLarge:
            return await self._too_large(exchange)
        except Exception:
            # Outside /v1/agl the app maps nothing: Starlette's ServerErrorMiddleware answers a plain 500 and re-raises.
            headers = [(b"content-length", b"21"), (b"content-type", b"text/plain; charset=utf-8")]
            await exchange.respond(500, _TEXT_500, headers, cors=False)
            raise
        await exchange.respond(result.status_code, result.body, result.raw_headers())
        return int(result.status_code)


class _MappedError(Exception):
    """Raised after an application error was answered (carries the logged status and the metrics label)."""

    def __init__(self, status: int, label: str) -> None:
        super().__init__(label)
        self.status = status
        self.label = label


def build_front_door(server: LightningStoreServer, app: ASGIApp) -> FrontDoor:
    """The front door of ``server`` in front of its FastAPI ``app`` (configured from the server's settings)."""
    return FrontDoor(
        app,
        server,
        api_token=server._api_token,
        max_body_bytes=server._max_body_bytes,
        tracker=server._tracker,
        cors_origins=server._cors_allow_origins,
    )
