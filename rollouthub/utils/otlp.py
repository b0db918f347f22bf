"""OTLP/HTTP trace ingestion for the store server and the client-side exporter (store.md 11.7).

Server side: :func:`handle_otlp_export` accepts ``application/x-protobuf`` (primary, as the reference) and -- an
extension -- OTLP JSON (``application/json``, hex trace/span ids as in the OTLP specification). Bodies may be
compressed (``Content-Encoding: gzip`` or ``deflate``); they are inflated incrementally and never beyond the server's
body limit (:func:`inflate`: 413 above it, 415 for another encoding), in slices that let the event loop serve other
requests in between. Every malformed payload is answered with HTTP 400 and a ``google.rpc.Status`` body (protobuf or
JSON, following the request's content type) naming the problem; it never turns into a 500. Spans must lie in the store's
input domains (:mod:`rollouthub.store.domains`: no NUL characters or lone surrogates in any text, bounded JSON nesting).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import logging
import weakref
import zlib
from typing import Any, Awaitable, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from rollouthub.semconv import LightningResourceAttributes
from rollouthub.store.domains import MAX_SEQUENCE_ID, find_problem
from rollouthub.store.errors import is_data_error, is_retryable_error
from rollouthub.types import Event, Link, OtelResource, Span, SpanContext, TraceStatus, convert_timestamp

__all__ = [
    "PROTOBUF_CT",
    "JSON_CT",
    "OTLPPayloadError",
    "OTLPPayloadTooLarge",
    "OTLPUnsupportedEncoding",
    "OTLPExportResult",
    "INFLATE_SLICE_BYTES",
    "inflate",
    "inflate_async",
    "export_otlp",
    "handle_otlp_export",
    "parse_otlp_traces",
    "decode_spans",
    "spans_from_proto",
    "LightningStoreOTLPExporter",
]

logger = logging.getLogger(__name__)

AGL_ROLLOUT_ID = LightningResourceAttributes.ROLLOUT_ID.value
AGL_ATTEMPT_ID = LightningResourceAttributes.ATTEMPT_ID.value
AGL_SPAN_SEQUENCE_ID = LightningResourceAttributes.SPAN_SEQUENCE_ID.value

PROTOBUF_CT = "application/x-protobuf"
"""Media type of OTLP/HTTP protobuf payloads."""

JSON_CT = "application/json"
"""Media type of OTLP/HTTP JSON payloads (accepted as an extension of the reference)."""

SequenceIdBulkIssuer = Callable[[Sequence[Tuple[str, str]]], Awaitable[Sequence[int]]]
AssigningSpanSink = Callable[[Sequence[Span], Sequence[bool]], Awaitable[Any]]
"""``(spans, needs_sequence_id) -> ...``: stores spans, allocating the flagged spans' sequence ids itself."""


class OTLPPayloadError(ValueError):
    """The OTLP request could not be decoded (bad gzip, bad protobuf, bad JSON) or holds values outside the store's
    input domains (answered with 400)."""


class OTLPPayloadTooLarge(OTLPPayloadError):
    """The decompressed body is larger than the server's body limit (answered with 413)."""


class OTLPUnsupportedEncoding(OTLPPayloadError):
    """The ``Content-Encoding`` is not one the server inflates (answered with 415)."""


# ---------------------------------------------------------------------------------------------------------------------
# Bounded decompression
# ---------------------------------------------------------------------------------------------------------------------

INFLATE_SLICE_BYTES = 1 << 20
"""Output produced per inflate step; :func:`inflate_async` lets the event loop run between steps."""

_WBITS = {"gzip": 31, "x-gzip": 31, "deflate": 15}
"""zlib window bits per accepted ``Content-Encoding`` (gzip container; zlib container for ``deflate``)."""

SUPPORTED_ENCODINGS = ("gzip", "deflate", "identity")


