"""litellm instrumentation hooks (runtime spec 6.7). Placeholder: requires the optional ``litellm`` package."""

from __future__ import annotations

import logging

__all__ = ["instrument_litellm", "uninstrument_litellm"]

logger = logging.getLogger(__name__)


def instrument_litellm() -> bool:
    """Apply the litellm patches (not implemented in rollouthub yet; logs a warning and returns False)."""
    try:
        import litellm  # noqa: F401
    except ImportError as exc:
        raise ImportError("instrument_litellm requires the 'litellm' package") from exc
    logger.warning("The litellm instrumentation is not implemented by rollouthub; skipping.")
    return False


def uninstrument_litellm() -> None:
    """Remove the litellm patches (nothing to remove)."""
