"""Route declarations of the store server, and their mounting on Starlette's router.

A :class:`Route` declares everything about one operation once: method(s), path template, handler, request body type,
query parameters, response model, success status and documentation. :func:`starlette_routes` mounts the declarations
on Starlette's ``Route``/``Mount`` (each served by an :class:`~rollouthub.store.server.endpoint.Endpoint`), so
matching, the 405 (``allow`` header) and the 307 trailing-slash redirect are Starlette's; the OpenAPI document
(:mod:`rollouthub.store.server.openapi`) is generated from the same objects. :class:`RouteIndex` spares Starlette's
router the routes that cannot match a request (Starlette tries every route in turn, ~1 µs each).
"""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any, Awaitable, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from pydantic import BaseModel, TypeAdapter, create_model
from starlette.routing import Mount, Router
from starlette.routing import Route as StarletteRoute

__all__ = ["Query", "Route", "REQUIRED", "RouteIndex", "starlette_routes"]

REQUIRED: Any = ...
"""Default of a required query parameter."""

_PARAMETER = re.compile(r"{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-zA-Z_][a-zA-Z0-9_]*)?}")


class Query:
    """A query parameter: its type (validated like FastAPI does), default (:data:`REQUIRED`) and description."""

    __slots__ = ("annotation", "default", "description")

    def __init__(self, annotation: Any, default: Any = None, description: Optional[str] = None) -> None:
        self.annotation = annotation
        self.default = default
        self.description = description

    @property
    def required(self) -> bool:
        """Whether the parameter has no default."""
        return self.default is REQUIRED


Handler = Callable[[Any], Awaitable[Any]]
"""``async (call) -> bytes | (status, body, headers) | ASGI app``: JSON bytes of the success response, a complete
response, or an ASGI app (e.g. a Starlette ``Response``) that answers the request itself."""


class Route:
    """One operation of the server, declared once.

    Args:
        methods: HTTP methods (``None``: any method, for mounts). Starlette serves ``HEAD`` wherever ``GET`` is served.
        path: Path template (``/v1/agl/rollouts/{rollout_id}``, ``/{full_path:path}``; Starlette's syntax).
        handler: ``async (call) -> ...`` (see :data:`Handler`); its ``__name__`` names the operation and its docstring
            describes it.
        body: Type of the JSON request body (a model, ``Optional[Model]``, any pydantic-validatable type) or ``None``.
        body_required: Whether an absent body is a 422 (otherwise the handler gets ``None``).
        body_name: Name of the body in the OpenAPI document (the title of non-model bodies).
        query: Query parameters, validated into one model instance (``call.query``).
        response_model: Type documented for the success response (the handler's JSON is not re-validated).
        status: Success status code of a JSON answer.
        prefix: A mount: the route serves every path below ``path`` (Starlette's ``Mount``).
        public: Served without the bearer token (the health check).
        maps_errors: Store errors are answered with the error mapping (400/410/503/500 JSON); otherwise an unexpected
            exception is a plain-text 500, as for any web app.
        include_in_schema: Whether the OpenAPI document lists the route.
        doc: Extra entries of the OpenAPI operation (``summary``, ``openapi_extra``, ``media_type`` of the response).
        name: Operation name (default: the handler's name).
    """

    __slots__ = (
        "methods",
        "path",
        "handler",
        "name",
        "body",
        "body_required",
        "body_name",
        "body_validator",
        "body_adapter",
        "query",
        "query_model",
        "query_lists",
        "response_model",
        "status",
        "prefix",
        "public",
        "maps_errors",
        "include_in_schema",
        "doc",
        "param_names",
    )

    def __init__(
        self,
        methods: Optional[Sequence[str]],
        path: str,
        handler: Handler,
        *,
        body: Any = None,
        body_required: bool = True,
        body_name: str = "request",
        query: Optional[Dict[str, Query]] = None,
        response_model: Any = None,
        status: int = 200,
        prefix: bool = False,
        public: bool = False,
        maps_errors: bool = True,
        include_in_schema: bool = True,
        doc: Optional[Dict[str, Any]] = None,
        name: Optional[str] = None,
    ) -> None:
        self.methods: Optional[FrozenSet[str]] = frozenset(m.upper() for m in methods) if methods is not None else None
        self.path = path
        self.handler = handler
        self.name: str = name or handler.__name__
        self.body = body
        self.body_required = body_required
        self.body_name = body_name
        self.body_adapter: Optional[TypeAdapter[Any]] = TypeAdapter(body) if body is not None else None
        # ``validate_json`` of the body type's core validator: the fast path (no intermediate Python objects).
        self.body_validator: Optional[Callable[[bytes], Any]] = (
            self.body_adapter.validator.validate_json if self.body_adapter is not None else None  # type: ignore[union-attr]
        )
        self.query = query
        self.query_model: Optional[type[BaseModel]] = None
        self.query_lists: FrozenSet[str] = frozenset()
        if query:
            fields: Dict[str, Any] = {name: (q.annotation, q.default) for name, q in query.items()}
            self.query_model = create_model(f"{self.name}_query", **fields)
            self.query_lists = frozenset(name for name, q in query.items() if _is_sequence(q.annotation))
        self.response_model = response_model
        self.status = status
        self.prefix = prefix
        self.public = public
        self.maps_errors = maps_errors
        self.include_in_schema = include_in_schema
        self.doc = doc or {}
        self.param_names: Tuple[str, ...] = tuple(_PARAMETER.findall(path))

    @property
    def description(self) -> str:
        """The handler's docstring."""
        return inspect.cleandoc(self.handler.__doc__ or "")


