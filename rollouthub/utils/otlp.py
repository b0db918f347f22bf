"""OTLP on the client side: the span exporter that sends a rollout attempt's spans to the store server.

The server side of ``POST /v1/traces`` -- bounded decompression, decoding, the input-domain and id checks, the
responses -- lives with the store server: :mod:`rollouthub.store.server.otlp` (the route and the HTTP answers) and
:mod:`rollouthub.store.server.otlp_decode` (payload to store spans). This module imports nothing from the store; the
server-side names the reference exports from here (``handle_otlp_export``, ``spans_from_proto``, ``PROTOBUF_CT``) are
resolved from the server package on first access (compatibility aliases, never used inside the project).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from rollouthub.semconv import LightningResourceAttributes

__all__ = [
    "AGL_ROLLOUT_ID",
    "AGL_ATTEMPT_ID",
    "LightningStoreOTLPExporter",
    "StoreOTLPSender",
    "encode_otlp_traces",
    "stamp_resource_attributes",
]
# Also available (resolved on first access, see the module docstring): handle_otlp_export, spans_from_proto,
# PROTOBUF_CT.

logger = logging.getLogger(__name__)

AGL_ROLLOUT_ID = LightningResourceAttributes.ROLLOUT_ID.value
"""Resource attribute naming the rollout the exported spans belong to."""

AGL_ATTEMPT_ID = LightningResourceAttributes.ATTEMPT_ID.value
"""Resource attribute naming the attempt the exported spans belong to."""


def __getattr__(name: str) -> Any:
    """The reference's server-side names of this module -- ``spans_from_proto`` and ``PROTOBUF_CT`` (now in
    :mod:`rollouthub.store.server.otlp_decode`), ``handle_otlp_export`` (in :mod:`rollouthub.store.server.otlp`) --
    imported on first access. The one import from this package into the store, allowed by the layering test."""
    if name == "spans_from_proto" or name == "PROTOBUF_CT":
        from rollouthub.store.server import otlp_decode

        return getattr(otlp_decode, name)
    if name == "handle_otlp_export":
        from rollouthub.store.server.otlp import handle_otlp_export

        return handle_otlp_export
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------------------------------
# Client-side exporter
# ---------------------------------------------------------------------------------------------------------------------

PROTOBUF_CONTENT_TYPE = "application/x-protobuf"

DEFAULT_EXPORT_TIMEOUT_SECONDS = 10.0
"""Time limit of one OTLP request to the store (connect and read), unless the exporter is given ``timeout``."""

EXPORT_RETRY_STATUSES = (429, 502, 503, 504)
"""Answers after which an OTLP request to the store is sent again (with a short backoff, at most three times)."""


def stamp_resource_attributes(request: Any, attributes: Mapping[str, Union[str, int]]) -> None:
    """Set ``attributes`` on the resource of every ``ResourceSpans`` of the OTLP ``request`` (an
    ``ExportTraceServiceRequest``), replacing values of the same keys (what ``Resource.merge`` does to SDK
    resources), in place. Strings become ``string_value``s, integers ``int_value``s."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    def any_value(value: Union[str, int]) -> Any:
        return AnyValue(string_value=value) if isinstance(value, str) else AnyValue(int_value=value)

    for resource_spans in request.resource_spans:
        present = resource_spans.resource.attributes
        pending = dict(attributes)
        for key_value in present:
            if key_value.key in pending:
                key_value.value.CopyFrom(any_value(pending.pop(key_value.key)))
        present.extend(KeyValue(key=key, value=any_value(value)) for key, value in pending.items())


def encode_otlp_traces(spans: Sequence[Any], resource_attributes: Mapping[str, Union[str, int]]) -> bytes:
    """The OTLP/HTTP protobuf body carrying the SDK ``spans``, with ``resource_attributes`` set on their resources
    (the spans themselves are not changed)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    request = encode_spans(spans)
    stamp_resource_attributes(request, resource_attributes)
    return bytes(request.SerializeToString())


class StoreOTLPSender:
    """POSTs OTLP bodies to the store over kept-alive connections (``urllib3``'s pool manager: thread-safe, one
    connection per store host reused across batches), sending again after a failed connect or a
    :data:`EXPORT_RETRY_STATUSES` answer (three times at most, short backoff, ``Retry-After`` not waited for so an
    export stays bounded) and once after a lost answer (the store skips spans it already holds)."""

    def __init__(self, timeout: float = DEFAULT_EXPORT_TIMEOUT_SECONDS) -> None:
        """Create the pool manager; ``timeout`` bounds each connect and each read (seconds)."""
        import urllib3

        retries = urllib3.Retry(
            total=3,
            read=1,  # once more after the answer was lost (e.g. a kept-alive connection closed as it was reused):
            # the store may have stored the batch already, and skips the spans it has (same rollout, attempt, span id)
            backoff_factor=0.1,
            status_forcelist=EXPORT_RETRY_STATUSES,
            allowed_methods=None,
            respect_retry_after_header=False,
            raise_on_status=False,
        )
        self._pool = urllib3.PoolManager(num_pools=4, maxsize=1, retries=retries, timeout=timeout)

    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Tuple[Optional[int], bytes, str]:
        """(status, body, reason) of POSTing ``body`` to ``url``; status ``None`` with the error's text as the reason
        when no answer came."""
        import urllib3

        try:
            response = self._pool.request("POST", url, body=body, headers=dict(headers))
        except urllib3.exceptions.HTTPError as exc:
            return None, b"", str(exc)
        return response.status, response.data, response.reason or ""

    def close(self) -> None:
        """Close the kept-alive connections."""
        self._pool.clear()


def _default_endpoint(endpoint: Optional[str]) -> str:
    """The collector endpoint a plain OTLP/HTTP span exporter sends to: ``endpoint``, else
    ``$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``$OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``, else
    ``http://localhost:4318/v1/traces`` (OpenTelemetry's documented environment variables)."""
    import os

    if endpoint:
        return endpoint
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if traces:
        return traces
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
    return base.rstrip("/") + "/v1/traces"


