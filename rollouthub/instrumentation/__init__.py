"""Instrumentation of third-party SDKs: AgentOps' (when installed) and rollouthub's native OpenAI instrumentation.

Availability flags are computed without importing the packages. :func:`instrument_all` applies, in order, the
AgentOps, LiteLLM and AgentOps-LangChain patches for the packages that are installed. When AgentOps is *not*
installed, the native OpenAI instrumentation (:mod:`rollouthub.instrumentation.openai`) is applied instead so that
OpenAI calls are still traced offline.

Missing optional packages are not an error: nobody asked for them, so :func:`instrument_all` notes each one at
debug level, once per process (see docs/runtime.md, "Warnings about optional packages").
"""

from __future__ import annotations

import importlib.util
import logging
from typing import List

from rollouthub.utils.log_once import log_once

from .openai import (
    acquire_native_openai,
    instrument_openai,
    is_openai_instrumented,
    release_native_openai,
    uninstrument_openai,
)

__all__ = [
    "instrument_all",
    "uninstrument_all",
    "instrument_openai",
    "uninstrument_openai",
    "is_openai_instrumented",
    "acquire_native_openai",
    "release_native_openai",
    "AGENTOPS_INSTALLED",
    "AGENTOPS_LANGCHAIN_INSTALLED",
    "LITELLM_INSTALLED",
    "VLLM_INSTALLED",
    "WEAVE_INSTALLED",
    "OPENAI_INSTALLED",
    "preload_instrumentation",
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


_AGENTOPS_OPENAI_MODULES = (
    "openai.types.beta",
    "openai.resources.beta",
    "openai.resources.beta.assistants",
    "openai.resources.beta.threads",
    "openai.resources.beta.threads.messages",
    "openai.resources.beta.threads.runs",
    "openai.resources.completions",
    "openai.resources.embeddings",
    "openai.resources.images",
    "agentops.instrumentation.providers.openai.instrumentor",
)
"""Modules ``agentops.init()`` imports to instrument OpenAI (AgentOps 0.4), preloaded with ``agentops=True``."""


def preload_instrumentation(*, agentops: bool = False) -> None:
    """Import, without applying anything, the SDKs the instrumentation patches: ``openai`` (the modules the native
    instrumentation patches) and, with ``agentops`` when it is installed, the AgentOps SDK and its integration.

    Importing ``openai`` alone costs about half a second of CPU (over a thousand modules). A process that forks runner
    processes calls this once before forking, so that the children inherit the modules instead of each importing
    them again. Nothing is patched, no thread is started; missing packages are skipped silently.
    """
    if OPENAI_INSTALLED:
        from .openai import preload_openai

        preload_openai()
    if agentops and AGENTOPS_INSTALLED:
        importlib.import_module("agentops")
        importlib.import_module(f"{__name__}.agentops")
        # What ``agentops.init()`` imports to wrap OpenAI (the beta/assistants resources alone are ~500 modules).
        for name in _AGENTOPS_OPENAI_MODULES if OPENAI_INSTALLED else ():
            try:
                importlib.import_module(name)
            except ImportError:  # another AgentOps or OpenAI layout: init() imports what it needs
                logger.debug("preload: %s is not importable; skipped.", name)


_instrument_all_held_openai: List[bool] = []
"""For each ``instrument_all`` call not yet undone, whether it took a native OpenAI reference."""


def instrument_all() -> None:
    """Apply every available instrumentation (see the module docstring); missing packages are noted at debug
    level, once per process."""
    if AGENTOPS_INSTALLED:
        from .agentops import instrument_agentops

        instrument_agentops()
        _instrument_all_held_openai.append(False)
    else:
        log_once(
            logger,
            logging.DEBUG,
            "instrumentation.agentops.missing",
            "agentops is not installed; its instrumentation is skipped (using native OpenAI tracing).",
        )
        _instrument_all_held_openai.append(acquire_native_openai())
    if LITELLM_INSTALLED:
        from .litellm import instrument_litellm

        instrument_litellm(requested=False)
    else:
        log_once(
            logger, logging.DEBUG, "instrumentation.litellm.missing", "litellm is not installed; nothing to instrument."
        )
    if AGENTOPS_LANGCHAIN_INSTALLED:
        from .agentops_langchain import instrument_agentops_langchain

        instrument_agentops_langchain(requested=False)
    else:
        log_once(
            logger,
            logging.DEBUG,
            "instrumentation.agentops_langchain.missing",
            "agentops or langchain is not installed; the AgentOps-LangChain instrumentation is skipped.",
        )


def uninstrument_all() -> None:
    """Remove every instrumentation applied by :func:`instrument_all`.

    The native OpenAI instrumentation is reference-counted: it is removed when the last ``instrument_all`` caller
    (e.g. one of several runners in one process) or tracer uninstruments, and never when the user applied it
    directly.
    """
    if AGENTOPS_INSTALLED:
        from .agentops import uninstrument_agentops

        uninstrument_agentops()
    if _instrument_all_held_openai and _instrument_all_held_openai.pop():
        release_native_openai()
    if LITELLM_INSTALLED:
        from .litellm import uninstrument_litellm

        uninstrument_litellm()
    if AGENTOPS_LANGCHAIN_INSTALLED:
        from .agentops_langchain import uninstrument_agentops_langchain

        uninstrument_agentops_langchain()
