"""``AgentOpsTracer``: the AgentOps SDK as a local auto-instrumentation layer (extra ``agentops``).

When the ``agentops`` package is not installed, the tracer falls back (documented deviation) to a plain
:class:`~rollouthub.tracer.otel.OtelTracer` whose OpenAI calls are traced by the native instrumentation of
:mod:`rollouthub.instrumentation.openai` (applied by ``instrument_all`` when ``instrument_managed``), and says once
per process how to install the extra (``pip install 'rollouthub[agentops]'``): a warning when the user chose this
tracer, a debug line for the Trainer's default tracer.
"""

from __future__ import annotations

import logging
import os
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterator, List, Optional

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import TracerProvider

from rollouthub.utils.log_once import log_once

from .base import with_active_tracer_context
from .otel import LightningSpanProcessor, OtelTracer, get_span_processors_of
from .otlp_export import StoreOTLPSpanProcessor

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

__all__ = ["AgentOpsTracer", "AGENTOPS_MISSING_MESSAGE"]

logger = logging.getLogger(__name__)

AGENTOPS_MISSING_MESSAGE = (
    "agentops is not installed: AgentOpsTracer falls back to OtelTracer with rollouthub's native OpenAI "
    "instrumentation. Install the extra with `pip install 'rollouthub[agentops]'` for AgentOps auto-instrumentation."
)


def _agentops_installed() -> bool:
    from rollouthub.instrumentation import AGENTOPS_INSTALLED

    return AGENTOPS_INSTALLED


