"""The dashboard's routes: the built single-page app (``index.html``, ``/assets/*``) and its client-side routes.

With the bundle installed, ``GET /`` and the dashboard's client-side routes (:data:`DASHBOARD_ROUTES`, each also with a
trailing slash or a sub-path) answer ``index.html``, files of the bundle are served as files (``/assets/*`` with an
immutable cache header; the files at the bundle's root, such as ``/favicon.ico``, cached for a day) and every other
path answers 404 JSON, so probes and scrapers never mistake the dashboard for what they look for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List

from .endpoint import Call, Message, Receive, Scope, Send
from .routing import Route

__all__ = ["DASHBOARD_DIR", "DASHBOARD_ROUTES", "dashboard_available", "dashboard_routes"]

DASHBOARD_DIR = Path(__file__).resolve().parent.parent.parent / "dashboard"
"""Package directory holding the built dashboard (``index.html`` and ``assets/``)."""

DASHBOARD_ROUTES = frozenset({"rollouts", "resources", "traces", "runners", "settings"})
"""Client-side routes of the dashboard (``dashboard/src/App.tsx``): ``/``, ``/<route>`` and ``/<route>/<anything>``
answer ``index.html`` (the SPA fallback). Every other path that is neither an API route nor a file of the bundle --
``/health``, ``/metrics``, ``/v1/...``, ``/favicon.ico`` when the bundle has none -- answers 404 JSON."""

_IMMUTABLE = (b"cache-control", b"public, max-age=31536000, immutable")
_ONE_DAY = "public, max-age=86400"
"""Cache lifetime of the bundle's files that keep their name across builds (the favicon): browsers ask again daily."""


def dashboard_available(directory: Path) -> bool:
    """Whether ``directory`` holds a built dashboard."""
    return (directory / "index.html").is_file()


def dashboard_routes(directory: Path) -> List[Route]:
    """The routes serving the dashboard bundle in ``directory`` (served without a token: they hold no data)."""
    from starlette.responses import FileResponse, JSONResponse
    from starlette.staticfiles import StaticFiles

    index = directory / "index.html"
    root = directory.resolve()
    routes: List[Route] = []
    assets = directory / "assets"
    if assets.is_dir():
        static = StaticFiles(directory=str(assets))

        async def dashboard_assets(call: Call) -> Any:
            async def serve(scope: Scope, receive: Receive, send: Send) -> None:
                async def add_cache(message: Message) -> None:
                    if message["type"] == "http.response.start" and message.get("status") == 200:
                        headers = list(message.get("headers", []))
                        if not any(k.lower() == b"cache-control" for k, _ in headers):
                            headers.append(_IMMUTABLE)
                        message["headers"] = headers
                    await send(message)

                await static(scope, receive, add_cache)  # the mount set the scope's root_path to /assets

            return serve

        routes.append(Route(None, "/assets", dashboard_assets, prefix=True, maps_errors=False, include_in_schema=False))

    async def dashboard_index(call: Call) -> Any:
        return FileResponse(index)

    async def dashboard_fallback(call: Call) -> Any:
        (full_path,) = call.params
        if full_path.split("/", 1)[0] in DASHBOARD_ROUTES:
            return FileResponse(index)
        candidate = (directory / full_path).resolve()
        if candidate == index.resolve():
            return FileResponse(index)  # never cached: it names the current build's assets
        if candidate.is_file() and root in candidate.parents:
            return FileResponse(candidate, headers={"cache-control": _ONE_DAY})
        return JSONResponse({"detail": "Not Found"}, status_code=404)

    routes.append(Route(["GET"], "/", dashboard_index, maps_errors=False, include_in_schema=False))
    routes.append(Route(["GET"], "/{full_path:path}", dashboard_fallback, maps_errors=False, include_in_schema=False))
    return routes
