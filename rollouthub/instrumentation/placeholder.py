"""The instrumentations rollouthub names but does not implement yet (litellm, vLLM, AgentOps-LangChain)."""

from __future__ import annotations

import importlib
import logging

from rollouthub.utils.log_once import log_once

__all__ = ["skip_unimplemented"]

logger = logging.getLogger(__name__)


def skip_unimplemented(integration: str, package: str, *, requested: bool) -> bool:
    """Check that ``package`` is importable, say once per process that ``integration`` is not implemented, return
    False.

    The notice is a warning when the user asked for the integration (``requested``, a direct call) and a debug line
    when :func:`~rollouthub.instrumentation.instrument_all` applies whatever is installed.

    Raises:
        ImportError: ``package`` is not installed.
    """
    try:
        importlib.import_module(package)
    except ImportError as exc:
        raise ImportError(f"instrument_{integration} requires the '{package}' package") from exc
    log_once(
        logger,
        logging.WARNING if requested else logging.DEBUG,
        f"instrumentation.{integration}.unimplemented.{requested}",
        "The %s instrumentation is not implemented by rollouthub; its calls are not traced.",
        integration,
    )
    return False