def _is_sequence(annotation: Any) -> bool:
    """Whether a query parameter takes repeated values (``List[...]``, optionally ``Optional``)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        return any(_is_sequence(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    return origin in (list, List, tuple, set, frozenset)


def starlette_routes(routes: Sequence[Route], endpoint: Callable[[Route], Any]) -> List[Any]:
    """Starlette's ``Route``/``Mount`` for each declaration, in order, served by ``endpoint(declaration)`` (an ASGI
    app)."""
    mounted: List[Any] = []
    for route in routes:
        app = endpoint(route)
        if route.prefix:
            mounted.append(Mount(route.path, app=app, name=route.name))
        else:
            methods = sorted(route.methods) if route.methods is not None else None
            mounted.append(StarletteRoute(route.path, app, methods=methods, name=route.name))
    return mounted


class RouteIndex:
    """Starlette's router, asked first about the routes that can match a request only.

    Starlette tries the routes one by one; a request for the 20th route pays 20 regular-expression matches. A route can
    only match paths that start with its *literal prefix* (its path up to the first parameter; a mount's path and
    ``/``). The index groups the routes by the request path's first ``depth`` segments (``/v1/agl/workers`` for
    ``/v1/agl/workers/w-1``): a group holds, in declaration order, every route whose literal prefix and that key could
    both begin the same path. Each group is a Starlette ``Router`` over those routes, so the first full match, the 405
    of a partial match and the endpoint's scope are Starlette's; a path that no route of its group matches goes to the
    full router (404, the 307 trailing-slash redirect). Groups are built on first use, at most ``max_groups``; paths
    beyond go to the full router.
    """

    def __init__(self, router: Router, depth: int = 3, max_groups: int = 512) -> None:
        self.router = router
        self.depth = depth
        self.max_groups = max_groups
        self._prefixes = [(_literal_prefix(route), route) for route in router.routes]
        self._groups: Dict[str, Router] = {}

    def key(self, path: str) -> str:
        """The group key of ``path``: its first ``depth`` segments (all of them when it has fewer)."""
        parts = path.split("/", self.depth + 1)
        return "/".join(parts[: self.depth + 1])

    def candidates(self, key: str) -> List[Any]:
        """The routes, in order, that can match a path whose first segments are ``key``."""
        return [route for prefix, route in self._prefixes if prefix.startswith(key) or key.startswith(prefix)]

    def _group(self, key: str) -> Optional[Router]:
        group = self._groups.get(key)
        if group is None and len(self._groups) < self.max_groups:
            group = Router(self.candidates(key), redirect_slashes=False, default=self.router)
            self._groups[key] = group
        return group

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Serve ``scope`` with the router of its group (``http``), or the full router."""
        if scope["type"] == "http" and not scope.get("root_path"):
            group = self._group(self.key(scope["path"]))
            if group is not None:
                scope["router"] = self.router
                await group(scope, receive, send)
                return
        await self.router(scope, receive, send)


def _literal_prefix(route: Any) -> str:
    """The text every path a Starlette ``Route``/``Mount`` matches begins with."""
    if isinstance(route, Mount):
        return route.path + "/"
    return str(route.path).split("{", 1)[0]