def _exporter_base() -> type:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter


class LightningStoreOTLPExporter(_exporter_base()):  # type: ignore[misc]
    """OTLP/HTTP span exporter that sends spans to the store while a rollout attempt is active.

    ``enable_store_otlp(endpoint, rollout_id, attempt_id, api_token=None)`` sends subsequent exports to the store's
    ``endpoint`` with the rollout/attempt ids set on every span's resource; ``disable_store_otlp()`` forgets them.
    ``api_token`` (or ``ROLLOUTHUB_API_TOKEN``) is sent as ``Authorization: Bearer <token>``. Without ids,
    :meth:`export` succeeds without sending anything when :meth:`should_bypass` says so (always, in this class),
    and otherwise exports like the OpenTelemetry exporter it extends, to the endpoint it was built with.

    Store exports encode the batch once (OpenTelemetry's protobuf encoder), set the ids on the encoded resources
    (the SDK spans are not touched) and POST it over a kept-alive connection (:class:`StoreOTLPSender`); the
    constructor's ``timeout`` (seconds, default 10) bounds each request. A batch whose answer was lost is sent once
    more; the store keeps one copy of each span (its identity is rollout, attempt and span id).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Take the OpenTelemetry ``OTLPSpanExporter``'s arguments (used when exporting outside the store)."""
        super().__init__(*args, **kwargs)
        self._default_endpoint = _default_endpoint(kwargs.get("endpoint") or (args[0] if args else None))
        timeout = kwargs.get("timeout")
        self._store_sender = StoreOTLPSender(float(timeout) if timeout else DEFAULT_EXPORT_TIMEOUT_SECONDS)
        self._store_endpoint: Optional[str] = None
        self._store_headers: Dict[str, str] = {}
        self._rollout_id: Optional[str] = None
        self._attempt_id: Optional[str] = None
        self._store_closed = False

    @property
    def endpoint(self) -> str:
        """The endpoint exports currently go to: the store's while a rollout attempt is active."""
        return self._store_endpoint or self._default_endpoint

    @property
    def rollout_id(self) -> Optional[str]:
        """The active rollout id, if any."""
        return self._rollout_id

    @property
    def attempt_id(self) -> Optional[str]:
        """The active attempt id, if any."""
        return self._attempt_id

    def enable_store_otlp(
        self, endpoint: str, rollout_id: str, attempt_id: str, api_token: Optional[str] = None
    ) -> None:
        """Send subsequent exports to ``endpoint`` tagged with the given rollout and attempt."""
        import os

        token = api_token if api_token is not None else os.environ.get("ROLLOUTHUB_API_TOKEN")
        self._store_headers = {"Content-Type": PROTOBUF_CONTENT_TYPE}
        if token:
            self._store_headers["Authorization"] = f"Bearer {token}"
        self._store_endpoint = endpoint
        self._rollout_id = rollout_id
        self._attempt_id = attempt_id

    def disable_store_otlp(self) -> None:
        """Forget the ids; exports go to the exporter's own endpoint again (or are bypassed)."""
        self._rollout_id = None
        self._attempt_id = None
        self._store_endpoint = None
        self._store_headers = {}

    def should_bypass(self) -> bool:
        """Whether exports are skipped when no rollout/attempt is active (always True)."""
        return True

    def export(self, spans: Sequence[Any]) -> Any:
        """Export ``spans`` to the store with its ids set on their resources (no-op success without ids)."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        endpoint, rollout_id, attempt_id = self._store_endpoint, self._rollout_id, self._attempt_id
        if endpoint is None or rollout_id is None or attempt_id is None:
            if self.should_bypass():
                return SpanExportResult.SUCCESS
            return super().export(spans)
        if self._store_closed:
            logger.warning("OTLP export of %d span(s) after the exporter was shut down: not sent.", len(spans))
            return SpanExportResult.FAILURE
        body = encode_otlp_traces(spans, {AGL_ROLLOUT_ID: rollout_id, AGL_ATTEMPT_ID: attempt_id})
        status, answer, reason = self._store_sender.post(endpoint, body, self._store_headers)
        if status != 200:
            logger.warning(
                "OTLP export of %d span(s) to %s failed: %s %s", len(spans), endpoint, status or "no answer", reason
            )
            return SpanExportResult.FAILURE
        _log_partial_success(answer, endpoint)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Close the store connections, then shut the OpenTelemetry exporter down."""
        self._store_closed = True
        self._store_sender.close()
        super().shutdown()


def _log_partial_success(answer: bytes, endpoint: str) -> None:
    """Warn when the store's OTLP answer says it rejected spans (``partial_success``)."""
    if not answer:
        return
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    try:
        partial = ExportTraceServiceResponse.FromString(answer).partial_success
    except Exception:  # noqa: BLE001 - an unreadable answer to an accepted request is only worth a debug line
        logger.debug("Unreadable OTLP answer from %s", endpoint)
        return
    if partial.rejected_spans:
        logger.warning(
            "The store at %s rejected %d span(s): %s", endpoint, partial.rejected_spans, partial.error_message
        )
