"""Assembly of the store server's ASGI app: every route of the server, declared in its module, in matching order.

Order (the first route whose path and method match serves a request): the OpenAPI document and Swagger UI, the REST
API (:mod:`.routes`), the export routes (:mod:`.export`), OTLP (:mod:`.otlp`), Prometheus (with a tracker that
supports it), the dashboard (:mod:`.dashboard`, last: its fallback answers any other ``GET``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, List

from ..wire import API_V1_AGL_PREFIX
from .dashboard import DASHBOARD_DIR, dashboard_available, dashboard_routes
from .export import export_routes
from .openapi import build_openapi, docs_routes
from .otlp import otlp_routes
from .pipeline import Call, StoreApp
from .routes import api_routes
from .routing import Route

__all__ = ["build_app"]

logger = logging.getLogger("rollouthub.store.server")


def _prometheus_routes(path: str, registry: Any) -> List[Route]:
    """``<path>`` and ``<path>/...`` served by ``prometheus_client``'s ASGI app (no redirect without the slash)."""
    from prometheus_client import make_asgi_app

    metrics_app = make_asgi_app(registry=registry)

    async def prometheus(call: Call) -> Any:
        return metrics_app

    async def prometheus_mount(call: Call) -> Any:
        async def serve(scope: Any, receive: Any, send: Any) -> None:
            await metrics_app({**scope, "root_path": scope.get("root_path", "") + path}, receive, send)

        return serve

    return [
        Route(["GET", "HEAD"], path, prometheus, maps_errors=False, include_in_schema=False),
        Route(None, path, prometheus_mount, prefix=True, maps_errors=False, include_in_schema=False),
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
