"""The store server's middleware: pure ASGI classes, one job each (their order is set in :mod:`.app`).

* :class:`MetricsMiddleware` -- ``agl.http.total`` / ``agl.http.latency`` and the debug timing line;
* :class:`ErrorMiddleware` -- every failure answered once: ``HTTPException`` → its status with ``{"detail": ...}``,
  invalid input → 422 (FastAPI's shape), a body over the limit → 413, store errors of API routes →
  :func:`~rollouthub.store.server.errors.error_payload`, anything else a plain-text 500;
* :class:`BearerAuthMiddleware` -- the bearer token (401);
* :class:`BodyLimitMiddleware` -- the declared ``Content-Length`` and the bytes actually received against the limit.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from typing import Any, Collection, List, Optional, Tuple

from pydantic_core import PydanticSerializationError
from pydantic_core import to_json as _to_json
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ..utils import LATENCY_BUCKETS
from .endpoint import ROUTE_KEY, Message, Receive, RequestValidationFailed, Scope, Send, header_value
from .errors import error_payload, template_http_path, validation_error_body

__all__ = [
    "BearerAuthMiddleware",
    "BodyLimitMiddleware",
    "BodyTooLarge",
    "ErrorMiddleware",
    "MetricsMiddleware",
    "dump_json",
]

logger = logging.getLogger("rollouthub.store.server")

ASGIApp = Any
LABEL_KEY = "rollouthub.status"
"""Scope key of the metrics' status label when it is not the status sent (an exception's name, ``499``)."""

_JSON = (b"content-type", b"application/json")
_TEXT = (b"content-type", b"text/plain; charset=utf-8")
_DOCS_PATHS = ("/openapi.json", "/docs", "/redoc")


class BodyTooLarge(Exception):
    """The request body exceeds the server's limit of ``limit`` bytes (answered with 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request body too large (limit {limit} bytes)")
        self.limit = limit


def dump_json(payload: Any) -> bytes:
    """Compact UTF-8 JSON of an error payload (ASCII escapes when it holds text UTF-8 cannot encode)."""
    try:
        return _to_json(payload)
    except PydanticSerializationError:
        return json.dumps(payload, separators=(",", ":"), default=str).encode()


