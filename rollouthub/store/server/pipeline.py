"""The store server's request pipeline: the one ASGI app uvicorn serves.

Every request goes through :meth:`StoreApp.__call__`, in this order: metrics and the debug timing line (around
everything) → CORS (Starlette's ``CORSMiddleware``, only with configured origins) → bearer-token authentication →
the declared ``Content-Length`` against the body limit → the route (:class:`~rollouthub.store.server.routing.Router`)
→ the request body (read up to the limit, validated into the route's body type) and query parameters (validated
into the route's query model) → the handler → the response. Failures are answered here, once:

* ``HTTPException`` → its status with ``{"detail": ...}`` (and its headers);
* invalid body or query parameters → 422 with FastAPI's ``{"detail": [{"type", "loc", "msg", "input", ...}]}``
  (the same parsing rules: JSON when the content type is ``application/json`` or ``+json``, ``loc`` prefixed with
  ``body``/``query``, a JSON syntax error is ``json_invalid``);
* a body over the limit → 413, an invalid ``Content-Length`` → 400, an unknown path → 404, a known path with another
  method → 405 (``allow`` header), a path that matches only with/without a trailing slash → 307 to it (Starlette's
  rules, which the server followed before);
* any other exception of an API route → :func:`~rollouthub.store.server.errors.error_payload` (400 for invalid
  input, 410 for evicted spans, 503 for an unavailable database, 500 with the traceback); elsewhere a plain-text 500.

The handlers only see validated input (:class:`Call`) and return the JSON bytes of the success response, a complete
response ``(status, body, headers)``, or an ASGI app (a Starlette response, static files, the Prometheus app) that
answers the request itself.
"""

from __future__ import annotations

import asyncio
import email.message
import hmac
import json
import logging
import time
from typing import Any, Awaitable, Callable, Dict, List, MutableMapping, Optional, Tuple
from urllib.parse import parse_qsl

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError
from pydantic_core import to_json as _to_json
from starlette.datastructures import State
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ..utils import LATENCY_BUCKETS
from .errors import error_payload, template_http_path, validation_error_body
from .routing import Route, Router

__all__ = ["BodyTooLarge", "Call", "RequestValidationFailed", "StoreApp", "Receive", "Scope", "Send", "dump_json"]

