"""Route declarations of the store server and the matcher that finds the route of a request.

A :class:`Route` declares everything about one operation once: method(s), path template, handler, request body type,
query parameters, response model, success status and documentation. The request pipeline
(:mod:`rollouthub.store.server.pipeline`) serves requests from these declarations and the OpenAPI document
(:mod:`rollouthub.store.server.openapi`) is generated from the same objects.

Matching follows Starlette's router, which the server used before: routes are tried in declaration order, the first
route whose path *and* method match serves the request; when only paths match the answer is 405; a path parameter
``{name}`` matches one non-empty path segment, ``{name:path}`` the rest of the path, and a *mount* (``prefix=True``)
the path itself and everything below it. Exact paths are looked up in a dictionary first (when no earlier route could
also match them), so the common requests cost one lookup.
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from pydantic import BaseModel, TypeAdapter, create_model

__all__ = ["Query", "Route", "Router", "REQUIRED"]

REQUIRED: Any = ...
"""Default of a required query parameter."""


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
"""``async (call) -> bytes | ASGI app``: JSON bytes of the success response, or an ASGI app (e.g. a Starlette
``Response``) that answers the request itself."""


class Route:
    """One operation of the server, declared once.

    Args:
        methods: HTTP methods (``None``: any method, for mounts).
        path: Path template (``/v1/agl/rollouts/{rollout_id}``, ``/{full_path:path}``).
        handler: ``async (call) -> bytes | ASGI app`` (see :data:`Handler`); its ``__name__`` names the operation and
            its docstring describes it.
        body: Type of the JSON request body (a model, ``Optional[Model]``, any pydantic-validatable type) or ``None``.
        body_required: Whether an absent body is a 422 (otherwise the handler gets ``None``).
        body_name: Name of the body in the OpenAPI document (the title of non-model bodies).
        query: Query parameters, validated into one model instance (``call.query``).
        response_model: Type documented for the success response (the handler's JSON is not re-validated).
        status: Success status code of a JSON answer.
        prefix: A mount: the route serves ``path`` and every path below it.
        public: Served without the bearer token (the health check).
        maps_errors: Store errors are answered with the error mapping (400/410/503/500 JSON); otherwise an unexpected
            exception is a plain-text 500, as for any web app.
        include_in_schema: Whether the OpenAPI document lists the route.
        doc: Extra keyword arguments for the OpenAPI document (``summary``, ``openapi_extra``, ``response_class``).
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
        "status_label",
        "prefix",
        "public",
        "maps_errors",
        "include_in_schema",
        "doc",
        "param_names",
        "_segments",
        "_tail",
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
        self.status_label = str(status)  # the metrics label of a success
        self.prefix = prefix
        self.public = public
        self.maps_errors = maps_errors
        self.include_in_schema = include_in_schema
        self.doc = doc or {}
        segments: List[Tuple[bool, str]] = []  # (is_parameter, literal or parameter name)
        names: List[str] = []
        tail: Optional[str] = None
        for part in path.strip("/").split("/") if path != "/" else []:
            if part.startswith("{") and part.endswith("}"):
                name, _, converter = part[1:-1].partition(":")
                if converter == "path":
                    tail = name
                    names.append(name)
                    break
                segments.append((True, name))
                names.append(name)
            else:
                segments.append((False, part))
        self.param_names: Tuple[str, ...] = tuple(names)
        self._segments = tuple(segments)
        self._tail = tail

    @property
    def description(self) -> str:
        """The handler's docstring."""
        return inspect.cleandoc(self.handler.__doc__ or "")

    def match_path(self, parts: Sequence[str]) -> Optional[Tuple[str, ...]]:
        """The path parameters when the request path (split on ``/``, without the leading empty part) matches."""
        segments = self._segments
        n = len(segments)
        if self.prefix:
            if len(parts) <= n:  # like Starlette's Mount: "<path>/<anything>" (the bare path is a separate route)
                return None
            for (is_param, value), part in zip(segments, parts, strict=False):
                if is_param or value != part:
                    return None
            return ()
        if self._tail is not None:
            if len(parts) < n:
                return None
        elif len(parts) != n:
            return None
        params: List[str] = []
        for (is_param, value), part in zip(segments, parts, strict=False):
            if is_param:
                if not part:
                    return None
                params.append(part)
            elif value != part:
                return None
        if self._tail is not None:
            params.append("/".join(parts[n:]))
        return tuple(params)

    def allows(self, method: str) -> bool:
        """Whether the route serves ``method``."""
        return self.methods is None or method in self.methods


def _is_sequence(annotation: Any) -> bool:
    """Whether a query parameter takes repeated values (``List[...]``, optionally ``Optional``)."""
    import typing

    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        return any(_is_sequence(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    return origin in (list, List, tuple, set, frozenset)


def _split(path: str) -> List[str]:
    return path[1:].split("/") if path != "/" else []


class Router:
    """The ordered routes of the server and the lookup of a request's route.

    :meth:`match` answers exact paths from a dictionary (when no earlier route could also match them). Other paths are
    matched against a few *candidates* only: the routes that allow the method, can match a path of that many segments
    and agree with its most telling literal segment (e.g. ``workers`` in ``/v1/agl/workers/{worker_id}``), in
    declaration order -- so the first candidate that matches is the route the full ordered scan would find.
    """

    _MAX_INDEXED_SEGMENTS = 32
    _MAX_CANDIDATE_LISTS = 4096

    def __init__(self, routes: Sequence[Route]) -> None:
        self.routes: List[Route] = list(routes)
        # Exact paths answered from a dictionary: (method, path) -> route, unless an earlier route could match too.
        self._exact: Dict[Tuple[str, str], Route] = {}
        for index, route in enumerate(self.routes):
            if route.param_names or route.prefix or route.methods is None:
                continue
            parts = _split(route.path)
            shadowed = any(
                other.match_path(parts) is not None and (other.param_names or other.prefix)
                for other in self.routes[:index]
            )
            if shadowed:
                continue
            for method in route.methods:
                self._exact.setdefault((method, route.path), route)
        # Per path length: the segment position that tells the routes apart best, and the literals found there.
        self._shapes = [_Shape(route) for route in self.routes]
        self._layouts: Dict[int, Tuple[int, FrozenSet[str]]] = {}
        self._candidates: Dict[Tuple[str, int, Optional[str]], Tuple[Route, ...]] = {}

    def _layout(self, n: int) -> Tuple[int, FrozenSet[str]]:
        if n > self._MAX_INDEXED_SEGMENTS:  # a long path (no declared route has many segments): no telling position
            return -1, frozenset()
        layout = self._layouts.get(n)
        if layout is None:
            shapes = [shape for shape in self._shapes if shape.fits(n)]
            layout = (-1, frozenset())
            for position in range(n):
                literals = frozenset(
                    literal for literal in (shape.literal_at(position) for shape in shapes) if literal is not None
                )
                if len(literals) > len(layout[1]):
                    layout = (position, literals)
            self._layouts[n] = layout
        return layout

    def _candidates_for(self, method: str, parts: List[str]) -> Tuple[Route, ...]:
        """The routes that may serve ``method`` on a path split into ``parts`` (a superset of the matches, ordered)."""
        n = len(parts)
        position, literals = self._layout(n)
        literal = parts[position] if position >= 0 and parts[position] in literals else None
        key = (method, n, literal)
        candidates = self._candidates.get(key)
        if candidates is None:
            candidates = tuple(
                shape.route
                for shape in self._shapes
                if shape.route.allows(method)
                and shape.fits(n)
                and (position < 0 or shape.literal_at(position) in (None, literal))
            )
            if n <= self._MAX_INDEXED_SEGMENTS and len(self._candidates) < self._MAX_CANDIDATE_LISTS:
                self._candidates[key] = candidates
        return candidates

    def match(self, method: str, path: str) -> Tuple[Optional[Route], Tuple[str, ...], Optional[Route]]:
        """``(route, path parameters, None)`` for the route serving the request, else ``(None, (), partial)`` where
        ``partial`` is the first route whose path matches (405) or ``None`` (404)."""
        route = self._exact.get((method, path))
        if route is not None:
            return route, (), None
        parts = _split(path)
        for route in self._candidates_for(method, parts):
            if not route.param_names and not route.prefix:
                if route.path == path:
                    return route, (), None
                continue
            params = route.match_path(parts)
            if params is not None:
                return route, params, None
        for route in self.routes:  # no route serves the method: the first whose path matches makes it a 405
            if route.param_names or route.prefix:
                if route.match_path(parts) is not None:
                    return None, (), route
            elif route.path == path:
                return None, (), route
        return None, (), None

    def matches_any(self, path: str) -> bool:
        """Whether any route's path matches ``path`` (for Starlette's trailing-slash redirect)."""
        parts = _split(path)
        return any(
            (route.path == path if not (route.param_names or route.prefix) else route.match_path(parts) is not None)
            for route in self.routes
        )


class _Shape:
    """What a route requires of a path split on ``/``: its number of segments and the literal ones."""

    __slots__ = ("route", "min_length", "max_length", "literals")

    def __init__(self, route: Route) -> None:
        self.route = route
        if not route.param_names and not route.prefix:  # an exact path: compared as a whole
            literals: Tuple[Optional[str], ...] = tuple(_split(route.path))
            self.min_length: int = len(literals)
            self.max_length: Optional[int] = len(literals)
        else:
            literals = tuple(None if is_param else value for is_param, value in route._segments)
            if route.prefix:  # "<path>/<anything>"
                self.min_length, self.max_length = len(literals) + 1, None
            elif route._tail is not None:
                self.min_length, self.max_length = len(literals), None
            else:
                self.min_length = self.max_length = len(literals)
        self.literals = literals

    def fits(self, n: int) -> bool:
        """Whether a path of ``n`` segments can match."""
        return self.min_length <= n and (self.max_length is None or n <= self.max_length)

    def literal_at(self, position: int) -> Optional[str]:
        """The literal segment required at ``position`` (``None``: any value fits there)."""
        return self.literals[position] if position < len(self.literals) else None
