"""The endpoint of one declared route: parse the request into the declared types, call the handler, answer.

:class:`Endpoint` is the ASGI app Starlette's router calls for a declared
:class:`~rollouthub.store.server.routing.Route`. It reads the body (the body limit is enforced by the middleware in
front of it), validates it into the route's body type and the query string into the route's query model -- FastAPI's
rules and error shapes: JSON when the content type is ``application/json`` or ``+json``, an empty body is a missing
one, errors with ``loc`` prefixed by ``body``/``query`` -- and hands the handler a :class:`Call`. Whatever the handler
raises goes up to the error middleware (:mod:`rollouthub.store.server.middleware`).

A handler returns the JSON bytes of the success response (sent with the route's status), a complete response
``(status, body, headers)``, or an ASGI app (a Starlette response, static files, the Prometheus app) that answers the
request itself.
"""

from __future__ import annotations

import asyncio
import email.message
import json
from typing import Any, Awaitable, Callable, Dict, List, MutableMapping, Optional, Tuple
from urllib.parse import parse_qsl

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from .routing import Route

__all__ = [
    "Call",
    "Endpoint",
    "Message",
    "Receive",
    "RequestValidationFailed",
    "Scope",
    "Send",
    "ROUTE_KEY",
    "header_value",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

ROUTE_KEY = "rollouthub.route"
"""Scope key under which the endpoint records its declaration (for the error mapping and the metrics' path label)."""

_JSON = (b"content-type", b"application/json")


class RequestValidationFailed(Exception):
    """Invalid body or query parameters: ``errors`` in FastAPI's shape (answered with 422)."""

    def __init__(self, errors: List[Dict[str, Any]]) -> None:
        super().__init__("request validation failed")
        self.errors = errors


class Call:
    """One request as a handler sees it: the app, the server, path parameters, validated body and query, the ASGI
    scope and ``receive``."""

    __slots__ = ("app", "server", "params", "body", "query", "scope", "receive", "_watch")

    def __init__(self, app: Any, scope: Scope, receive: Receive) -> None:
        self.app = app
        self.server = app.server
        params = scope.get("path_params")
        self.params: Tuple[str, ...] = tuple(params.values()) if params else ()
        self.body: Any = None
        self.query: Any = None
        self.scope = scope
        self.receive = receive
        self._watch: Optional[asyncio.Future[Any]] = None

    async def read_body(self) -> bytes:
        """The whole request body; ``ClientDisconnect`` when the client leaves before its end."""
        chunks: List[bytes] = []
        while True:
            message = await self.receive()
            if message["type"] != "http.request":
                raise ClientDisconnect()
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

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


class Endpoint:
    """The ASGI app serving one declared route (see the module docstring)."""

    __slots__ = ("route",)

    def __init__(self, route: Route) -> None:
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Parse, call the handler, send its answer."""
        route = self.route
        scope[ROUTE_KEY] = route
        call = Call(scope["app"], scope, receive)
        try:
            if route.body is not None:
                call.body = parse_body(route, await call.read_body(), header_value(scope, b"content-type"))
            if route.query_model is not None:
                call.query = parse_query(route, scope["query_string"])
            result = await route.handler(call)
        finally:
            call.close()
        if type(result) is bytes:
            headers = [_JSON, (b"content-length", b"%d" % len(result))]
            await send({"type": "http.response.start", "status": route.status, "headers": headers})
            await send({"type": "http.response.body", "body": result})
        elif type(result) is tuple:  # (status, body, headers)
            await send({"type": "http.response.start", "status": result[0], "headers": result[2]})
            await send({"type": "http.response.body", "body": result[1]})
        else:
            await result(scope, receive, send)


def header_value(scope: Scope, name: bytes) -> Optional[bytes]:
    """The first value of the request header ``name`` (lower case), or ``None``."""
    for key, value in scope["headers"]:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


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


def parse_body(route: Route, body: bytes, content_type: Optional[bytes]) -> Any:
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


def parse_query(route: Route, query_string: bytes) -> Any:
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
