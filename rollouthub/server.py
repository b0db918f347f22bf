"""Deprecated v0.1 task server names (``agentlightning.server``); see :mod:`rollouthub.legacy_v01`."""

from __future__ import annotations

from .legacy_v01 import AgentLightningServer, ServerDataStore

__all__ = ["AgentLightningServer", "ServerDataStore"]