def _inflate_steps(body: bytes, content_encoding: Optional[str], limit: int) -> Iterator[bytes]:
    """Inflate ``body`` in slices of at most :data:`INFLATE_SLICE_BYTES`, never producing more than ``limit`` bytes
    (``<= 0``: no limit); concatenated gzip members are inflated one after the other."""
    coding = (content_encoding or "").strip().lower()
    if coding in ("", "identity"):
        if 0 < limit < len(body):
            raise OTLPPayloadTooLarge(f"Request body too large (limit {limit} bytes)")
        yield body
        return
    wbits = _WBITS.get(coding)
    if wbits is None:
        raise OTLPUnsupportedEncoding(
            f"Unsupported Content-Encoding '{content_encoding}', expected one of: {', '.join(SUPPORTED_ENCODINGS)}"
        )
    produced = 0
    data = body
    while True:
        inflater = zlib.decompressobj(wbits)
        pending = data
        while True:
            step = INFLATE_SLICE_BYTES if limit <= 0 else min(INFLATE_SLICE_BYTES, limit - produced + 1)
            try:
                chunk = inflater.decompress(pending, step)
            except zlib.error as exc:
                raise OTLPPayloadError(f"Unable to decompress {coding} OTLP traces payload: {exc}") from exc
            produced += len(chunk)
            if 0 < limit < produced:
                raise OTLPPayloadTooLarge(f"Request body too large after {coding} decompression (limit {limit} bytes)")
            if chunk:
                yield chunk
            pending = inflater.unconsumed_tail
            # A full slice may leave output inside zlib even when all input was consumed: ask again until it is not full.
            if inflater.eof or (not pending and len(chunk) < step):
                break
        if not inflater.eof:
            if not data:
                return  # an empty body is an empty payload
            raise OTLPPayloadError(f"Unable to decompress {coding} OTLP traces payload: the stream is truncated")
        data = inflater.unused_data
        if wbits != 31 or not data:
            return


def inflate(body: bytes, content_encoding: Optional[str], limit: int = 0) -> bytes:
    """``body`` decoded according to ``content_encoding`` (``gzip``, ``deflate``, ``identity`` or none).

    Raises :class:`OTLPPayloadTooLarge` as soon as the output would exceed ``limit`` bytes (``<= 0``: no limit), so a
    compression bomb costs at most ``limit`` bytes of memory and the time to produce them;
    :class:`OTLPUnsupportedEncoding` for another encoding, :class:`OTLPPayloadError` for a corrupt stream.
    """
    return b"".join(_inflate_steps(body, content_encoding, limit))


_LARGE_INFLATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _large_inflate_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _LARGE_INFLATES.get(loop)
    if lock is None:
        lock = _LARGE_INFLATES[loop] = asyncio.Lock()
    return lock


async def inflate_async(body: bytes, content_encoding: Optional[str], limit: int = 0) -> bytes:
    """:func:`inflate` that yields to the event loop between slices (one slice inflates at most
    :data:`INFLATE_SLICE_BYTES`, about a millisecond), so other requests are served during a large inflate.

    Bodies that inflate beyond one slice take turns (one at a time per event loop): concurrent compression bombs then
    hold the memory of one body limit, not of one per request."""
    steps = _inflate_steps(body, content_encoding, limit)
    first = next(steps, b"")
    second = next(steps, None)
    if second is None:
        return first
    chunks = [first, second]
    del first, second
    async with _large_inflate_lock():
        for chunk in steps:
            await asyncio.sleep(0)
            chunks.append(chunk)
    return b"".join(chunks)


# ---------------------------------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------------------------------


def _wants_gzip_value(accept_encoding: Optional[str]) -> bool:
    if not accept_encoding:
        return False
    return any(part.split(";", 1)[0].strip().lower() == "gzip" for part in accept_encoding.split(","))


_HEX_ID_KEYS = {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}


