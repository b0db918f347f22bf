"""The OpenAPI document of the store server, generated from the route declarations, and the routes serving it.

Each declared :class:`~rollouthub.store.server.routing.Route` becomes one operation: path parameters, query
parameters (their JSON schemas from pydantic), request body and response schema (pydantic's ``TypeAdapter`` core
schemas, all generated together so that shared models become ``components/schemas`` entries), the operation name and
description from its handler. The layout follows FastAPI's documents (the server's document before it served requests
itself): ``operationId`` ``<name>_<path>_<method>``, titles of inline schemas, a 422 answer wherever a parameter or a
body is validated. ``GET /openapi.json`` and ``GET /docs`` (Swagger UI) serve the document.
"""

from __future__ import annotations

import copy
import re
from typing import Annotated, Any, Dict, Hashable, List, Tuple

from pydantic import Field, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema

from .endpoint import Call
from .routing import Route

__all__ = ["TITLE", "VERSION", "build_openapi", "docs_routes"]

TITLE = "LightningStore Server"
VERSION = "0.1.0"

_REF_TEMPLATE = "#/components/schemas/{model}"
_JSON = "application/json"

VALIDATION_ERROR_SCHEMA: Dict[str, Any] = {
    "title": "ValidationError",
    "type": "object",
    "properties": {
        "loc": {"title": "Location", "type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
        "msg": {"title": "Message", "type": "string"},
        "type": {"title": "Error Type", "type": "string"},
        "input": {"title": "Input"},
        "ctx": {"title": "Context", "type": "object"},
    },
    "required": ["loc", "msg", "type"],
}
"""One error of a 422 body (see :func:`~rollouthub.store.server.errors.validation_error_body`)."""

HTTP_VALIDATION_ERROR_SCHEMA: Dict[str, Any] = {
    "title": "HTTPValidationError",
    "type": "object",
    "properties": {
        "detail": {"title": "Detail", "type": "array", "items": {"$ref": "#/components/schemas/ValidationError"}}
    },
}
"""The body of a 422 answer: ``{"detail": [ValidationError, ...]}``."""

_VALIDATION_ERROR_RESPONSE = {
    "description": "Validation Error",
    "content": {_JSON: {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}},
}


def _title(name: str) -> str:
    return name.title().replace("_", " ")


def _with_title(schema: Dict[str, Any], name: str) -> Dict[str, Any]:
    """A schema of its own gets a title (a ``$ref`` is named by the model it refers to)."""
    schema = dict(schema)
    if "$ref" not in schema:
        schema["title"] = _title(name)
    return schema


def _operation_id(route: Route, method: str) -> str:
    return re.sub(r"\W", "_", route.name + route.path) + "_" + method.lower()


def _merge(into: Dict[str, Any], extra: Dict[str, Any]) -> None:
    """Merge ``extra`` into ``into``: dictionaries key by key, lists appended, other values replaced."""
    for key, value in extra.items():
        if isinstance(into.get(key), dict) and isinstance(value, dict):
            _merge(into[key], value)
        elif isinstance(into.get(key), list) and isinstance(value, list):
            into[key] = into[key] + value
        else:
            into[key] = copy.deepcopy(value)


def _drop_null_defaults(node: Any) -> Any:
    """``node`` without ``"default": null`` entries: an optional field or parameter is documented as optional, its
    ``None`` default left implicit (as the server's documents always did)."""
    if isinstance(node, dict):
        return {
            key: _drop_null_defaults(value) for key, value in node.items() if not (key == "default" and value is None)
        }
    if isinstance(node, list):
        return [_drop_null_defaults(item) for item in node]
    return node


def _schema_inputs(routes: List[Route]) -> List[Tuple[Hashable, Any, Any]]:
    """Every type the document describes, as ``(key, mode, core schema)`` for pydantic's definitions generator:
    query parameters and bodies as validated, responses as serialized."""
    inputs: List[Tuple[Hashable, Any, Any]] = []
    for route in routes:
        for name, query in (route.query or {}).items():
            field = (
                Field(description=query.description)
                if query.required
                else Field(query.default, description=query.description)
            )
            parameter: TypeAdapter[Any] = TypeAdapter(Annotated[query.annotation, field])
            inputs.append(((id(route), "query", name), "validation", parameter.core_schema))
        if route.body_adapter is not None:
            inputs.append(((id(route), "body"), "validation", route.body_adapter.core_schema))
        if route.response_model is not None:
            response: TypeAdapter[Any] = TypeAdapter(route.response_model)
            inputs.append(((id(route), "response"), "serialization", response.core_schema))
    return inputs


def _operation(route: Route, method: str, schemas: Dict[Any, Dict[str, Any]]) -> Dict[str, Any]:
    """The OpenAPI operation of ``route`` for ``method``."""
    key = id(route)
    operation: Dict[str, Any] = {"summary": route.doc.get("summary") or _title(route.name)}
    if route.description:
        operation["description"] = route.description
    operation["operationId"] = _operation_id(route, method)
    parameters: List[Dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"title": _title(name), "type": "string"}}
        for name in route.param_names
    ]
    for name, query in (route.query or {}).items():
        schema = schemas[(key, "query", name), "validation"]
        parameter = {"name": name, "in": "query", "required": query.required, "schema": _with_title(schema, name)}
        if query.description:
            parameter["description"] = query.description
        parameters.append(parameter)
    if parameters:
        operation["parameters"] = parameters
    if route.body_adapter is not None:
        body_schema = _with_title(schemas[(key, "body"), "validation"], route.body_name)
        request_body: Dict[str, Any] = {"content": {_JSON: {"schema": body_schema}}}
        if route.body_required:
            request_body["required"] = True
        operation["requestBody"] = request_body
    success: Dict[str, Any] = {"description": "Successful Response"}
    media_type = route.doc.get("response_media_type", _JSON)
    if media_type is not None:
        schema = (
            _with_title(schemas[(key, "response"), "serialization"], "Response_" + _operation_id(route, method))
            if route.response_model is not None
            else {}
        )
        success["content"] = {media_type: {"schema": schema}}
    operation["responses"] = {str(route.status): success}
    if parameters or route.body_adapter is not None:
        operation["responses"]["422"] = copy.deepcopy(_VALIDATION_ERROR_RESPONSE)
    _merge(operation, route.doc.get("openapi_extra", {}))
    return operation


def build_openapi(routes: List[Route]) -> Dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` (those with ``include_in_schema``)."""
    described = [route for route in routes if route.include_in_schema]
    generator = GenerateJsonSchema(ref_template=_REF_TEMPLATE)
    generated, definitions = generator.generate_definitions(inputs=_schema_inputs(described))  # type: ignore[arg-type]
    schemas = {key: _drop_null_defaults(schema) for key, schema in generated.items()}
    definitions = _drop_null_defaults(definitions)
    paths: Dict[str, Dict[str, Any]] = {}
    validated = False
    for route in described:
        for method in sorted(route.methods or ()):
            operation = _operation(route, method, schemas)
            validated = validated or "422" in operation["responses"]
            paths.setdefault(route.path, {})[method.lower()] = operation
    components = dict(definitions)
    if validated:
        components["ValidationError"] = VALIDATION_ERROR_SCHEMA
        components["HTTPValidationError"] = HTTP_VALIDATION_ERROR_SCHEMA
    document: Dict[str, Any] = {"openapi": "3.1.0", "info": {"title": TITLE, "version": VERSION}, "paths": paths}
    if components:
        document["components"] = {"schemas": {name: components[name] for name in sorted(components)}}
    return document


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