async def _send(send: Send, status: int, body: bytes, headers: List[Tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_json(send: Send, status: int, body: bytes, extra: Optional[List[Tuple[bytes, bytes]]] = None) -> None:
    await _send(send, status, body, [_JSON, (b"content-length", b"%d" % len(body)), *(extra or ())])


class ErrorMiddleware:
    """Answer whatever the app inside raises before its response started (see the module docstring); the metrics'
    status label of an unexpected exception is its class name, of a client gone ``499``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``scope``, mapping its failures."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except HTTPException as exc:
            if started:
                raise
            await self._http_exception(send, exc)
        except RequestValidationFailed as exc:
            if started:
                raise
            await _send_json(send, 422, validation_error_body(exc.errors))
        except BodyTooLarge as exc:
            if started:
                raise
            await _send_json(send, 413, dump_json({"detail": str(exc)}))
        except ClientDisconnect:
            scope[LABEL_KEY] = "499"
        except asyncio.CancelledError:
            if started:
                raise
            # uvicorn cancels requests still running when its graceful-shutdown timeout ends: answer them (uvicorn
            # adds ``connection: close``) with one log line instead of a traceback.
            logger.warning("Cancelled %s %s before its response was complete (server shutdown)", *_request(scope))
            await _send(send, 500, b"Internal Server Error", [_TEXT, (b"content-length", b"21")])
            scope[LABEL_KEY] = "499"
        except Exception as exc:
            scope[LABEL_KEY] = type(exc).__name__
            if started:
                logger.error("Error while handling %s %s", *_request(scope), exc_info=exc)
                return
            await self._error(scope, send, exc)

    @staticmethod
    async def _http_exception(send: Send, exc: HTTPException) -> None:
        headers = [
            (key.lower().encode("latin-1"), value.encode("latin-1")) for key, value in (exc.headers or {}).items()
        ]
        if exc.status_code in (204, 304):
            await _send(send, exc.status_code, b"", headers)
        else:
            await _send_json(send, exc.status_code, dump_json({"detail": exc.detail}), headers)

    @staticmethod
    async def _error(scope: Scope, send: Send, exc: Exception) -> None:
        """The error mapping on API routes, a plain-text 500 elsewhere."""
        route = scope.get(ROUTE_KEY)
        if route is None or not route.maps_errors:
            logger.error("Error while handling %s %s", *_request(scope), exc_info=exc)
            await _send(send, 500, b"Internal Server Error", [_TEXT, (b"content-length", b"21")])
            return
        status, payload = error_payload(exc)
        if status >= 500:
            logger.error("Error while handling %s %s", *_request(scope), exc_info=exc)
        else:
            logger.info("Rejected %s %s: %s: %s", *_request(scope), type(exc).__name__, exc)
        await _send_json(send, status, dump_json(payload))


def _request(scope: Scope) -> Tuple[str, str]:
    return scope["method"], scope["path"]


class BearerAuthMiddleware:
    """Require ``Authorization: Bearer <token>`` (401 ``Missing``/``Invalid bearer token`` otherwise), except on the
    public paths (the health check) and, with the dashboard, on its files (``GET``/``HEAD`` outside ``/v1`` and the
    API docs)."""

    def __init__(self, app: ASGIApp, token: str, public_paths: Collection[str], dashboard: bool) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._public_paths = frozenset(public_paths)
        self._dashboard = dashboard

    def _public(self, scope: Scope) -> bool:
        path: str = scope["path"]
        if path in self._public_paths:
            return True
        if self._dashboard and scope["method"] in ("GET", "HEAD"):
            return not path.startswith("/v1") and path not in _DOCS_PATHS
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the token, then serve."""
        if scope["type"] == "http" and not self._public(scope):
            provided = header_value(scope, b"authorization") or b""
            if not hmac.compare_digest(provided, self._expected):
                detail = "Missing bearer token" if not provided else "Invalid bearer token"
                raise HTTPException(401, detail, headers={"www-authenticate": "Bearer"})
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Reject bodies over ``limit`` bytes: a larger declared ``Content-Length`` before anything is read (an invalid one
    is a 400), and a body growing past the limit while it is read (:class:`BodyTooLarge`, answered with 413)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the declared length, then serve with a ``receive`` that counts the body's bytes."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit
        declared = header_value(scope, b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                raise HTTPException(400, "Invalid Content-Length header") from None
            if length > limit:
                raise BodyTooLarge(limit)
            # The HTTP server delivers exactly the declared number of bytes: nothing more to count.
            await self.app(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            body = message.get("body")
            if body:
                received += len(body)
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, limited_receive, send)


class MetricsMiddleware:
    """Record ``agl.http.total`` / ``agl.http.latency`` (path template, method, status label) with a tracker, and log
    one timing line per ``/v1/agl`` and ``/v1/traces`` request at DEBUG; nothing when neither applies."""

    def __init__(self, app: ASGIApp, tracker: Any) -> None:
        self.app = app
        self._tracker = tracker
        if tracker is not None:
            tracker.register_counter("agl.http.total", ["path", "method", "status"], group_level=2)
            tracker.register_histogram(
                "agl.http.latency", ["path", "method", "status"], buckets=LATENCY_BUCKETS, group_level=2
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``scope``, timing it."""
        debug = logger.isEnabledFor(logging.DEBUG)
        if scope["type"] != "http" or (self._tracker is None and not debug):
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 0
        cancelled = False

        async def status_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, status_send)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            label = "499" if cancelled else scope.get(LABEL_KEY) or str(status or 500)
            await self._record(scope, t0, label, debug)

    async def _record(self, scope: Scope, t0: float, label: str, debug: bool) -> None:
        tracker = self._tracker
        path = scope["path"]
        method = scope["method"]
        if tracker is not None:
            route = scope.get(ROUTE_KEY)
            labels = {
                "path": route.path if route is not None else template_http_path(path),
                "method": method,
                "status": label,
            }
            try:
                await tracker.inc_counter("agl.http.total", 1.0, labels)
                await tracker.observe_histogram("agl.http.latency", time.perf_counter() - t0, labels)
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
                (time.perf_counter() - t0) * 1000,
            )
