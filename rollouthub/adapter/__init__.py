"""Trace adapters: turn spans into training data."""

from .base import Adapter, OtelTraceAdapter, TraceAdapter
from .messages import TraceToMessages
from .trajectory import TraceToTrajectory, build_trajectories, input_group_id
from .triplet import LlmProxyTraceToTriplet, TracerTraceToTriplet, TraceToTripletBase

__all__ = [
    "TraceAdapter",
    "OtelTraceAdapter",
    "Adapter",
    "TraceToTripletBase",
    "TracerTraceToTriplet",
    "LlmProxyTraceToTriplet",
    "TraceToMessages",
    "TraceToTrajectory",
    "build_trajectories",
    "input_group_id",
]
