"""ASGI application of :class:`~rollouthub.store.client_server.LightningStoreServer`: middleware, OTLP, Prometheus,
dashboard. The REST routes of store.md 11.6 are in :mod:`rollouthub.store.server_routes`; the hot routes are served
in front of this app by :class:`rollouthub.store.server_fastpath.FrontDoor` (the ASGI callable given to uvicorn).

Middleware, outermost first at request time (store.md 11.3 plus hardening):

1. timing log + application-error mapping (``/v1/agl*``, :func:`error_payload`: input errors → 400, evicted spans →
   410, an unavailable database → 503, other exceptions → 500 with ``{"detail", "error_type", "traceback"}``);
2. HTTP metrics (only with a tracker; ``agl.http.total`` / ``agl.http.latency``);
3. CORS (only with configured origins);
4. bearer-token authentication (only with a token; everything except ``GET /v1/agl/health`` and dashboard files);
5. request-body size limit (413).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, MutableMapping, Optional, Sequence

import pydantic
import pydantic_core
from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from rollouthub.utils.otlp import handle_otlp_export

from .base import SpansEvictedError
from .domains import InputDomainError
from .errors import is_data_error, is_retryable_error
from .utils import LATENCY_BUCKETS

if TYPE_CHECKING:
    from .client_server import LightningStoreServer

__all__ = ["build_app", "error_payload", "template_http_path", "DASHBOARD_DIR", "DASHBOARD_ROUTES"]

logger = logging.getLogger("rollouthub.store.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DASHBOARD_DIR = Path(__file__).resolve().parent.parent / "dashboard"
"""Package directory holding the built dashboard (``index.html`` and ``assets/``)."""

DASHBOARD_ROUTES = frozenset({"rollouts", "resources", "traces", "runners", "settings"})
"""Client-side routes of the dashboard (``dashboard/src/App.tsx``): ``/``, ``/<route>`` and ``/<route>/<anything>``
answer ``index.html`` (the SPA fallback). Every other path that is neither an API route nor a file of the bundle --
``/health``, ``/metrics``, ``/v1/...``, ``/favicon.ico`` when the bundle has none -- answers 404 JSON, so probes and
scrapers never mistake the dashboard for what they look for."""

_AGL_PREFIX = "/v1/agl"
_HEALTH_PATH = "/v1/agl/health"


async def _send_json(send: Send, status: int, payload: Any, headers: Optional[Dict[str, str]] = None) -> None:
    body = pydantic_core.to_json(payload)
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    for key, value in (headers or {}).items():
        raw_headers.append((key.lower().encode(), value.encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------------------------------------------------------------
# Path templating for metrics (store.md 14.2)
# ---------------------------------------------------------------------------------------------------------------------

_RE_ATTEMPT = re.compile(r"/attempts/[^/]+$")
_RE_ROLLOUT = re.compile(r"/rollouts/[^/]+")
_RE_RESOURCES = re.compile(r"/resources/[^/]+$")
_RE_WORKERS = re.compile(r"/workers/[^/]+$")


def template_http_path(path: str) -> str:
    """Replace ids in a request path by placeholders so that metric label cardinality stays bounded."""
    if "/rollouts/" in path:
        if path.endswith("/attempts/latest"):
            return _RE_ROLLOUT.sub("/rollouts/{rollout_id}", path, count=1)
        if path.endswith("/attempts/search"):
            return _RE_ROLLOUT.sub("/rollouts/{rollout_id}", path, count=1)
    if path.endswith("/resources/latest") or path.endswith("/search") or "enqueue" in path or "dequeue" in path:
        return path
    path = _RE_ATTEMPT.sub("/attempts/{attempt_id}", path)
    path = _RE_ROLLOUT.sub("/rollouts/{rollout_id}", path)
    path = _RE_RESOURCES.sub("/resources/{resources_id}", path)
    return _RE_WORKERS.sub("/workers/{worker_id}", path)


# ---------------------------------------------------------------------------------------------------------------------
# Middleware (pure ASGI for speed)
# ---------------------------------------------------------------------------------------------------------------------


def validation_error_body(errors: Sequence[Any]) -> bytes:
    """The JSON body of a 422 (FastAPI's ``{"detail": [{"type", "loc", "msg", "input", ...}]}``).

    The errors echo the offending input; when that cannot be rendered as JSON -- ``NaN``/``Infinity`` values, or
    nesting too deep to encode -- it is left out (``type``, ``loc`` and ``msg`` still name the field) instead of
    failing the response."""
    try:
        return json.dumps({"detail": jsonable_encoder(errors)}, allow_nan=False).encode()
    except (ValueError, TypeError, RecursionError):
        slim = [{key: error[key] for key in ("type", "loc", "msg") if key in error} for error in errors]
        return json.dumps({"detail": slim}, default=str).encode()


def error_payload(exc: BaseException) -> tuple[int, Dict[str, Any]]:
    """Map an exception escaping a ``/v1/agl`` handler to a status code and JSON body (the table in docs/server.md).

    * :class:`~rollouthub.store.domains.InputDomainError` → 400 ``{"detail", "error_type", "field"}``;
    * ``pydantic.ValidationError`` → 400 with its text; ``ValueError``/``TypeError``/``OverflowError`` → 400 with the
      message (or the class name);
    * :class:`~rollouthub.store.base.SpansEvictedError` → 410 Gone;
    * a database "data exception" (SQLSTATE class 22, a value the database cannot hold) → 400;
    * a database that is unreachable, overloaded or kept conflicting (``errors.is_retryable_error``) → 503;
    * anything else → 500 with ``{"detail", "error_type", "traceback"}`` (the reference shape).
    """
    name = type(exc).__name__
    if isinstance(exc, InputDomainError):
        return 400, {"detail": str(exc), "error_type": name, "field": exc.field}
    if isinstance(exc, pydantic.ValidationError):
        return 400, {"detail": str(exc), "error_type": name}
    if isinstance(exc, (ValueError, TypeError, OverflowError)):
        return 400, {"detail": str(exc) or name, "error_type": name}
    if isinstance(exc, SpansEvictedError):
        return 410, {"detail": str(exc), "error_type": name}
    if is_data_error(exc):
        return 400, {"detail": f"The database rejected a value of the request: {exc}", "error_type": name}
    if is_retryable_error(exc):
        return 503, {"detail": f"The store is temporarily unavailable, retry later: {exc}", "error_type": name}
    return 500, {
        "detail": "Internal server error",
        "error_type": name,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }


class ErrorMappingMiddleware:
    """Outermost middleware: debug timing log and mapping of application errors under ``/v1/agl``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        debug = logger.isEnabledFor(logging.DEBUG) and (path.startswith(_AGL_PREFIX) or path.startswith("/v1/traces"))
        t0 = time.perf_counter() if debug else 0.0
        state = [False, 500]

        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state[0] = True
                state[1] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if state[0] or not path.startswith(_AGL_PREFIX):
                raise
            status, payload = error_payload(exc)
            if status >= 500:
                logger.error("Error while handling %s %s", scope.get("method"), path, exc_info=exc)
            else:
                logger.info("Rejected %s %s: %s: %s", scope.get("method"), path, type(exc).__name__, exc)
            state[1] = status
            await _send_json(send, status, payload)
        finally:
            if debug:
                client = scope.get("client")
                who = f"{client[0]}:{client[1]}" if client else "-"
                logger.debug(
                    '%s - "%s %s HTTP/%s" %s in %.2f ms',
                    who,
                    scope.get("method"),
                    path,
                    scope.get("http_version", "1.1"),
                    state[1],
                    (time.perf_counter() - t0) * 1000,
                )


class MetricsMiddleware:
    """Record ``agl.http.total`` and ``agl.http.latency`` per request (templated path, method, status)."""

    def __init__(self, app: ASGIApp, tracker: Any) -> None:
        self.app = app
        self.tracker = tracker
        tracker.register_counter("agl.http.total", ["path", "method", "status"], group_level=2)
        tracker.register_histogram(
            "agl.http.latency", ["path", "method", "status"], buckets=LATENCY_BUCKETS, group_level=2
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = ["500"]

        async def status_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = str(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, status_send)
        except asyncio.CancelledError:
            status[0] = "499"
            raise
        except Exception as exc:
            status[0] = type(exc).__name__
            raise
        finally:
            labels = {"path": template_http_path(scope["path"]), "method": scope.get("method", ""), "status": status[0]}
            try:
                await self.tracker.inc_counter("agl.http.total", 1.0, labels)
                await self.tracker.observe_histogram("agl.http.latency", time.perf_counter() - t0, labels)
            except Exception:  # noqa: BLE001 - metrics must never break a request
                logger.debug("Failed to record HTTP metrics", exc_info=True)


class BearerAuthMiddleware:
    """Require ``Authorization: Bearer <token>`` on every route except the health check and dashboard files."""

    def __init__(self, app: ASGIApp, token: str, dashboard_enabled: bool) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()
        self.dashboard_enabled = dashboard_enabled

    def _exempt(self, scope: Scope) -> bool:
        path: str = scope["path"]
        if path == _HEALTH_PATH:
            return True
        if self.dashboard_enabled and scope.get("method") in ("GET", "HEAD"):
            return not path.startswith("/v1") and path not in ("/openapi.json", "/docs", "/redoc")
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._exempt(scope):
            await self.app(scope, receive, send)
            return
        provided = b""
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                provided = value
                break
        if not hmac.compare_digest(provided, self.expected):
            detail = "Missing bearer token" if not provided else "Invalid bearer token"
            await _send_json(send, 401, {"detail": detail}, {"www-authenticate": "Bearer"})
            return
        await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Reject request bodies larger than ``max_bytes`` with 413 (declared ``Content-Length`` and streamed bytes)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.max_bytes <= 0:
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for key, value in scope.get("headers", ()):
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _send_json(send, 400, {"detail": "Invalid Content-Length header"})
                    return
                if declared > limit:
                    await _send_json(send, 413, {"detail": f"Request body too large (limit {limit} bytes)"})
                    return
                break
        received = [0]

        async def counting_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                received[0] += len(message.get("body", b""))
                if received[0] > limit:
                    raise HTTPException(413, f"Request body too large (limit {limit} bytes)")
            return message

        await self.app(scope, counting_receive, send)


# ---------------------------------------------------------------------------------------------------------------------
# App factory
# ---------------------------------------------------------------------------------------------------------------------


def _dashboard_available(directory: Path) -> bool:
    return (directory / "index.html").is_file()


def _mount_dashboard(app: FastAPI, directory: Path) -> None:
    from starlette.staticfiles import StaticFiles

    index = directory / "index.html"
    assets = directory / "assets"
    if assets.is_dir():
        static = StaticFiles(directory=str(assets))

        async def cached_assets(scope: Scope, receive: Receive, send: Send) -> None:
            async def add_cache(message: Message) -> None:
                if message["type"] == "http.response.start" and message.get("status") == 200:
                    headers = list(message.get("headers", []))
                    if not any(k.lower() == b"cache-control" for k, _ in headers):
                        headers.append((b"cache-control", b"public, max-age=31536000, immutable"))
                    message["headers"] = headers
                await send(message)

            await static(scope, receive, add_cache)

        app.mount("/assets", cached_assets, name="dashboard-assets")

    @app.get("/", include_in_schema=False)
    async def dashboard_index() -> FileResponse:
        return FileResponse(index)

    root = directory.resolve()

    @app.get("/{full_path:path}", include_in_schema=False)
    async def dashboard_fallback(full_path: str) -> Response:
        if full_path.split("/", 1)[0] in DASHBOARD_ROUTES:
            return FileResponse(index)
        candidate = (directory / full_path).resolve()
        if candidate.is_file() and root in candidate.parents:
            return FileResponse(candidate)
        return JSONResponse({"detail": "Not Found"}, status_code=404)


_OTLP_OPENAPI: Dict[str, Any] = {
    "parameters": [
        {
            "name": "Content-Encoding",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "enum": ["gzip", "deflate", "identity"]},
            "description": "Compression of the body; it is inflated up to the body limit (413 beyond, 415 for others).",
        }
    ],
    "requestBody": {
        "required": True,
        "content": {
            "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
            "application/json": {"schema": {"type": "object"}},
        },
        "description": "An ExportTraceServiceRequest (protobuf, or OTLP JSON with hex ids).",
    },
    "responses": {
        "400": {"description": "Undecodable body, unsupported content type, or spans the store rejects"},
        "413": {"description": "The body (after decompression) is larger than the body limit"},
        "415": {"description": "Unsupported Content-Encoding"},
    },
}
"""OpenAPI description of ``POST /v1/traces`` (the route reads its raw body itself)."""


def build_app(server: LightningStoreServer) -> FastAPI:
    """Create the FastAPI app of ``server`` (routes call ``server.<method>`` → ``server.store.<method>``)."""
    from .server_export import add_export_routes
    from .server_routes import build_router

    app = FastAPI(title="LightningStore Server", docs_url="/docs", redoc_url=None)
    # Register the routes on the app's own router (FastAPI's include_router adds per-request routing overhead).
    app.router.routes.extend(build_router(server, prefix=_AGL_PREFIX).routes)
    add_export_routes(app, server, _AGL_PREFIX)

    async def otlp_traces(request: Request) -> Response:
        return await handle_otlp_export(
            request,
            server.add_many_spans,
            server.get_many_span_sequence_ids,
            add_many_spans_assigning_ids=server.add_many_spans_assigning_ids,
            max_body_bytes=server._max_body_bytes,
        )

    app.add_api_route(
        "/v1/traces",
        otlp_traces,
        methods=["POST"],
        name="otlp_traces",
        summary="OTLP/HTTP trace export",
        openapi_extra=_OTLP_OPENAPI,
    )
    for signal in ("metrics", "logs", "development/profiles"):

        async def otlp_unsupported() -> Response:
            return Response(status_code=501)

        app.add_api_route(f"/v1/{signal}", otlp_unsupported, methods=["POST"], name=f"otlp_{signal.replace('/', '_')}")

    tracker = server._tracker
    app.state.prometheus_enabled = False
    if tracker is not None and tracker.has_prometheus():
        from rollouthub.utils.metrics import get_prometheus_registry, mount_prometheus

        try:
            mount_prometheus(app, "/v1/prometheus", get_prometheus_registry())
            app.state.prometheus_enabled = True
        except ImportError as exc:  # MissingExtraError: one line naming the extra
            logger.error("%s; /v1/prometheus is not available", exc)

    directory = Path(server._dashboard_dir) if server._dashboard_dir else DASHBOARD_DIR
    dashboard_enabled = _dashboard_available(directory)
    app.state.dashboard_enabled = dashboard_enabled
    if dashboard_enabled:
        _mount_dashboard(app, directory)
    else:
        logger.error("Dashboard build not found in %s; the dashboard is not served.", directory)

    @app.exception_handler(RequestValidationError)
    async def validation_exception_handler(request: Request, exc: RequestValidationError) -> Response:
        return Response(validation_error_body(exc.errors()), status_code=422, media_type="application/json")

    @app.exception_handler(StarletteHTTPException)
    async def http_exception_handler(request: Request, exc: StarletteHTTPException) -> Response:
        headers = getattr(exc, "headers", None)
        if exc.status_code in (204, 304):
            return Response(status_code=exc.status_code, headers=headers)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)

    # Registration order: later middleware wraps earlier ones (the last added is the outermost). The hot routes do not
    # come here: the front door (server_fastpath.FrontDoor) serves them with the same checks in the same order.
    app.add_middleware(BodyLimitMiddleware, max_bytes=server._max_body_bytes)  # type: ignore[arg-type]
    if server._api_token:
        app.add_middleware(
            BearerAuthMiddleware,  # type: ignore[arg-type]
            token=server._api_token,
            dashboard_enabled=dashboard_enabled,
        )
    origins = server._cors_allow_origins
    if origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["*"],
            allow_headers=["*"],
            allow_credentials=True,
            expose_headers=["*"],
        )
    if tracker is not None:
        app.add_middleware(MetricsMiddleware, tracker=tracker)  # type: ignore[arg-type]
    app.add_middleware(ErrorMappingMiddleware)  # type: ignore[arg-type]
    return app
