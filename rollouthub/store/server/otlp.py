"""OTLP/HTTP ingestion of the store server: ``POST /v1/traces`` and the unsupported signals.

``POST /v1/traces`` reads the body only once the content type is supported, inflates and decodes it
(:mod:`.otlp_decode`), stores the acceptable spans and answers as OTLP/HTTP prescribes: 200 with an empty
``ExportTraceServiceResponse``, or with ``partial_success`` (the rejected count and the first reason, naming the span)
when some spans were left out -- outside the store's input domains, or with ids of the wrong length -- and the others
stored; 400 with a ``google.rpc.Status`` body (protobuf or JSON, following the request's content type) naming the
problem for every malformed payload, never a 500; 413/415 for bodies inflating past the limit / other encodings; 503
while the database is unavailable (exporters retry it).
"""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any, Awaitable, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from rollouthub.types import Span

from ..errors import is_data_error, is_retryable_error
from .endpoint import Call
from .otlp_decode import (
    JSON_CT,
    PROTOBUF_CT,
    AssigningSpanSink,
    OTLPPayloadError,
    OTLPPayloadTooLarge,
    OTLPUnsupportedEncoding,
    SequenceIdBulkIssuer,
    decode_spans,
    inflate_async,
    parse_otlp_traces,
    spans_from_proto,
)
from .routing import Route

__all__ = ["OTLP_OPENAPI", "OTLPExportResult", "export_otlp", "handle_otlp_export", "otlp_routes"]


def _wants_gzip_value(accept_encoding: Optional[str]) -> bool:
    if not accept_encoding:
        return False
    return any(part.split(";", 1)[0].strip().lower() == "gzip" for part in accept_encoding.split(","))


def _status_body(message: str, as_json: bool, code: int = 3) -> bytes:
    """A ``google.rpc.Status`` (``code`` 3: INVALID_ARGUMENT, 8: RESOURCE_EXHAUSTED) as protobuf or JSON."""
    if as_json:
        return json.dumps({"code": code, "message": message}).encode()
    from google.rpc.status_pb2 import Status

    return bytes(Status(code=code, message=message).SerializeToString())


class OTLPExportResult(NamedTuple):
    """The HTTP response of an OTLP export: status code, media type, body and whether the body is gzip-compressed."""

    status_code: int
    media_type: str
    body: bytes
    gzipped: bool

    def raw_headers(self) -> List[Tuple[bytes, bytes]]:
        """ASGI response headers (``content-encoding`` when gzipped, ``content-length``, ``content-type``)."""
        headers = [(b"content-encoding", b"gzip")] if self.gzipped else []
        headers.append((b"content-length", b"%d" % len(self.body)))
        headers.append((b"content-type", self.media_type.encode("latin-1")))
        return headers


def _result(body: bytes, status_code: int, media_type: str, gzip_it: bool) -> OTLPExportResult:
    if gzip_it:
        body = gzip.compress(body)
    return OTLPExportResult(status_code, media_type, body, gzip_it)


_EMPTY_PROTO_RESPONSE: Optional[bytes] = None


def _empty_proto_response() -> bytes:
    global _EMPTY_PROTO_RESPONSE
    if _EMPTY_PROTO_RESPONSE is None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        _EMPTY_PROTO_RESPONSE = bytes(ExportTraceServiceResponse().SerializeToString())
    return _EMPTY_PROTO_RESPONSE


OFFLOAD_BYTES = 1 << 20
"""Decoded bodies at least this large are parsed and converted to spans in a worker thread, so that the event loop
keeps serving other requests meanwhile."""


def _decode_request(
    body: bytes, content_type: str, convert: bool, rejected: List[str]
) -> Tuple[Any, List[Span], List[bool]]:
    """Parse a decoded body; with ``convert``, also turn it into spans and their needs-an-id flags (spans outside the
    input domains or with malformed ids are left out, their reasons appended to ``rejected``)."""
    parsed = parse_otlp_traces(body, content_type, rejected=rejected if convert else None)
    if not convert:
        return parsed, [], []
    spans, missing = decode_spans(parsed, rejected)
    return parsed, spans, missing


