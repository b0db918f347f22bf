"""From an OTLP/HTTP trace export to store spans: bounded decompression, decoding, and the checks that keep every
stored span inside what every backend can hold.

* Bodies may be compressed (``Content-Encoding: gzip`` or ``deflate``); they are inflated incrementally and never
  beyond the server's body limit (:func:`inflate`: :class:`OTLPPayloadTooLarge` above it,
  :class:`OTLPUnsupportedEncoding` for another encoding), in slices that let the event loop serve other requests in
  between (:func:`inflate_async`).
* :func:`parse_otlp_traces` reads ``application/x-protobuf`` (primary, as the reference) and -- an extension -- OTLP
  JSON (``application/json``, hex trace/span ids as in the OTLP specification); anything undecodable is an
  :class:`OTLPPayloadError` naming the problem.
* :func:`decode_spans` converts the request into store spans. A span must lie in the store's input domains
  (:mod:`rollouthub.store.domains`: no NUL characters or lone surrogates in any text, bounded JSON nesting) and carry
  ids of the OTLP lengths (16-byte trace ids, 8-byte span ids; empty ids stand for zeros); one that does not is
  rejected with a reason naming it.

The HTTP route and its answers are in :mod:`rollouthub.store.server.otlp`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import weakref
import zlib
from typing import Any, Awaitable, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from rollouthub.semconv import LightningResourceAttributes
from rollouthub.types import Event, Link, OtelResource, Span, SpanContext, TraceStatus, convert_timestamp

from ..domains import MAX_SEQUENCE_ID, find_problem

__all__ = [
    "PROTOBUF_CT",
    "JSON_CT",
    "OTLPPayloadError",
    "OTLPPayloadTooLarge",
    "OTLPUnsupportedEncoding",
    "SequenceIdBulkIssuer",
    "AssigningSpanSink",
    "INFLATE_SLICE_BYTES",
    "SUPPORTED_ENCODINGS",
    "TRACE_ID_BYTES",
    "SPAN_ID_BYTES",
    "inflate",
    "inflate_async",
    "parse_otlp_traces",
    "decode_spans",
    "spans_from_proto",
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


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


def _undecodable_id(span: Dict[str, Any]) -> Optional[str]:
    """The first id of an OTLP JSON span, or of one of its links, that is not a hex string (an odd number of digits,
    or other characters), described; ``None`` when there is none."""
    links = span.get("links")
    holders = [("", span)]
    if isinstance(links, list):
        holders += [(f"links[{index}].", link) for index, link in enumerate(links) if isinstance(link, dict)]
    for prefix, holder in holders:
        for key in _HEX_ID_KEYS:
            value = holder.get(key)
            if isinstance(value, str) and not _is_hex(value):
                return f"{prefix}{key} is not a hex string: {value!r}"
    return None


def _dicts_under(value: Any, *keys: str) -> List[Dict[str, Any]]:
    """The objects of the list at the first of ``keys`` present in ``value`` (an OTLP JSON object)."""
    if not isinstance(value, dict):
        return []
    items = next((value[key] for key in keys if key in value), None)
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _drop_spans_with_undecodable_ids(data: Dict[str, Any], rejected: List[str]) -> None:
    """Leave out of an OTLP JSON export (in place) the spans with an id that is not a hex string, appending to
    ``rejected`` a reason naming each; ids of the wrong length are :func:`decode_spans`' to reject, as for protobuf."""
    for resource_spans in _dicts_under(data, "resourceSpans", "resource_spans"):
        for scope_spans in _dicts_under(resource_spans, "scopeSpans", "scope_spans"):
            spans = scope_spans.get("spans")
            if not isinstance(spans, list):
                continue
            kept = []
            for span in spans:
                problem = _undecodable_id(span) if isinstance(span, dict) else None
                if problem is None:
                    kept.append(span)
                else:
                    rejected.append(f"Invalid OTLP span {span.get('name')!r}: {problem}")
            scope_spans["spans"] = kept


def parse_otlp_traces(
    body: bytes,
    content_type: str = PROTOBUF_CT,
    content_encoding: Optional[str] = None,
    limit: int = 0,
    rejected: Optional[List[str]] = None,
) -> Any:
    """Decode an OTLP traces request body into an ``ExportTraceServiceRequest``.

    ``body`` is inflated first when ``content_encoding`` says so (never beyond ``limit`` bytes, see :func:`inflate`).
    Raises :class:`OTLPPayloadError` (or a subclass) with a descriptive message when the body cannot be decoded, or
    an OTLP JSON body holds a value outside the store's input domains (NUL, lone surrogate, non-finite number, nesting
    deeper than ``MAX_JSON_DEPTH``). With a ``rejected`` list, an OTLP JSON span whose id is not a hex string is left
    out and the reason appended to that list instead.
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
        if rejected is not None:
            _drop_spans_with_undecodable_ids(data, rejected)
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
    """Convert an ``ExportTraceServiceRequest`` into store spans.

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
