"""AgentOps patches (runtime spec 6.7): keep AgentOps local and route its exports to the store.

Best-effort: the patch points depend on the AgentOps SDK version; when one is missing a warning is logged and
:func:`instrument_agentops` returns False. Requires the optional ``agentops`` extra.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Tuple

__all__ = ["instrument_agentops", "uninstrument_agentops", "enable_agentops_service"]

logger = logging.getLogger(__name__)

_service_enabled = False
_originals: Dict[Tuple[Any, str], Any] = {}


def enable_agentops_service(enabled: bool = True) -> None:
    """Allow (``True``) or block (``False``, default) traffic to the hosted AgentOps service."""
    global _service_enabled
    _service_enabled = enabled


def _bypassable_exporter(base: type) -> type:
    from rollouthub.utils.otlp import LightningStoreOTLPExporter

    class BypassableExporter(LightningStoreOTLPExporter, base):  # type: ignore[misc, valid-type]
        """AgentOps exporter replaced by a store-aware exporter that skips the hosted service when disabled."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("jwt", None)
            kwargs.pop("api_key", None)
            LightningStoreOTLPExporter.__init__(self)

        def should_bypass(self) -> bool:
            return not _service_enabled

    return BypassableExporter


def instrument_agentops() -> bool:
    """Replace AgentOps' span exporters by store-aware subclasses; returns whether patching succeeded."""
    try:
        import agentops  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "instrument_agentops requires the 'agentops' package: pip install 'rollouthub[agentops]'"
        ) from exc
    patched = False
    for module_name, attr in (
        ("agentops.sdk.exporters", "AuthenticatedOTLPExporter"),
        ("agentops.sdk.core", "OTLPSpanExporter"),
    ):
        try:
            import importlib

            module = importlib.import_module(module_name)
            original = getattr(module, attr)
        except (ImportError, AttributeError):
            continue
        if (module, attr) in _originals:
            patched = True
            continue
        _originals[(module, attr)] = original
        setattr(module, attr, _bypassable_exporter(original))
        patched = True
    if not patched:
        logger.warning("No known AgentOps exporter found to patch; AgentOps spans will not reach the store via OTLP.")
    return patched


def uninstrument_agentops() -> None:
    """Restore the original AgentOps classes."""
    for (module, attr), original in list(_originals.items()):
        setattr(module, attr, original)
    _originals.clear()
