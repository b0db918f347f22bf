"""AgentOps patches: keep AgentOps local (and quiet), and add token ids to its OpenAI chat spans.

What :func:`instrument_agentops` patches (each patch point is optional: a missing one is skipped with a debug log,
so other AgentOps versions degrade instead of failing):

* **No traffic to the hosted AgentOps service** unless :func:`enable_agentops_service` turned it on: AgentOps'
  span exporter (``AuthenticatedOTLPExporter``) drops its batches, the metric exporter AgentOps builds
  (``agentops.sdk.core.OTLPMetricExporter``) drops its data, the V3 API client's auth call returns a dummy token
  (``token="dummy"``, ``project_id="dummy"``) and the V4 API client's ``post`` (log-file and object uploads)
  answers an empty 200. Each class is replaced, in every AgentOps module that binds it, by a subclass: the
  instances ``agentops.init()`` creates while patched stay local for the life of the process (AgentOps flushes its
  exporter at exit, after :func:`uninstrument_agentops`). An AgentOps client initialised before the patch keeps
  the original classes.
* **Token ids**: AgentOps' OpenAI chat attribute extraction (``handle_chat_attributes``, looked up by its chat
  wrappers at call time) is wrapped so that non-streaming chat spans also carry ``prompt_token_ids``,
  ``response_token_ids`` and ``logprobs.content``/``logprobs.refusal`` (same rules as
  :mod:`rollouthub.instrumentation.openai`).

* **Quiet when local**: :func:`agentops_init_options` gives the options :class:`~rollouthub.tracer.AgentOpsTracer`
  passes to ``agentops.init()`` while the hosted service is disabled -- no "Session Replay" links to
  app.agentops.ai (``log_session_replay_url=False``), AgentOps' console logger at ``ERROR`` (its warnings are about
  its own wrappers, e.g. streaming wrappers the installed OpenAI SDK lacks; ``AGENTOPS_LOG_LEVEL`` still overrides)
  and no ``agentops.log`` file in the working directory (``AGENTOPS_LOGGING_TO_FILE=false`` unless set). These are
  AgentOps' public options; nothing of its logging is patched.

Spans reach the store through the store-aware OTLP processor that :class:`~rollouthub.tracer.AgentOpsTracer` adds
to AgentOps' tracer provider, not through AgentOps' own exporter (deviation from the reference, whose replaced
AgentOps exporter classes are the store path; see docs/runtime.md). Requires the optional ``agentops`` extra.
"""

from __future__ import annotations

import functools
import importlib
import io
import logging
import os
from typing import Any, Callable, Dict, Sequence, Tuple

__all__ = [
    "instrument_agentops",
    "uninstrument_agentops",
    "enable_agentops_service",
    "agentops_service_enabled",
    "agentops_init_options",
]

logger = logging.getLogger(__name__)

_service_enabled = False
_originals: Dict[Tuple[Any, str], Any] = {}
"""``(module, name)`` -> the value :func:`instrument_agentops` replaced there."""

_CHAT_ATTRIBUTE_MODULES = (
    "agentops.instrumentation.providers.openai.stream_wrapper",
    "agentops.instrumentation.providers.openai.wrappers.chat",
    "agentops.instrumentation.providers.openai.wrappers",
)
"""Modules binding ``handle_chat_attributes``; the chat wrappers look the name up in ``stream_wrapper``."""

_API_CLIENT_MODULES = ("agentops.client.api", "agentops.client.api.versions")
"""Modules binding the V3/V4 API client classes (``ApiClient`` instantiates them from ``agentops.client.api``)."""


def enable_agentops_service(enabled: bool = True) -> None:
    """Allow (``True``) or block (``False``, default) traffic to the hosted AgentOps service."""
    global _service_enabled
    _service_enabled = enabled


def agentops_service_enabled() -> bool:
    """Whether traffic to the hosted AgentOps service is allowed (see :func:`enable_agentops_service`)."""
    return _service_enabled


def agentops_init_options() -> Dict[str, Any]:
    """Keyword arguments for ``agentops.init()`` that keep AgentOps quiet while it runs local (see the module
    docstring); empty when the hosted service is enabled. Sets ``AGENTOPS_LOGGING_TO_FILE=false`` unless set."""
    if _service_enabled:
        return {}
    os.environ.setdefault("AGENTOPS_LOGGING_TO_FILE", "false")
    return {"log_session_replay_url": False, "log_level": "ERROR"}