def _hex_ids_to_base64(value: Any) -> Any:
    """Rewrite OTLP-JSON hex ids into the base64 form the protobuf JSON parser expects (in place)."""
    if isinstance(value, dict):
        for key, item in list(value.items()):
            if key in _HEX_ID_KEYS and isinstance(item, str):
                try:
                    value[key] = base64.b64encode(bytes.fromhex(item)).decode("ascii")
                except ValueError as exc:
                    raise OTLPPayloadError(f"Field '{key}' is not a hex string: {item!r}") from exc
            else:
                _hex_ids_to_base64(item)
    elif isinstance(value, list):
        for item in value:
            _hex_ids_to_base64(item)
    return value


def parse_otlp_traces(
    body: bytes, content_type: str = PROTOBUF_CT, content_encoding: Optional[str] = None, limit: int = 0
) -> Any:
    """Decode an OTLP traces request body into an ``ExportTraceServiceRequest``.

    ``body`` is inflated first when ``content_encoding`` says so (never beyond ``limit`` bytes, see :func:`inflate`).
    Raises :class:`OTLPPayloadError` (or a subclass) with a descriptive message when the body cannot be decoded, or
    an OTLP JSON body holds a value outside the store's input domains (NUL, lone surrogate, non-finite number, nesting
    deeper than ``MAX_JSON_DEPTH``).
    """
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    if content_encoding:
        body = inflate(body, content_encoding, limit)
    message = ExportTraceServiceRequest()
    if not body:
        return message
    if content_type == JSON_CT:
        from google.protobuf import json_format

        try:
            data = json.loads(body)
        except RecursionError as exc:
            raise OTLPPayloadError(
                "Unable to parse OTLP traces payload: the JSON exceeds the maximum nesting depth"
            ) from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise OTLPPayloadError(f"Unable to parse OTLP traces payload: invalid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise OTLPPayloadError("Unable to parse OTLP traces payload: the JSON body must be an object")
        problem = find_problem(data)
        if problem is not None:
            raise OTLPPayloadError(f"Invalid OTLP traces payload: {problem[0]}: {problem[1]}")
        try:
            json_format.ParseDict(_hex_ids_to_base64(data), message, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise OTLPPayloadError(f"Unable to parse OTLP traces payload: {exc}") from exc
        return message
    from google.protobuf.message import DecodeError

    try:
        message.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise OTLPPayloadError(f"Unable to parse OTLP traces payload: {exc}") from exc
    return message


def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return None


def _attribute_value(value: Any) -> Any:
    """Make a decoded ``AnyValue`` fit the span ``Attributes`` type.

    Scalars and homogeneous scalar arrays are kept; key-value lists and mixed/nested arrays (which the span model
    cannot hold) are stored as their JSON text instead of failing the whole export.
    """
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=False, default=str)
    if isinstance(value, list):
        kinds = {type(item) for item in value}
        if len(kinds) > 1 or (kinds and not kinds <= {str, bool, int, float}):
            return json.dumps(value, default=str)
    return value


_SCALAR_KINDS = frozenset({"string_value", "bool_value", "int_value", "double_value"})


def _attributes(kvs: Any) -> Dict[str, Any]:
    result: Dict[str, Any] = {}
    for kv in kvs:
        value = kv.value
        if value.HasField("string_value"):  # by far the most common kind: one call instead of two
            result[kv.key] = value.string_value
            continue
        kind = value.WhichOneof("value")
        if kind in _SCALAR_KINDS:  # the other scalars, without the generic conversion below
            result[kv.key] = getattr(value, kind)
        else:
            result[kv.key] = _attribute_value(_any_value(value))
    return result


def _hex_id(raw: bytes, width: int) -> str:
    return raw.hex().rjust(width, "0") if raw else "0" * width


_STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _parse_sequence_id(value: Any) -> Optional[int]:
    if value is None:
        return None
    try:
        parsed = int(str(value))
    except ValueError:
        logger.warning("Ignoring unparseable span sequence id %r in OTLP payload", value)
        return None
    if parsed < 0:
        logger.error("Ignoring negative span sequence id %r in OTLP payload", value)
        return None
    if parsed > MAX_SEQUENCE_ID:
        logger.error("Ignoring span sequence id %r above %d in OTLP payload", value, MAX_SEQUENCE_ID)
        return None
    return parsed


def decode_spans(request: Any, rejected: Optional[List[str]] = None) -> Tuple[List[Span], List[bool]]:
    """Convert an ``ExportTraceServiceRequest`` into store spans and, per span, whether it still needs a sequence id.

    Spans without a rollout or attempt id are skipped. A span without a valid ``agentlightning.span_sequence_id``
    attribute (not an integer, negative, or above ``MAX_SEQUENCE_ID``) carries the placeholder ``sequence_id=0`` and
    the flag ``True``: the caller allocates its id (see :func:`spans_from_proto`, or
    ``LightningStore.add_many_spans_assigning_ids`` which allocates in the insert unit). A span holding a value outside
    the store's input domains (e.g. a NUL character in its name or an attribute), or an id of the wrong length (a trace
    id that is not 16 bytes, a span id that is not 8; empty ids stand for zeros), raises :class:`OTLPPayloadError` --
    or, when a ``rejected`` list is given, is left out and the reason appended to that list (once per span; a bad
    resource rejects all of its spans).
    """
    spans: List[Span] = []
    missing: List[bool] = []
    validate = _SPAN_VALIDATOR
    for resource_spans in request.resource_spans:
        resource_attrs = _attributes(resource_spans.resource.attributes)
        resource_rollout = resource_attrs.get(AGL_ROLLOUT_ID)
        resource_attempt = resource_attrs.get(AGL_ATTEMPT_ID)
        resource_seq = resource_attrs.get(AGL_SPAN_SEQUENCE_ID)
        resource = OtelResource(attributes=resource_attrs, schema_url=resource_spans.schema_url or "")
        problem = _domain_problem(resource, "resource", None)  # once: every span of this resource shares it
        if problem is not None:
            if rejected is None:
                raise OTLPPayloadError(problem)
            rejected.extend(problem for scope in resource_spans.scope_spans for _ in scope.spans)
            continue
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attrs = _attributes(span.attributes)
                rollout_id = attrs.get(AGL_ROLLOUT_ID, resource_rollout)
                attempt_id = attrs.get(AGL_ATTEMPT_ID, resource_attempt)
                if rollout_id is None or attempt_id is None:
                    logger.warning("Skipping OTLP span %r without rollout or attempt id", span.name)
                    continue
                problem = _id_problem(span)
                if problem is not None:
                    if rejected is None:
                        raise OTLPPayloadError(problem)
                    rejected.append(problem)
                    continue
                sequence_id = _parse_sequence_id(attrs.get(AGL_SPAN_SEQUENCE_ID, resource_seq))
                trace_id = _hex_id(span.trace_id, 32)
                span_id = _hex_id(span.span_id, 16)
                parent_span_id = span.parent_span_id
                status = span.status
                events = span.events
                links = span.links
                spans.append(
                    validate(
                        {
                            "rollout_id": str(rollout_id),
                            "attempt_id": str(attempt_id),
                            "sequence_id": 0 if sequence_id is None else sequence_id,
                            "trace_id": trace_id,
                            "span_id": span_id,
                            "parent_id": parent_span_id.hex().rjust(16, "0") if parent_span_id else None,
                            "name": span.name,
                            "status": TraceStatus(
                                status_code=_STATUS_CODES.get(int(status.code), "UNSET"),  # type: ignore[arg-type]
                                description=status.message or None,
                            ),
                            "attributes": attrs,
                            "events": [
                                Event(
                                    name=event.name,
                                    attributes=_attributes(event.attributes),
                                    timestamp=convert_timestamp(event.time_unix_nano),
                                )
                                for event in events
                            ]
                            if events
                            else [],
                            "links": [
                                Link(
                                    context=SpanContext(
                                        trace_id=_hex_id(link.trace_id, 32),
                                        span_id=_hex_id(link.span_id, 16),
                                        is_remote=False,
                                        trace_state={},
                                    ),
                                    attributes=_attributes(link.attributes) or None,
                                )
                                for link in links
                            ]
                            if links
                            else [],
                            "start_time": convert_timestamp(span.start_time_unix_nano),
                            "end_time": convert_timestamp(span.end_time_unix_nano),
                            "context": SpanContext(trace_id=trace_id, span_id=span_id, is_remote=False, trace_state={}),
                            "parent": None,
                            "resource": resource,
                        }
                    )
                )
                problem = _span_problem(spans[-1], span.name)
                if problem is not None:
                    if rejected is None:
                        raise OTLPPayloadError(problem)
                    spans.pop()
                    rejected.append(problem)
                    continue
                missing.append(sequence_id is None)
    return spans, missing


_SPAN_VALIDATOR = Span.__pydantic_validator__.validate_python

TRACE_ID_BYTES = 16
"""Length of an OTLP trace id (an empty one stands for all zeros)."""

SPAN_ID_BYTES = 8
"""Length of an OTLP span id (an empty one stands for all zeros; an empty parent span id for no parent)."""


def _id_problem(span: Any) -> Optional[str]:
    """Why an OTLP span's ids cannot be stored -- its trace id, span id or parent span id, or an id of one of its
    links, is neither empty nor of the OTLP length (16 bytes for trace ids, 8 for span ids) -- or ``None``."""
    problem = _id_length_problem(span.trace_id, span.span_id, "")
    parent = len(span.parent_span_id)
    if problem is None and parent and parent != SPAN_ID_BYTES:
        problem = f"parent_span_id has {parent} bytes, expected {SPAN_ID_BYTES}"
    if problem is None:
        for index, link in enumerate(span.links):
            problem = _id_length_problem(link.trace_id, link.span_id, f"links[{index}].")
            if problem is not None:
                break
    if problem is None:
        return None
    return f"Invalid OTLP span {span.name!r} (span_id {span.span_id.hex() or 'empty'}): {problem}"


def _id_length_problem(trace_id: bytes, span_id: bytes, prefix: str) -> Optional[str]:
    if trace_id and len(trace_id) != TRACE_ID_BYTES:
        return f"{prefix}trace_id has {len(trace_id)} bytes, expected {TRACE_ID_BYTES}"
    if span_id and len(span_id) != SPAN_ID_BYTES:
        return f"{prefix}span_id has {len(span_id)} bytes, expected {SPAN_ID_BYTES}"
    return None


_NUL = "\x00"


def _domain_problem(value: Any, field: str, span_name: Optional[str]) -> Optional[str]:
    """Why ``value`` (a part of a decoded span, or its resource when ``span_name`` is ``None``) lies outside the
    store's input domains, or ``None``."""
    problem = find_problem(value, field)
    if problem is None:
        return None
    where = "Invalid OTLP resource" if span_name is None else f"Invalid OTLP span {span_name!r}"
    return f"{where}: {problem[0]}: {problem[1]}"


def _span_problem(stored: Span, span_name: str) -> Optional[str]:
    """:func:`_domain_problem` of a decoded span's own parts (ids are hex; the shared resource is checked apart)."""
    name, description = stored.name, stored.status.description
    if _NUL in name or not name.isascii():
        problem = _domain_problem(name, "name", span_name)
        if problem is not None:
            return problem
    problem = _domain_problem(stored.attributes, "attributes", span_name)
    if problem is None and description and (_NUL in description or not description.isascii()):
        problem = _domain_problem(description, "status.description", span_name)
    if problem is None and (stored.events or stored.links):
        problem = _domain_problem([stored.events, stored.links], "events/links", span_name)
    return problem


async def spans_from_proto(request: Any, sequence_id_bulk_issuer: SequenceIdBulkIssuer) -> List[Span]:
    """Convert an ``ExportTraceServiceRequest`` into store spans (store.md 11.7).

    Spans without a rollout or attempt id are skipped; spans without a valid sequence id get one from a single call
    to ``sequence_id_bulk_issuer`` (made even when nothing is missing).
    """
    spans, missing = decode_spans(request)
    pairs = [(span.rollout_id, span.attempt_id) for span, needed in zip(spans, missing, strict=True) if needed]
    issued = list(await sequence_id_bulk_issuer(pairs))
    if len(issued) != len(pairs):
        raise RuntimeError(f"Sequence id issuer returned {len(issued)} ids for {len(pairs)} spans")
    issued_iter = iter(issued)
    for span, needed in zip(spans, missing, strict=True):
        if needed:
            span.sequence_id = next(issued_iter)
    return spans


# ---------------------------------------------------------------------------------------------------------------------
# HTTP handler
# ---------------------------------------------------------------------------------------------------------------------


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
    input domains are left out, their reasons appended to ``rejected``)."""
    parsed = parse_otlp_traces(body, content_type)
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
    """Handle an OTLP/HTTP traces export independently of the web framework (store.md 11.7).

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
# Client-side exporter
# ---------------------------------------------------------------------------------------------------------------------