async def export_otlp(
    content_type: Optional[str],
    content_encoding: Optional[str],
    accept_encoding: Optional[str],
    read_body: Callable[[], Awaitable[bytes]],
    add_many_spans: Callable[[Sequence[Span]], Awaitable[Any]],
    sequence_id_bulk_issuer: SequenceIdBulkIssuer,
    *,
    add_many_spans_assigning_ids: Optional[AssigningSpanSink] = None,
    max_body_bytes: int = 0,
) -> OTLPExportResult:
    """Handle an OTLP/HTTP traces export independently of the web framework.

    ``content_type``/``content_encoding``/``accept_encoding`` are the raw request header values (``None`` when
    absent); ``read_body`` is awaited only once the content type is known to be supported. Returns 200 with an empty
    ``ExportTraceServiceResponse`` -- or with ``partial_success`` (rejected count and the first reason) when some spans
    lie outside the store's input domains or carry ids of the wrong length, and the others were stored; 400 with a ``google.rpc.Status`` for an
    unsupported content type, an undecodable body, spans the store rejects, or when no span is acceptable; 413 when the body inflates beyond ``max_body_bytes`` (``<= 0``: no limit); 415
    for an unsupported ``Content-Encoding``; 503 when the database is unavailable (the OTLP exporter retries).
    Exceptions of ``read_body`` and other store errors propagate.

    Spans without a sequence id get one from ``sequence_id_bulk_issuer`` before ``add_many_spans`` stores them; when
    ``add_many_spans_assigning_ids`` (``LightningStore.add_many_spans_assigning_ids``) is given, it stores the spans
    and allocates the missing ids itself, in the same unit, instead of those two calls.
    """
    gzip_it = _wants_gzip_value(accept_encoding)
    ct = (content_type or "").split(";", 1)[0].strip().lower()
    if ct not in (PROTOBUF_CT, JSON_CT):
        message = f"Unsupported Content-Type '{ct}', expected '{PROTOBUF_CT}'"
        return _result(_status_body(message, False), 400, PROTOBUF_CT, gzip_it)
    as_json = ct == JSON_CT
    media_type = JSON_CT if as_json else PROTOBUF_CT
    body = await read_body()
    missing: List[bool] = []
    rejected: List[str] = []
    convert = add_many_spans_assigning_ids is not None
    try:
        if content_encoding:
            body = await inflate_async(body, content_encoding, max_body_bytes)
        if len(body) >= OFFLOAD_BYTES:
            parsed, spans, missing = await asyncio.to_thread(_decode_request, body, ct, convert, rejected)
        else:
            parsed, spans, missing = _decode_request(body, ct, convert, rejected)
        if not convert:
            spans = await spans_from_proto(parsed, sequence_id_bulk_issuer)
        if rejected and not spans:  # nothing acceptable: the request as a whole is invalid
            raise OTLPPayloadError(_rejection_message(rejected))
    except OTLPPayloadTooLarge as exc:
        return _result(_status_body(str(exc), as_json, code=8), 413, media_type, gzip_it)
    except OTLPUnsupportedEncoding as exc:
        return _result(_status_body(str(exc), as_json), 415, media_type, gzip_it)
    except OTLPPayloadError as exc:
        return _result(_status_body(str(exc), as_json), 400, media_type, gzip_it)
    except (ValueError, TypeError) as exc:  # includes pydantic.ValidationError
        return _result(_status_body(f"Invalid OTLP span: {exc}", as_json), 400, media_type, gzip_it)
    try:
        if add_many_spans_assigning_ids is not None:
            await add_many_spans_assigning_ids(spans, missing)
        else:
            await add_many_spans(spans)
    except (ValueError, TypeError) as exc:  # e.g. unknown rollout / attempt
        return _result(_status_body(f"Spans rejected by the store: {exc}", as_json), 400, media_type, gzip_it)
    except Exception as exc:
        if is_data_error(exc):
            return _result(_status_body(f"Spans rejected by the database: {exc}", as_json), 400, media_type, gzip_it)
        if is_retryable_error(exc):  # 503 is one of the statuses OTLP exporters retry
            message = f"The store is temporarily unavailable, retry later: {exc}"
            return _result(_status_body(message, as_json, code=14), 503, media_type, gzip_it)
        raise
    if rejected:
        return _partial_success(len(rejected), _rejection_message(rejected), as_json, gzip_it)
    return _success(as_json, gzip_it)


def _rejection_message(rejected: Sequence[str]) -> str:
    more = f" (and {len(rejected) - 1} more rejected span(s))" if len(rejected) > 1 else ""
    return rejected[0] + more


def _partial_success(count: int, message: str, as_json: bool, gzip_it: bool) -> OTLPExportResult:
    """200 with ``partial_success`` (OTLP/HTTP): the valid spans were stored, ``count`` were rejected because of
    ``message``; the exporter logs it and does not retry."""
    if as_json:
        body = json.dumps({"partialSuccess": {"rejectedSpans": str(count), "errorMessage": message}}).encode()
        return _result(body, 200, JSON_CT, gzip_it)
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    response = ExportTraceServiceResponse()
    response.partial_success.rejected_spans = count
    response.partial_success.error_message = message
    return _result(bytes(response.SerializeToString()), 200, PROTOBUF_CT, gzip_it)


def _success(as_json: bool, gzip_it: bool) -> OTLPExportResult:
    """The (cached) 200 response: an empty ``ExportTraceServiceResponse``, optionally gzip-compressed."""
    key = (as_json, gzip_it)
    cached = _SUCCESS_RESULTS.get(key)
    if cached is None:
        body = b"{}" if as_json else _empty_proto_response()
        if gzip_it:
            body = gzip.compress(body, mtime=0)
        cached = _SUCCESS_RESULTS[key] = OTLPExportResult(200, JSON_CT if as_json else PROTOBUF_CT, body, gzip_it)
    return cached


_SUCCESS_RESULTS: Dict[Tuple[bool, bool], OTLPExportResult] = {}


async def handle_otlp_export(
    request: Any,
    add_many_spans: Callable[[Sequence[Span]], Awaitable[Any]],
    sequence_id_bulk_issuer: SequenceIdBulkIssuer,
    *,
    add_many_spans_assigning_ids: Optional[AssigningSpanSink] = None,
    max_body_bytes: int = 0,
) -> Any:
    """Handle ``POST /v1/traces`` for a Starlette ``request`` (see :func:`export_otlp`); returns a Starlette response."""
    from starlette.responses import Response

    headers = request.headers
    result = await export_otlp(
        headers.get("content-type"),
        headers.get("content-encoding"),
        headers.get("accept-encoding"),
        request.body,
        add_many_spans,
        sequence_id_bulk_issuer,
        add_many_spans_assigning_ids=add_many_spans_assigning_ids,
        max_body_bytes=max_body_bytes,
    )
    extra = {"Content-Encoding": "gzip"} if result.gzipped else {}
    return Response(content=result.body, status_code=result.status_code, media_type=result.media_type, headers=extra)


# ---------------------------------------------------------------------------------------------------------------------
# Routes
# ---------------------------------------------------------------------------------------------------------------------

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
