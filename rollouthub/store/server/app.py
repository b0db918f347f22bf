"""Assembly of the store server's ASGI app: the declared routes on Starlette's router, behind the middleware.

Routes, in matching order (the first route whose path and method match serves a request): the OpenAPI document and
Swagger UI, the REST API (:mod:`.routes`), the export routes (:mod:`.export`), OTLP (:mod:`.otlp`), Prometheus (with
a tracker that supports it), the dashboard (:mod:`.dashboard`, last: its fallback answers any other ``GET``).

A request goes through, outermost first: :class:`~.middleware.MetricsMiddleware` → Starlette's ``CORSMiddleware``
(only with configured origins) → :class:`~.middleware.ErrorMiddleware` → :class:`~.middleware.BearerAuthMiddleware`
(only with a token) → :class:`~.middleware.BodyLimitMiddleware` (only with a limit) → Starlette's ``Router`` (404,
405, the 307 trailing-slash redirect; asked through :class:`~.routing.RouteIndex`) → the route's
:class:`~.endpoint.Endpoint`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from starlette.datastructures import State
from starlette.routing import Router

from ..wire import API_V1_AGL_PREFIX
from .dashboard import DASHBOARD_DIR, dashboard_available, dashboard_routes
from .endpoint import Call, Endpoint, Receive, Scope, Send
from .export import export_routes
from .middleware import BearerAuthMiddleware, BodyLimitMiddleware, ErrorMiddleware, MetricsMiddleware
from .openapi import build_openapi, docs_routes
from .otlp import otlp_routes
from .routes import api_routes
from .routing import Route, RouteIndex, starlette_routes

__all__ = ["StoreApp", "build_app"]

logger = logging.getLogger("rollouthub.store.server")


class StoreApp:
    """The ASGI app of a store server: the declared routes on Starlette's ``Router`` behind the middleware (the order
    is in the module docstring). Handlers reach it as ``call.app`` (``server``, ``state``, ``max_body_bytes``,
    :meth:`openapi`).

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
        self.routes: List[Route] = list(routes)
        self.max_body_bytes = int(max_body_bytes)
        self.state = State()
        self.state.dashboard_enabled = dashboard
        self.state.prometheus_enabled = False
        self.router = Router(starlette_routes(self.routes, Endpoint))
        self._openapi_builder = openapi
        self._openapi: Optional[Dict[str, Any]] = None
        app: Any = RouteIndex(self.router)
        if self.max_body_bytes > 0:
            app = BodyLimitMiddleware(app, self.max_body_bytes)
        if api_token:
            app = BearerAuthMiddleware(app, api_token, [r.path for r in self.routes if r.public], dashboard)
        app = ErrorMiddleware(app)
        if cors_origins:
            from starlette.middleware.cors import CORSMiddleware

            app = CORSMiddleware(
                app,
                allow_origins=cors_origins,
                allow_methods=["*"],
                allow_headers=["*"],
                allow_credentials=True,
                expose_headers=["*"],
            )
        self._stack = MetricsMiddleware(app, tracker)

    def openapi(self) -> Dict[str, Any]:
        """The OpenAPI document generated from the declared routes (built once)."""
        if self._openapi is None:
            if self._openapi_builder is None:
                raise RuntimeError("No OpenAPI builder configured")
            self._openapi = self._openapi_builder(self.routes)
        return self._openapi

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI scope (``scope["app"]`` is this app: Starlette's router then raises its 404/405 as
        ``HTTPException`` for the error middleware)."""
        scope["app"] = self
        await self._stack(scope, receive, send)


def _prometheus_routes(path: str, registry: Any) -> List[Route]:
    """``<path>`` and ``<path>/...`` (a mount) served by ``prometheus_client``'s ASGI app (no redirect without the
    slash)."""
    from prometheus_client import make_asgi_app

    metrics_app = make_asgi_app(registry=registry)

    async def prometheus(call: Call) -> Any:
        return metrics_app

    return [
        Route(["GET", "HEAD"], path, prometheus, maps_errors=False, include_in_schema=False),
        Route(None, path, prometheus, prefix=True, maps_errors=False, include_in_schema=False),
    ]


def build_app(server: Any) -> StoreApp:
    """The ASGI app of a ``LightningStoreServer`` (its settings: token, body limit, tracker, CORS, dashboard)."""
    routes: List[Route] = [*docs_routes(), *api_routes(API_V1_AGL_PREFIX), *export_routes(API_V1_AGL_PREFIX)]
    routes.extend(otlp_routes())
    tracker = server._tracker
    prometheus = False
    if tracker is not None and tracker.has_prometheus():
        from rollouthub.utils.metrics import get_prometheus_registry

        try:
            routes.extend(_prometheus_routes("/v1/prometheus", get_prometheus_registry()))
            prometheus = True
        except ImportError as exc:  # MissingExtraError: one line naming the extra
            logger.error("%s; /v1/prometheus is not available", exc)
    directory = Path(server._dashboard_dir) if server._dashboard_dir else DASHBOARD_DIR
    dashboard = dashboard_available(directory)
    if dashboard:
        routes.extend(dashboard_routes(directory))
    else:
        logger.error("Dashboard build not found in %s; the dashboard is not served.", directory)
    app = StoreApp(
        server,
        routes,
        api_token=server._api_token,
        max_body_bytes=server._max_body_bytes,
        tracker=tracker,
        cors_origins=server._cors_allow_origins,
        dashboard=dashboard,
        openapi=build_openapi,
    )
    app.state.prometheus_enabled = prometheus
    return app
