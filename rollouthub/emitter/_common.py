"""Helpers shared by the emitters: tracer resolution and attribute preparation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional

from rollouthub.utils.otel import flatten_attributes, sanitize_attributes

if TYPE_CHECKING:
    from rollouthub.tracer.base import Tracer

__all__ = ["resolve_tracer", "prepare_extra_attributes"]


def resolve_tracer(propagate: bool) -> Tracer:
    """Return the tracer an emitter should use.

    With ``propagate`` the active tracer is returned (``RuntimeError`` if none is active); otherwise a fresh
    ``DummyTracer`` that exports nothing.
    """
    if not propagate:
        from rollouthub.tracer.dummy import DummyTracer

        return DummyTracer()
    from rollouthub.tracer.base import get_active_tracer

    tracer = get_active_tracer()
    if tracer is None:
        raise RuntimeError(
            "No active tracer found. Emit inside a tracer's trace_context (e.g. within a runner), "
            "or pass propagate=False."
        )
    return tracer


def prepare_extra_attributes(attributes: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Flatten (keeping leaf lists) and sanitise user-supplied extra attributes."""
    if not attributes:
        return {}
    return sanitize_attributes(flatten_attributes(attributes, expand_leaf_lists=False))