def _replace(module_names: Sequence[str], name: str, make: Callable[[Any], Any]) -> bool:
    """Bind ``make(original)`` to ``name`` in every module of ``module_names`` that binds the same original.

    AgentOps modules import each other's names (``from agentops.sdk.exporters import AuthenticatedOTLPExporter``),
    so a class or function must be replaced in every module that looks it up. Classes are replaced by subclasses,
    so instances created while patched keep their local behaviour after :func:`uninstrument_agentops`, as in the
    reference. Returns whether ``name`` was found.
    """
    original: Any = None
    replacement: Any = None
    for module_name in module_names:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            logger.debug("AgentOps module %s not found: %s", module_name, exc)
            continue
        if (module, name) in _originals:  # already patched (instrument_agentops called twice)
            if original is None:
                original, replacement = _originals[(module, name)], getattr(module, name)
            continue
        current = getattr(module, name, None)
        if current is None:
            continue
        if original is None:
            original, replacement = current, make(current)
        if current is original:
            _originals[(module, name)] = original
            setattr(module, name, replacement)
    if original is None:
        logger.debug("AgentOps patch point %s not found in %s.", name, ", ".join(module_names))
    return original is not None


def _bypassable_span_exporter(original: type) -> type:
    class BypassableSpanExporter(original):  # type: ignore[misc, valid-type]
        """AgentOps' span exporter that drops its batches while the hosted service is disabled."""

        def export(self, spans: Any) -> Any:
            if _service_enabled:
                return super().export(spans)
            from opentelemetry.sdk.trace.export import SpanExportResult

            return SpanExportResult.SUCCESS

    return BypassableSpanExporter


def _bypassable_metric_exporter(original: type) -> type:
    class BypassableMetricExporter(original):  # type: ignore[misc, valid-type]
        """AgentOps' OTLP metric exporter that sends nothing while the hosted service is disabled."""

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
            if _service_enabled:
                return super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            from opentelemetry.sdk.metrics.export import MetricExportResult

            return MetricExportResult.SUCCESS

    return BypassableMetricExporter


def _dummy_auth_client(original: type) -> type:
    class DummyAuthClient(original):  # type: ignore[misc, valid-type]
        """AgentOps' V3 API client whose auth call returns a dummy token while the hosted service is disabled."""

        async def fetch_auth_token(self, api_key: str) -> Any:
            if _service_enabled:
                return await super().fetch_auth_token(api_key)
            return {"token": "dummy", "project_id": "dummy"}

    return DummyAuthClient


def _local_upload_client(original: type) -> type:
    class LocalUploadClient(original):  # type: ignore[misc, valid-type]
        """AgentOps' V4 API client whose ``post`` answers an empty 200 while the hosted service is disabled."""

        def post(self, path: str, body: Any, headers: Any = None) -> Any:
            if _service_enabled:
                return super().post(path, body, headers)
            import requests

            response = requests.Response()
            response.status_code = 200
            response.raw = io.BytesIO(b"{}")
            response.headers["Content-Type"] = "application/json"
            return response

    return LocalUploadClient


def _with_token_ids(original: Callable[..., Dict[str, Any]]) -> Callable[..., Dict[str, Any]]:
    from .openai import chat_token_id_attributes

    @functools.wraps(original)
    def handle_chat_attributes(
        args: Any = None, kwargs: Any = None, return_value: Any = None, span: Any = None
    ) -> Dict[str, Any]:
        attributes = original(args=args, kwargs=kwargs, return_value=return_value, span=span)
        if return_value is not None:
            try:
                attributes.update(chat_token_id_attributes(return_value))
            except Exception:  # never break the user's LLM call for an extra attribute
                logger.debug("Could not extract token ids from the chat response.", exc_info=True)
        return attributes

    return handle_chat_attributes


def instrument_agentops() -> bool:
    """Apply the patches of the module docstring; returns whether AgentOps' span exporter could be bypassed."""
    try:
        import agentops  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "instrument_agentops requires the 'agentops' package: pip install 'rollouthub[agentops]'"
        ) from exc
    exporter = _replace(
        ("agentops.sdk.exporters", "agentops.sdk.core"), "AuthenticatedOTLPExporter", _bypassable_span_exporter
    )
    _replace(("agentops.sdk.core",), "OTLPMetricExporter", _bypassable_metric_exporter)
    _replace(_API_CLIENT_MODULES + ("agentops.client.api.versions.v3",), "V3Client", _dummy_auth_client)
    _replace(_API_CLIENT_MODULES + ("agentops.client.api.versions.v4",), "V4Client", _local_upload_client)
    token_ids = _replace(_CHAT_ATTRIBUTE_MODULES, "handle_chat_attributes", _with_token_ids)
    if not exporter:
        logger.warning("AgentOps' span exporter was not found; it may send spans to the hosted AgentOps service.")
    if not token_ids:
        logger.warning("AgentOps' OpenAI chat attribute extraction was not found; spans will carry no token ids.")
    return exporter


def uninstrument_agentops() -> None:
    """Restore every AgentOps attribute replaced by :func:`instrument_agentops`."""
    for (module, name), original in list(_originals.items()):
        setattr(module, name, original)
    _originals.clear()
