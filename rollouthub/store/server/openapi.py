"""The OpenAPI document of the store server, generated from the route declarations, and the routes serving it.

Each declared :class:`~rollouthub.store.server.routing.Route` is described to FastAPI's OpenAPI generator
(``fastapi.openapi.utils.get_openapi``) as the path operation it is: path parameters, query parameters, request body
and response model come from the declaration, the operation name and description from its handler. FastAPI only
*describes* the routes; it never serves a request. ``GET /openapi.json`` and ``GET /docs`` (Swagger UI) serve the
document.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any, Dict, List

from pydantic import BaseModel

from .pipeline import Call
from .routing import Route

__all__ = ["TITLE", "VERSION", "build_openapi", "docs_routes"]

TITLE = "LightningStore Server"
VERSION = "0.1.0"


def _is_model(annotation: Any) -> bool:
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    return all(isinstance(a, type) and issubclass(a, BaseModel) for a in args)


def _describe(route: Route) -> Any:
    """A FastAPI ``APIRoute`` with the declaration's signature (its endpoint is never called)."""
    from fastapi import Body, Query
    from fastapi.routing import APIRoute

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter(name, keyword, annotation=str) for name in route.param_names]
    for name, query in (route.query or {}).items():
        default = Query(... if query.required else query.default, description=query.description)
        parameters.append(inspect.Parameter(name, keyword, annotation=query.annotation, default=default))
    if route.body is not None:
        annotation = route.body if _is_model(route.body) else typing.Annotated[route.body, Body()]
        default = inspect.Parameter.empty if route.body_required else None
        parameters.append(inspect.Parameter(route.body_name, keyword, annotation=annotation, default=default))

    async def endpoint(**kwargs: Any) -> None:  # pragma: no cover - documentation only
        raise RuntimeError("documentation stub")

    endpoint.__name__ = route.name
    endpoint.__doc__ = route.handler.__doc__
    endpoint.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return APIRoute(
        route.path,
        endpoint,
        methods=sorted(route.methods or ()),
        name=route.name,
        response_model=route.response_model,
        status_code=route.status,
        **route.doc,
    )


def build_openapi(routes: List[Route]) -> Dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` (those with ``include_in_schema``)."""
    from fastapi.openapi.utils import get_openapi

    described = [_describe(route) for route in routes if route.include_in_schema]
    return get_openapi(title=TITLE, version=VERSION, routes=described)


def docs_routes() -> List[Route]:
    """``GET /openapi.json``, ``GET /docs`` (Swagger UI) and its OAuth2 redirect page."""
    from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
    from starlette.responses import JSONResponse

    async def openapi(call: Call) -> Any:
        return JSONResponse(call.app.openapi())

    async def swagger_ui_html(call: Call) -> Any:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title=f"{TITLE} - Swagger UI", oauth2_redirect_url="/docs/oauth2-redirect"
        )

    async def swagger_ui_redirect(call: Call) -> Any:
        return get_swagger_ui_oauth2_redirect_html()

    get_head = ["GET", "HEAD"]
    return [
        Route(get_head, "/openapi.json", openapi, maps_errors=False, include_in_schema=False),
        Route(get_head, "/docs", swagger_ui_html, maps_errors=False, include_in_schema=False),
        Route(get_head, "/docs/oauth2-redirect", swagger_ui_redirect, maps_errors=False, include_in_schema=False),
    ]
