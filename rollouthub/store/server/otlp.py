"""OTLP/HTTP ingestion routes of the store server: ``POST /v1/traces`` and the unsupported signals.

The decoding, input-domain checks, bounded decompression and the response shapes are in
:func:`rollouthub.utils.otlp.export_otlp`; this module declares the routes and reads the request for it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from rollouthub.utils.otlp import export_otlp

from .pipeline import Call
from .routing import Route

__all__ = ["OTLP_OPENAPI", "otlp_routes"]

OTLP_OPENAPI: Dict[str, Any] = {
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


async def otlp_traces(call: Call) -> Any:
    """Store the spans of an OTLP/HTTP trace export (protobuf or JSON, optionally gzip/deflate-compressed)."""
    content_type: Optional[str] = None
    content_encoding: Optional[str] = None
    accept_encoding: Optional[str] = None
    for key, value in call.scope["headers"]:
        if key == b"content-type":
            content_type = content_type or value.decode("latin-1")
        elif key == b"content-encoding":
            content_encoding = content_encoding or value.decode("latin-1")
        elif key == b"accept-encoding":
            accept_encoding = accept_encoding or value.decode("latin-1")
    server = call.server
    result = await export_otlp(
        content_type,
        content_encoding,
        accept_encoding,
        call.read_body,
        server.add_many_spans,
        server.get_many_span_sequence_ids,
        add_many_spans_assigning_ids=server.add_many_spans_assigning_ids,
        max_body_bytes=call.app.max_body_bytes,
    )
    return result.status_code, result.body, result.raw_headers()


async def _not_implemented(call: Call) -> Any:
    return 501, b"", [(b"content-length", b"0")]


def otlp_routes() -> List[Route]:
    """``POST /v1/traces`` and 501 for ``POST /v1/metrics|logs|development/profiles``."""
    routes = [
        Route(
            ["POST"],
            "/v1/traces",
            otlp_traces,
            maps_errors=False,
            doc={"summary": "OTLP/HTTP trace export", "openapi_extra": OTLP_OPENAPI},
        )
    ]
    for signal in ("metrics", "logs", "development/profiles"):

        async def handler(call: Call) -> Any:
            return await _not_implemented(call)

        handler.__name__ = f"otlp_{signal.replace('/', '_')}"
        handler.__doc__ = ""
        routes.append(Route(["POST"], f"/v1/{signal}", handler, maps_errors=False))
    return routes
