"""vllm instrumentation hooks (runtime spec 6.7). Placeholder: requires the optional ``vllm`` package."""

from __future__ import annotations

import logging

__all__ = ["instrument_vllm", "uninstrument_vllm"]

logger = logging.getLogger(__name__)


def instrument_vllm() -> bool:
    """Apply the vllm patches (not implemented in rollouthub yet; logs a warning and returns False)."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise ImportError("instrument_vllm requires the 'vllm' package") from exc
    logger.warning("The vllm instrumentation is not implemented by rollouthub; skipping.")
    return False


def uninstrument_vllm() -> None:
    """Remove the vllm patches (nothing to remove)."""