def _exporter_base() -> type:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter


class LightningStoreOTLPExporter(_exporter_base()):  # type: ignore[misc]
    """OTLP/HTTP span exporter that sends spans to the store while a rollout attempt is active (store.md 11.7).

    ``enable_store_otlp(endpoint, rollout_id, attempt_id, api_token=None)`` redirects exports to the store and tags
    every span's resource with the rollout/attempt ids; ``disable_store_otlp()`` restores the original endpoint.
    Without ids, :meth:`export` succeeds without sending anything. ``api_token`` (or ``ROLLOUTHUB_API_TOKEN``) is sent
    as ``Authorization: Bearer <token>``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._original_endpoint: str = self._endpoint
        self._rollout_id: Optional[str] = None
        self._attempt_id: Optional[str] = None

    @property
    def endpoint(self) -> str:
        """The endpoint exports currently go to."""
        return str(self._endpoint)

    @property
    def rollout_id(self) -> Optional[str]:
        """The active rollout id, if any."""
        return self._rollout_id

    @property
    def attempt_id(self) -> Optional[str]:
        """The active attempt id, if any."""
        return self._attempt_id

    def _set_endpoint(self, endpoint: str) -> None:
        self._endpoint = endpoint
        client = getattr(self, "_client", None)
        if client is not None and hasattr(client, "_endpoint"):
            client._endpoint = endpoint

    def _set_auth(self, token: Optional[str]) -> None:
        client = getattr(self, "_client", None)
        headers = getattr(client, "_headers", None)
        if headers is None:
            return
        if token:
            headers["Authorization"] = f"Bearer {token}"
        else:
            headers.pop("Authorization", None)

    def enable_store_otlp(
        self, endpoint: str, rollout_id: str, attempt_id: str, api_token: Optional[str] = None
    ) -> None:
        """Send subsequent exports to ``endpoint`` tagged with the given rollout and attempt."""
        import os

        self._set_endpoint(endpoint)
        self._set_auth(api_token if api_token is not None else os.environ.get("ROLLOUTHUB_API_TOKEN"))
        self._rollout_id = rollout_id
        self._attempt_id = attempt_id

    def disable_store_otlp(self) -> None:
        """Forget the ids and restore the original endpoint."""
        self._rollout_id = None
        self._attempt_id = None
        self._set_endpoint(self._original_endpoint)
        self._set_auth(None)

    def should_bypass(self) -> bool:
        """Whether exports are skipped when no rollout/attempt is active (always True)."""
        return True

    def export(self, spans: Sequence[Any]) -> Any:
        """Export ``spans`` with the store ids merged into their resources (no-op success without ids)."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import SpanExportResult

        if self._rollout_id is None or self._attempt_id is None:
            if self.should_bypass():
                return SpanExportResult.SUCCESS
            return super().export(spans)
        extra = Resource({AGL_ROLLOUT_ID: self._rollout_id, AGL_ATTEMPT_ID: self._attempt_id})
        for span in spans:
            resource = getattr(span, "_resource", None)
            if resource is not None:
                span._resource = resource.merge(extra)
        return super().export(spans)
