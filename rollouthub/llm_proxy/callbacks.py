"""Callbacks of the native LLM-proxy engine: the counterparts of the reference's LiteLLM loggers.

A callback is a subclass of :class:`LLMProxyCallback`. Before a request is forwarded, every callback may rewrite
the upstream payload (:meth:`LLMProxyCallback.pre_call`); :class:`LightningOpenTelemetry` additionally records each
attributed call as OpenTelemetry spans and writes them to the store through its :class:`LightningSpanExporter`.

Aliases accepted by ``LLMProxy(callbacks=...)``: ``"return_token_ids"``, ``"logprobs"``, ``"opentelemetry"``.
LiteLLM ``CustomLogger`` classes are not supported (the native engine has no LiteLLM); subclass
:class:`LLMProxyCallback` instead.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, List, Optional, Sequence, Type, Union

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from .exporter import LightningSpanExporter
from .models import Deployment
from .spans import CallEncoder, TraceCollector

TRACER_NAME = "rollouthub.llm_proxy"
"""Instrumentation scope of the proxy's spans."""

__all__ = [
    "LLMProxyCallback",
    "AddReturnTokenIds",
    "AddLogprobs",
    "LightningOpenTelemetry",
    "CALLBACK_ALIASES",
    "resolve_callbacks",
    "initialize_llm_callbacks",
    "registered_llm_callbacks",
]

logger = logging.getLogger(__name__)

TOKEN_ID_ROUTES = ("chat", "completions")
"""Request kinds that accept vLLM's ``return_token_ids`` / ``logprobs`` extensions."""


class LLMProxyCallback:
    """Base class of native proxy callbacks (the equivalent of a LiteLLM ``CustomLogger``)."""

    def pre_call(self, payload: Dict[str, Any], *, kind: str, deployment: Deployment) -> Dict[str, Any]:
        """Return the payload to forward upstream (default: unchanged).

        Args:
            payload: the JSON body about to be sent upstream (already a private copy).
            kind: ``"chat"``, ``"completions"``, ``"responses"``, ``"embeddings"`` or ``"messages"``.
            deployment: the backend the request goes to.
        """
        return payload


class AddReturnTokenIds(LLMProxyCallback):
    """Ask OpenAI-compatible backends for token ids (``return_token_ids: true``; vLLM >= 0.10.2).

    Only chat and text completions are changed, and never for api.openai.com (it rejects unknown parameters).
    """

    def pre_call(self, payload: Dict[str, Any], *, kind: str, deployment: Deployment) -> Dict[str, Any]:
        """Add ``return_token_ids: True`` unless the request already sets it."""
        if kind in TOKEN_ID_ROUTES and not deployment.is_official_openai:
            payload.setdefault("return_token_ids", True)
        return payload


class AddLogprobs(LLMProxyCallback):
    """Ask OpenAI-compatible backends for log probabilities (``logprobs: 1``), same scope as token ids."""

    def pre_call(self, payload: Dict[str, Any], *, kind: str, deployment: Deployment) -> Dict[str, Any]:
        """Add ``logprobs: 1`` unless the request already sets it."""
        if kind in TOKEN_ID_ROUTES and not deployment.is_official_openai:
            payload.setdefault("logprobs", 1)
        return payload


class LightningOpenTelemetry(LLMProxyCallback):
    """Record proxied calls as OpenTelemetry spans and write them to the store.

    The spans come from a *private* ``TracerProvider`` (never installed globally), so the proxy does not conflict
    with agent-side tracers even in the ``thread`` and ``asyncio`` launch modes. Writes go through
    :attr:`exporter` (a :class:`LightningSpanExporter`).
    """

    def __init__(self) -> None:
        """Create the private tracer provider and the exporter."""
        self.tracer_provider = TracerProvider(resource=Resource.create({"service.name": "rollouthub-llm-proxy"}))
        self.collector = TraceCollector()
        self.tracer_provider.add_span_processor(self.collector)
        self.exporter = LightningSpanExporter()
        self.encoder = CallEncoder(self.tracer_provider.resource, TRACER_NAME)

    @property
    def tracer(self) -> trace_api.Tracer:
        """The tracer the engine records spans with."""
        return self.tracer_provider.get_tracer(TRACER_NAME)

    def shutdown(self) -> None:
        """Stop the exporter's private loop."""
        self.exporter.shutdown()


CALLBACK_ALIASES: Dict[str, Type[LLMProxyCallback]] = {
    "return_token_ids": AddReturnTokenIds,
    "logprobs": AddLogprobs,
    "opentelemetry": LightningOpenTelemetry,
}
"""Alias → callback class."""

DEFAULT_CALLBACKS: List[str] = ["return_token_ids", "opentelemetry"]


def resolve_callbacks(
    callbacks: Optional[Sequence[Union[str, Type[LLMProxyCallback]]]],
) -> List[Type[LLMProxyCallback]]:
    """Resolve aliases and validate classes (``ValueError`` for unknown aliases or foreign classes)."""
    specs = list(DEFAULT_CALLBACKS if callbacks is None else callbacks)
    resolved: List[Type[LLMProxyCallback]] = []
    for spec in specs:
        if isinstance(spec, str):
            if spec not in CALLBACK_ALIASES:
                raise ValueError(
                    f"Unknown LLM proxy callback alias {spec!r}. Valid aliases: {', '.join(sorted(CALLBACK_ALIASES))}."
                )
            cls = CALLBACK_ALIASES[spec]
        elif isinstance(spec, type) and issubclass(spec, LLMProxyCallback):
            cls = spec
        elif isinstance(spec, type):
            raise ValueError(
                f"Callback class {spec.__module__}.{spec.__qualname__} is not supported: the native LLM proxy has no "
                "LiteLLM, so LiteLLM CustomLogger classes cannot be used. Subclass "
                "rollouthub.llm_proxy.LLMProxyCallback or use one of the aliases "
                f"{', '.join(sorted(CALLBACK_ALIASES))}."
            )
        else:
            raise ValueError(f"Callbacks must be aliases or LLMProxyCallback subclasses, got {spec!r}.")
        if cls not in resolved:
            resolved.append(cls)
    return resolved


_registry_lock = threading.Lock()
_registered: Optional[List[LLMProxyCallback]] = None


def initialize_llm_callbacks(classes: Sequence[Type[LLMProxyCallback]]) -> bool:
    """Register one instance per callback class in this process.

    The first call instantiates the classes and remembers the list (returns True). Later calls (restarts) only
    add instances of classes not registered yet and return False, so repeated restarts never accumulate callbacks.
    """
    global _registered
    with _registry_lock:
        first = _registered is None
        registered = [] if _registered is None else _registered
        for cls in classes:
            if not any(type(instance) is cls for instance in registered):
                registered.append(cls())
        _registered = registered
        return first


def registered_llm_callbacks(classes: Sequence[Type[LLMProxyCallback]]) -> List[LLMProxyCallback]:
    """The registered instances of ``classes``, in that order (registering missing ones first)."""
    initialize_llm_callbacks(classes)
    with _registry_lock:
        registered = list(_registered or [])
    return [next(instance for instance in registered if type(instance) is cls) for cls in classes]