class AgentOpsTracer(OtelTracer):
    """Tracer that uses the AgentOps SDK locally to auto-instrument LLM and agent libraries.

    Args:
        agentops_managed: initialise the AgentOps client (with a dummy API key; the hosted service is bypassed).
        instrument_managed: apply (and later remove) ``instrument_all()`` patches.
        daemon: kept for compatibility; no effect.
        fallback_warning: when AgentOps is missing, say so with a warning (once per process); ``False`` makes it a
            debug line -- the Trainer's default tracer, which nobody asked to be AgentOps, passes ``False``.
    """

    def __init__(
        self,
        *,
        agentops_managed: bool = True,
        instrument_managed: bool = True,
        daemon: bool = True,
        fallback_warning: bool = True,
    ) -> None:
        """Create the tracer (nothing is initialised before :meth:`init_worker`)."""
        # OpenAI is instrumented by instrument_all() (AgentOps', or the native one in fallback mode), not by OtelTracer.
        super().__init__(instrument_openai=False)
        self.agentops_managed = agentops_managed
        self.instrument_managed = instrument_managed
        self.daemon = daemon
        self.fallback_warning = fallback_warning
        self._fallback = False
        if not agentops_managed:
            logger.warning("agentops_managed=False: you must initialise AgentOps yourself.")
        if not instrument_managed:
            logger.warning("instrument_managed=False: you must apply the instrumentation yourself.")

    @property
    def is_fallback(self) -> bool:
        """True when running without the AgentOps SDK (plain OTel + native OpenAI instrumentation)."""
        return self._fallback

    def preload(self) -> None:
        """Import what :meth:`init_worker` needs (the OTLP exporter; with ``instrument_managed`` the OpenAI SDK and,
        when installed, AgentOps), initialising nothing (see :meth:`Tracer.preload`)."""
        super().preload()
        if self.instrument_managed:
            from rollouthub.instrumentation import preload_instrumentation

            preload_instrumentation(agentops=True)

    def instrument(self, worker_id: int) -> None:
        """Apply every available instrumentation (``instrument_all``)."""
        from rollouthub.instrumentation import instrument_all

        instrument_all()

    def uninstrument(self, worker_id: int) -> None:
        """Remove the instrumentation applied by :meth:`instrument`."""
        from rollouthub.instrumentation import uninstrument_all

        uninstrument_all()

    def _initialize_tracer_provider(self, worker_id: int) -> None:
        if self._tracer_provider is not None:
            return
        if self.instrument_managed:
            self.instrument(worker_id)
        if not _agentops_installed():
            level = logging.WARNING if self.fallback_warning else logging.DEBUG
            log_once(logger, level, f"tracer.agentops.fallback.{level}", AGENTOPS_MISSING_MESSAGE)
            self._fallback = True
            super()._initialize_tracer_provider(worker_id)
            return

        import agentops

        if self.agentops_managed:
            from rollouthub.instrumentation.agentops import agentops_init_options

            os.environ.setdefault("AGENTOPS_API_KEY", "dummy")
            client = agentops.get_client()
            if getattr(client, "initialized", False):
                # Another runner of this process (or the user) initialised it: its settings stay.
                logger.debug("[Worker %s] The AgentOps client is already initialised.", worker_id)
            else:
                agentops.init(auto_start_session=False, **agentops_init_options())
        provider = self._agentops_provider()
        if provider is not trace_api.get_tracer_provider():
            logger.error("[Worker %s] The AgentOps tracer provider is not the global provider.", worker_id)
        existing = [p for p in get_span_processors_of(provider) if isinstance(p, LightningSpanProcessor)]
        if len(existing) > 1:
            logger.error("[Worker %s] Several LightningSpanProcessors found; using the first.", worker_id)
        if existing:
            logger.warning("[Worker %s] Reusing the existing LightningSpanProcessor.", worker_id)
            processor = existing[0]
        else:
            processor = LightningSpanProcessor()
            provider.add_span_processor(processor)
        if not any(isinstance(p, StoreOTLPSpanProcessor) for p in get_span_processors_of(provider)):
            # The native OTLP path to the store: ours, whatever AgentOps' own exporter is (it is kept local and
            # drops its batches, see rollouthub.instrumentation.agentops) and whenever AgentOps was initialised.
            self._add_otlp_processor(provider)
        self._lightning_span_processor = processor
        self._tracer_provider = provider

    @staticmethod
    def _agentops_provider() -> TracerProvider:
        provider: Any = None
        try:
            from agentops.sdk.core import tracer as agentops_tracer  # type: ignore[import-not-found]

            provider = getattr(agentops_tracer, "provider", None)
        except ImportError:
            provider = None
        if provider is None:  # AgentOps releases without ``tracer.provider`` install theirs as the global provider
            provider = trace_api.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            raise RuntimeError(f"AgentOps did not create an OpenTelemetry SDK tracer provider (found {provider!r}).")
        return provider

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        """Base teardown, then remove the instrumentation when managed."""
        super().teardown_worker(worker_id)
        if self.instrument_managed:
            self.uninstrument(worker_id)

    @with_active_tracer_context
    @asynccontextmanager
    async def trace_context(
        self,
        name: Optional[str] = None,
        *,
        store: Optional[LightningStore] = None,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
    ) -> AsyncIterator[Any]:
        """Open a tracing scope (delegates to :meth:`_trace_context_sync`)."""
        with self._trace_context_sync(name, store=store, rollout_id=rollout_id, attempt_id=attempt_id) as value:
            yield value

    @contextmanager
    def _trace_context_sync(  # type: ignore[override]
        self,
        name: Optional[str] = None,
        *,
        store: Optional[LightningStore] = None,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
    ) -> Iterator[Any]:
        """Synchronous tracing scope; with AgentOps, an AgentOps trace wraps the block."""
        if self._fallback:
            with super()._trace_context_sync(name, store=store, rollout_id=rollout_id, attempt_id=attempt_id) as t:
                yield t
            return
        if self._lightning_span_processor is None:
            raise RuntimeError("AgentOpsTracer is not initialized; call init_worker() first.")
        processor = self._lightning_span_processor
        store = store if store is not None else self._store
        trace_name = name or rollout_id
        if store is not None and rollout_id is not None and attempt_id is not None:
            if store.capabilities.get("otlp_traces", False):
                self._enable_native_otlp_exporter(store, rollout_id, attempt_id)
            else:
                self._disable_native_otlp_exporter()
            with processor.with_context(store, rollout_id, attempt_id):
                with self._agentops_trace(trace_name):
                    yield processor
        elif store is None and rollout_id is None and attempt_id is None:
            self._disable_native_otlp_exporter()
            with processor:
                with self._agentops_trace(trace_name):
                    yield processor
        else:
            raise ValueError("store, rollout_id and attempt_id must be given together (or all omitted).")

    @contextmanager
    def _agentops_trace(self, trace_name: Optional[str]) -> Iterator[None]:
        import agentops

        trace = agentops.start_trace(trace_name=trace_name)
        try:
            yield
        except Exception:
            logger.exception("Error inside the AgentOps trace %r", trace_name)
            agentops.end_trace(trace, end_state="Error")
            raise
        agentops.end_trace(trace, end_state="Success")

    def get_langchain_handler(self, tags: Optional[List[str]] = None) -> Any:
        """AgentOps' LangChain callback handler (``None`` with a warning in fallback mode)."""
        if self._fallback or not _agentops_installed():
            logger.warning("LangChain handler unavailable: %s", AGENTOPS_MISSING_MESSAGE)
            return None
        import agentops
        from agentops.integration.callbacks.langchain import (  # type: ignore[import-not-found]
            LangchainCallbackHandler,
        )

        client = agentops.get_client()
        api_key = getattr(getattr(client, "config", None), "api_key", None)
        return LangchainCallbackHandler(api_key=api_key, tags=tags or [])

    get_langchain_callback_handler = get_langchain_handler
