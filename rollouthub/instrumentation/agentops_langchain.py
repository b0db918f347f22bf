"""agentops_langchain instrumentation hooks (runtime spec 6.7). Placeholder: requires the optional ``langchain_core`` package."""

from __future__ import annotations

import logging

__all__ = ["instrument_agentops_langchain", "uninstrument_agentops_langchain"]

logger = logging.getLogger(__name__)


def instrument_agentops_langchain() -> bool:
    """Apply the agentops_langchain patches (not implemented in rollouthub yet; logs a warning and returns False)."""
    try:
        import langchain_core  # noqa: F401
    except ImportError as exc:
        raise ImportError("instrument_agentops_langchain requires the 'langchain_core' package") from exc
    logger.warning("The agentops_langchain instrumentation is not implemented by rollouthub; skipping.")
    return False


def uninstrument_agentops_langchain() -> None:
    """Remove the agentops_langchain patches (nothing to remove)."""
