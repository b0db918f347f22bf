"""The LLM proxy: an OpenAI-compatible endpoint that traces every call into the store.

rollouthub ships a native engine (Starlette + aiohttp) instead of LiteLLM; ``model_list`` entries keep LiteLLM's
format. :class:`LocalPolicyBackend` serves a local transformers model behind it (the ``[train]`` extra). See
``docs/llm-proxy.md``.
"""

from __future__ import annotations

from .callbacks import (
    CALLBACK_ALIASES,
    AddLogprobs,
    AddReturnTokenIds,
    LightningOpenTelemetry,
    LLMProxyCallback,
    initialize_llm_callbacks,
)
from .exporter import LightningSpanExporter
from .local_backend import BackendStats, LocalPolicyBackend
from .middleware import (
    MIDDLEWARE_ALIASES,
    MessageInspectionMiddleware,
    RolloutAttemptMiddleware,
    StreamConversionMiddleware,
)
from .models import ModelConfig
from .proxy import LLMProxy, get_active_llm_proxy, set_active_llm_proxy

__all__ = [
    "LLMProxy",
    "LocalPolicyBackend",
    "BackendStats",
    "ModelConfig",
    "LightningSpanExporter",
    "LightningOpenTelemetry",
    "AddReturnTokenIds",
    "AddLogprobs",
    "LLMProxyCallback",
    "RolloutAttemptMiddleware",
    "StreamConversionMiddleware",
    "MessageInspectionMiddleware",
    "CALLBACK_ALIASES",
    "MIDDLEWARE_ALIASES",
    "get_active_llm_proxy",
    "set_active_llm_proxy",
    "initialize_llm_callbacks",
]
