"""Instrumentation patches of third-party SDKs (runtime spec 6.7) plus native OpenAI instrumentation.

Availability flags are computed without importing the packages. :func:`instrument_all` applies, in order, the
AgentOps, LiteLLM and AgentOps-LangChain patches for the packages that are installed (a warning is logged for
each missing one). When AgentOps is *not* installed, the native OpenAI instrumentation
(:mod:`rollouthub.instrumentation.openai`) is applied instead so that OpenAI calls are still traced offline.
"""

from __future__ import annotations

import importlib.util
import logging

from .openai import instrument_openai, is_openai_instrumented, uninstrument_openai

__all__ = [
    "instrument_all",
    "uninstrument_all",
    "instrument_openai",
    "uninstrument_openai",
    "is_openai_instrumented",
    "AGENTOPS_INSTALLED",
    "AGENTOPS_LANGCHAIN_INSTALLED",
    "LITELLM_INSTALLED",
    "VLLM_INSTALLED",
    "WEAVE_INSTALLED",
    "OPENAI_INSTALLED",
]

logger = logging.getLogger(__name__)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


AGENTOPS_INSTALLED: bool = _installed("agentops")
AGENTOPS_LANGCHAIN_INSTALLED: bool = AGENTOPS_INSTALLED and _installed("langchain_core")
LITELLM_INSTALLED: bool = _installed("litellm")
VLLM_INSTALLED: bool = _installed("vllm")
WEAVE_INSTALLED: bool = _installed("weave")
OPENAI_INSTALLED: bool = _installed("openai")

_native_openai_users = 0
"""How many ``instrument_all`` calls currently rely on the native OpenAI instrumentation they applied."""


def instrument_all() -> None:
    """Apply every available instrumentation (see the module docstring)."""
    global _native_openai_users
    if AGENTOPS_INSTALLED:
        from .agentops import instrument_agentops

        instrument_agentops()
    else:
        logger.warning("agentops is not installed; its instrumentation is skipped (using native OpenAI tracing).")
        if OPENAI_INSTALLED:
            if _native_openai_users > 0 or not is_openai_instrumented():
                if is_openai_instrumented() or instrument_openai():
                    _native_openai_users += 1
    if LITELLM_INSTALLED:
        from .litellm import instrument_litellm

        instrument_litellm()
    else:
        logger.warning("litellm is not installed; its instrumentation is skipped.")
    if AGENTOPS_LANGCHAIN_INSTALLED:
        from .agentops_langchain import instrument_agentops_langchain

        instrument_agentops_langchain()
    else:
        logger.warning("agentops or langchain is not installed; the AgentOps-LangChain instrumentation is skipped.")


def uninstrument_all() -> None:
    """Remove every instrumentation applied by :func:`instrument_all`.

    The native OpenAI instrumentation is reference-counted: it is removed when the last ``instrument_all`` caller
    (e.g. one of several runners in one process) uninstruments, and never when the user applied it directly.
    """
    global _native_openai_users
    if AGENTOPS_INSTALLED:
        from .agentops import uninstrument_agentops

        uninstrument_agentops()
    if _native_openai_users > 0:
        _native_openai_users -= 1
        if _native_openai_users == 0:
            uninstrument_openai()
    if LITELLM_INSTALLED:
        from .litellm import uninstrument_litellm

        uninstrument_litellm()
    if AGENTOPS_LANGCHAIN_INSTALLED:
        from .agentops_langchain import uninstrument_agentops_langchain

        uninstrument_agentops_langchain()
