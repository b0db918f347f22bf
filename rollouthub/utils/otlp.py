"""OTLP on the client side: the span exporter that sends a rollout attempt's spans to the store server.

The server side of ``POST /v1/traces`` -- bounded decompression, decoding, the input-domain and id checks, the
responses -- lives with the store server: :mod:`rollouthub.store.server.otlp` (the route and the HTTP answers) and
:mod:`rollouthub.store.server.otlp_decode` (payload to store spans). This module imports nothing from the store; the
server-side names the reference exports from here (``handle_otlp_export``, ``spans_from_proto``, ``PROTOBUF_CT``) are
resolved from the server package on first access (compatibility aliases, never used inside the project).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from rollouthub.semconv import LightningResourceAttributes

__all__ = ["AGL_ROLLOUT_ID", "AGL_ATTEMPT_ID", "LightningStoreOTLPExporter"]
# Also available (resolved on first access, see the module docstring): handle_otlp_export, spans_from_proto,
# PROTOBUF_CT.

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


def _exporter_base() -> type:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter


class LightningStoreOTLPExporter(_exporter_base()):  # type: ignore[misc]
    """OTLP/HTTP span exporter that sends spans to the store while a rollout attempt is active.

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
        ids = {AGL_ROLLOUT_ID: self._rollout_id, AGL_ATTEMPT_ID: self._attempt_id}
        extra: Optional[Resource] = None
        # Spans of one provider share one resource object: merge once per distinct resource of the batch, and not
        # at all when the resource already names this rollout and attempt (the tracer sets them on its provider).
        merged: Dict[int, Tuple[Any, Any]] = {}
        for span in spans:
            resource = getattr(span, "_resource", None)
            if resource is None:
                continue
            known = merged.get(id(resource))
            if known is None:
                attributes = resource.attributes
                if all(attributes.get(key) == value for key, value in ids.items()):
                    target = resource
                else:
                    extra = extra or Resource(ids)
                    target = resource.merge(extra)
                known = merged[id(resource)] = (resource, target)
            if known[1] is not resource:
                span._resource = known[1]
        return super().export(spans)