logger = logging.getLogger("rollouthub.store.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_DEBUG = logging.DEBUG
_perf_counter = time.perf_counter
_compare_digest = hmac.compare_digest
_JSON = (b"content-type", b"application/json")
_TEXT = (b"content-type", b"text/plain; charset=utf-8")
_STATUS_KEY = "rollouthub.status"
_ROUTE_KEY = "rollouthub.route"
_HEALTH_PATH = "/v1/agl/health"
_UNAUTHENTICATED_DOCS = ("/openapi.json", "/docs", "/redoc")


class BodyTooLarge(Exception):
    """The request body exceeds the server's limit (answered with 413)."""


class RequestValidationFailed(Exception):
    """Invalid body or query parameters: ``errors`` in FastAPI's shape (answered with 422)."""

    def __init__(self, errors: List[Dict[str, Any]]) -> None:
        super().__init__("request validation failed")
        self.errors = errors


class Call:
    """One request as a handler sees it: the server, path parameters, validated body and query, the ASGI triple."""

    __slots__ = ("app", "server", "params", "body", "query", "scope", "receive", "_watch")

    def __init__(self, app: StoreApp, params: Tuple[str, ...], scope: Scope, receive: Receive) -> None:
        self.app = app
        self.server = app.server
        self.params = params
        self.body: Any = None
        self.query: Any = None
        self.scope = scope
        self.receive = receive
        self._watch: Optional[asyncio.Future[Any]] = None

    async def read_body(self, message: Optional[Message] = None) -> bytes:
        """The whole request body (from ``message`` on, the request's first ASGI message when already received):
        :class:`BodyTooLarge` above the server's limit, ``ClientDisconnect`` when the client leaves before its end."""
        limit = self.app.max_body_bytes
        if message is None:
            message = await self.receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        body: bytes = message.get("body", b"")
        if not message.get("more_body", False):
            if 0 < limit < len(body):
                raise BodyTooLarge()
            return body
        chunks = [body]
        received = len(body)
        while True:
            message = await self.receive()
            if message["type"] != "http.request":
                raise ClientDisconnect()
            chunk = message.get("body", b"")
            received += len(chunk)
            if 0 < limit < received:
                raise BodyTooLarge()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def watch_disconnect(self) -> None:
        """Start watching for the client's disconnect (once the whole body was read): the request's next ASGI message
        is then ``http.disconnect``, so a held request costs one pending ``receive()`` and no polling."""
        if self._watch is None:
            self._watch = asyncio.ensure_future(self.receive())

    def client_gone(self) -> bool:
        """Whether the client disconnected since :meth:`watch_disconnect` (``False`` before)."""
        watch = self._watch
        return watch is not None and watch.done()

    def close(self) -> None:
        """Stop watching for a disconnect."""
        if self._watch is not None and not self._watch.done():
            self._watch.cancel()


def _json_headers(body: bytes) -> List[Tuple[bytes, bytes]]:
    return [_JSON, (b"content-length", b"%d" % len(body))]


async def _send(send: Send, status: int, body: bytes, headers: List[Tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def dump_json(payload: Any) -> bytes:
    """Compact UTF-8 JSON of an error payload (ASCII escapes when it holds text UTF-8 cannot encode)."""
    try:
        return _to_json(payload)
    except PydanticSerializationError:
        return json.dumps(payload, separators=(",", ":"), default=str).encode()


def _detail(detail: Any) -> bytes:
    return dump_json({"detail": detail})


def _is_json_content_type(value: Optional[bytes]) -> bool:
    """FastAPI's rule: ``application/json`` or ``application/*+json`` (parameters allowed)."""
    if value is None:
        return False
    if value == b"application/json":
        return True
    message = email.message.Message()
    message["content-type"] = value.decode("latin-1")
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


def _prefixed(errors: List[Any], prefix: Tuple[str, ...]) -> List[Dict[str, Any]]:
    out = []
    for error in errors:
        error = dict(error)
        error["loc"] = prefix + tuple(error.get("loc", ()))
        if error.get("type") == "missing":
            error["input"] = None
        out.append(error)
    return out


class StoreApp:
    """The ASGI app of a store server: :class:`Router` + the pipeline described in the module docstring.

    Args:
        server: The ``LightningStoreServer`` whose store the handlers call (``call.server``).
        routes: The declared routes, in matching order.
        api_token: Bearer token required on every route except public ones and, with ``dashboard``, the dashboard's
            files (``None``: no authentication).
        max_body_bytes: Request body limit (413 above it; ``<= 0``: none).
        tracker: Metrics backend recording ``agl.http.total`` / ``agl.http.latency``, or ``None``.
        cors_origins: Allowed CORS origins (``None``: no CORS).
        dashboard: Whether the dashboard is served (its files need no token).
        openapi: Builds the OpenAPI document (called once, on first use).
    """

    def __init__(
        self,
        server: Any,
        routes: List[Route],
        *,
        api_token: Optional[str] = None,
        max_body_bytes: int = 0,
        tracker: Any = None,
        cors_origins: Optional[List[str]] = None,
        dashboard: bool = False,
        openapi: Optional[Callable[[List[Route]], Dict[str, Any]]] = None,
    ) -> None:
        self.server = server
        self.router = Router(routes)
        self.max_body_bytes = int(max_body_bytes)
        self.state = State()
        self.state.dashboard_enabled = dashboard
        self.state.prometheus_enabled = False
        self._expected_auth = f"Bearer {api_token}".encode() if api_token else None
        self._dashboard = dashboard
        self._tracker = tracker
        self._openapi_builder = openapi
        self._openapi: Optional[Dict[str, Any]] = None
        if tracker is not None:
            tracker.register_counter("agl.http.total", ["path", "method", "status"], group_level=2)
            tracker.register_histogram(
                "agl.http.latency", ["path", "method", "status"], buckets=LATENCY_BUCKETS, group_level=2
            )
        self._cors: Optional[Callable[[Scope, Receive, Send], Awaitable[Any]]] = None
        if cors_origins:
            from starlette.middleware.cors import CORSMiddleware

            self._cors = CORSMiddleware(
                self._serve_for_cors,
                allow_origins=cors_origins,
                allow_methods=["*"],
                allow_headers=["*"],
                allow_credentials=True,
                expose_headers=["*"],
            )

    @property
    def routes(self) -> List[Route]:
        """The declared routes, in matching order."""
        return self.router.routes

    def openapi(self) -> Dict[str, Any]:
        """The OpenAPI document generated from the declared routes (built once)."""
        if self._openapi is None:
            if self._openapi_builder is None:
                raise RuntimeError("No OpenAPI builder configured")
            self._openapi = self._openapi_builder(self.routes)
        return self._openapi

    # -- ASGI entry ----------------------------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope (``http``; ``lifespan`` is acknowledged, nothing else is served)."""
        kind = scope["type"]
        if kind != "http":
            if kind == "lifespan":
                await _lifespan(receive, send)
            return
        debug = logger.isEnabledFor(_DEBUG)
        cors = self._cors
        if not debug and self._tracker is None and cors is None:
            await self._serve(scope, receive, send)
            return
        t0 = _perf_counter()
        label = "500"
        try:
            if cors is None:
                label = await self._serve(scope, receive, send)
            else:
                await cors(scope, receive, send)
                label = scope.get(_STATUS_KEY, label)
        except asyncio.CancelledError:
            label = "499"
            raise
        finally:
            await self._record(scope, t0, label, debug)

    async def _serve_for_cors(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[_STATUS_KEY] = await self._serve(scope, receive, send)

    async def _record(self, scope: Scope, t0: float, label: str, debug: bool) -> None:
        """Metrics (``agl.http.*``, templated path) and the debug timing line of one request."""
        tracker = self._tracker
        path = scope["path"]
        method = scope["method"]
        if tracker is not None:
            route = scope.get(_ROUTE_KEY)
            labels = {
                "path": route.path if route is not None else template_http_path(path),
                "method": method,
                "status": label,
            }
            try:
                await tracker.inc_counter("agl.http.total", 1.0, labels)
                await tracker.observe_histogram("agl.http.latency", _perf_counter() - t0, labels)
            except Exception:  # noqa: BLE001 - metrics must never break a request
                logger.debug("Failed to record HTTP metrics", exc_info=True)
        if debug and (path.startswith("/v1/agl") or path.startswith("/v1/traces")):
            client = scope.get("client")
            logger.debug(
                '%s - "%s %s HTTP/%s" %s in %.2f ms',
                f"{client[0]}:{client[1]}" if client else "-",
                method,
                path,
                scope.get("http_version", "1.1"),
                label,
                (_perf_counter() - t0) * 1000,
            )

    # -- the pipeline --------------------------------------------------------------------------------------------------
    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> str:
        """Authenticate, check the declared length, route, parse, call the handler, answer; the metrics label."""
        method: str = scope["method"]
        path: str = scope["path"]
        authorization: Optional[bytes] = None
        content_type: Optional[bytes] = None
        content_length: Optional[bytes] = None
        for key, value in scope["headers"]:
            if key == b"content-type":
                if content_type is None:
                    content_type = value
            elif key == b"content-length":
                if content_length is None:
                    content_length = value
            elif key == b"authorization":
                if authorization is None:
                    authorization = value
        route, params, partial = self.router.match(method, path)
        expected = self._expected_auth
        if expected is not None and not self._public(route, method, path):
            provided = authorization or b""
            if not _compare_digest(provided, expected):
                body = _detail("Missing bearer token" if not provided else "Invalid bearer token")
                await _send(send, 401, body, [*_json_headers(body), (b"www-authenticate", b"Bearer")])
                return "401"
        limit = self.max_body_bytes
        if content_length is not None and limit > 0:
            try:
                declared = int(content_length)
            except ValueError:
                body = _detail("Invalid Content-Length header")
                await _send(send, 400, body, _json_headers(body))
                return "400"
            if declared > limit:
                return await self._too_large(send)
        if route is None:
            return await self._unmatched(scope, send, method, path, partial)
        scope[_ROUTE_KEY] = route
        call = Call(self, params, scope, receive)
        try:
            if route.body is not None:
                message = await receive()  # the common case inline: the whole body in one message
                if message["type"] == "http.request" and not message.get("more_body", False):
                    body = message.get("body", b"")
                    if 0 < limit < len(body):
                        raise BodyTooLarge()
                else:
                    body = await call.read_body(message)
                call.body = self._parse_body(route, body, content_type)
            if route.query_model is not None:
                call.query = _parse_query(route, scope["query_string"])
            result = await route.handler(call)
        except HTTPException as exc:
            return await self._http_exception(send, exc)
        except RequestValidationFailed as exc:
            body = validation_error_body(exc.errors)
            await _send(send, 422, body, _json_headers(body))
            return "422"
        except BodyTooLarge:
            return await self._too_large(send)
        except ClientDisconnect:
            return "499"
        except asyncio.CancelledError:
            # uvicorn cancels requests still running when its graceful-shutdown timeout ends: answer them (uvicorn
            # adds ``connection: close``) with one log line instead of a traceback.
            logger.warning("Cancelled %s %s before its response was complete (server shutdown)", method, path)
            await _send(send, 500, b"Internal Server Error", [_TEXT, (b"content-length", b"21")])
            return "499"
        except Exception as exc:
            return await self._error(send, route, method, path, exc)
        finally:
            if call._watch is not None:
                call.close()
        kind = type(result)
        if kind is bytes:
            await send(
                {
                    "type": "http.response.start",
                    "status": route.status,
                    "headers": [_JSON, (b"content-length", b"%d" % len(result))],
                }
            )
            await send({"type": "http.response.body", "body": result})
            return route.status_label
        if kind is tuple:  # (status, body, headers)
            await _send(send, result[0], result[1], result[2])
            return str(result[0])
        return await self._run_asgi(result, scope, receive, send, route, method, path)

    def _public(self, route: Optional[Route], method: str, path: str) -> bool:
        """Served without a token: public routes (health) and, with the dashboard, its files."""
        if route is not None and route.public:
            return True
        if path == _HEALTH_PATH:
            return True
        if self._dashboard and method in ("GET", "HEAD"):
            return not path.startswith("/v1") and path not in _UNAUTHENTICATED_DOCS
        return False

    @staticmethod
    def _parse_body(route: Route, body: bytes, content_type: Optional[bytes]) -> Any:
        """Validate the body into the route's body type (FastAPI's rules and error shapes)."""
        if not body:
            if route.body_required:
                raise RequestValidationFailed(
                    [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
                )
            return None
        if content_type == b"application/json":
            try:
                return route.body_validator(body)  # type: ignore[misc]
            except ValidationError:
                pass  # re-validated below from the parsed JSON, for FastAPI's exact error details
        value: Any = body
        if _is_json_content_type(content_type):
            try:
                value = json.loads(body)
            except json.JSONDecodeError as exc:
                raise RequestValidationFailed(
                    [
                        {
                            "type": "json_invalid",
                            "loc": ("body", exc.pos),
                            "msg": "JSON decode error",
                            "input": {},
                            "ctx": {"error": exc.msg},
                        }
                    ]
                ) from None
            except (ValueError, RecursionError):
                raise HTTPException(400, "There was an error parsing the body") from None
        if value is None and not route.body_required:
            return None
        try:
            return route.body_adapter.validate_python(value, from_attributes=True)  # type: ignore[union-attr]
        except ValidationError as exc:
            raise RequestValidationFailed(_prefixed(exc.errors(include_url=False), ("body",))) from None

    async def _too_large(self, send: Send) -> str:
        body = _detail(f"Request body too large (limit {self.max_body_bytes} bytes)")
        await _send(send, 413, body, _json_headers(body))
        return "413"

    async def _http_exception(self, send: Send, exc: HTTPException) -> str:
        headers: List[Tuple[bytes, bytes]] = []
        for key, value in (exc.headers or {}).items():
            headers.append((key.lower().encode("latin-1"), value.encode("latin-1")))
        if exc.status_code in (204, 304):
            await _send(send, exc.status_code, b"", headers)
        else:
            body = _detail(exc.detail)
            await _send(send, exc.status_code, body, _json_headers(body) + headers)
        return str(exc.status_code)

    async def _error(self, send: Send, route: Route, method: str, path: str, exc: Exception) -> str:
        """Answer an unexpected exception: the error mapping on API routes, a plain-text 500 elsewhere."""
        if not route.maps_errors:
            logger.error("Error while handling %s %s", method, path, exc_info=exc)
            await _send(send, 500, b"Internal Server Error", [_TEXT, (b"content-length", b"21")])
            return type(exc).__name__
        status, payload = error_payload(exc)
        if status >= 500:
            logger.error("Error while handling %s %s", method, path, exc_info=exc)
        else:
            logger.info("Rejected %s %s: %s: %s", method, path, type(exc).__name__, exc)
        body = dump_json(payload)
        await _send(send, status, body, _json_headers(body))
        return type(exc).__name__

    async def _run_asgi(
        self, app: Any, scope: Scope, receive: Receive, send: Send, route: Route, method: str, path: str
    ) -> str:
        """Let an ASGI app returned by a handler answer; the status it sent (errors before that are mapped)."""
        state = [0]

        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state[0] = message["status"]
            await send(message)

        try:
            await app(scope, receive, tracking_send)
        except HTTPException as exc:
            if state[0]:
                raise
            return await self._http_exception(send, exc)
        except Exception as exc:
            if state[0]:
                logger.error("Error while handling %s %s", method, path, exc_info=exc)
                return type(exc).__name__
            return await self._error(send, route, method, path, exc)
        return str(state[0] or 500)

    async def _unmatched(self, scope: Scope, send: Send, method: str, path: str, partial: Optional[Route]) -> str:
        """No route serves the request: 405 when a path matched, a 307 to the other trailing-slash form, or 404."""
        if partial is not None:
            allowed = ", ".join(sorted(partial.methods or ()))
            body = _detail("Method Not Allowed")
            await _send(send, 405, body, _json_headers(body) + [(b"allow", allowed.encode("latin-1"))])
            return "405"
        if path != "/":
            other = path[:-1] if path.endswith("/") else path + "/"
            if self.router.matches_any(other):
                from starlette.datastructures import URL

                url = URL(scope={**scope, "path": other, "raw_path": other.encode()})
                headers = [(b"location", str(url).encode("latin-1")), (b"content-length", b"0")]
                await _send(send, 307, b"", headers)
                return "307"
        body = _detail("Not Found")
        await _send(send, 404, body, _json_headers(body))
        return "404"


def _parse_query(route: Route, query_string: bytes) -> Any:
    """Validate the query string into the route's query model (FastAPI's rules: repeated keys for list parameters,
    the last value otherwise; errors with ``loc`` ``("query", name, ...)``)."""
    values: Dict[str, Any] = {}
    if query_string:
        lists = route.query_lists
        fields = route.query_model.model_fields  # type: ignore[union-attr]
        for key, value in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
            if key not in fields:
                continue
            if key in lists:
                values.setdefault(key, []).append(value)
            else:
                values[key] = value
    try:
        return route.query_model.model_validate(values)  # type: ignore[union-attr]
    except ValidationError as exc:
        raise RequestValidationFailed(_prefixed(exc.errors(include_url=False), ("query",))) from None


async def _lifespan(receive: Receive, send: Send) -> None:
    """Acknowledge ASGI lifespan events (the server needs no start-up or shut-down work)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
