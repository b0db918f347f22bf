"""Tracers: capture the spans an agent produces and route them to a store."""

from __future__ import annotations

from .agentops import AgentOpsTracer
from .base import Tracer, clear_active_tracer, get_active_tracer, set_active_tracer
from .dummy import DummyTracer
from .otel import OtelTracer

__all__ = [
    "AgentOpsTracer",
    "Tracer",
    "OtelTracer",
    "DummyTracer",
    "get_active_tracer",
    "set_active_tracer",
    "clear_active_tracer",
]
