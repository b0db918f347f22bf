"""Deprecated v0.1 client names (``agentlightning.client``); see :mod:`rollouthub.legacy_v01`."""

from __future__ import annotations

from .legacy_v01 import AgentLightningClient, DevTaskLoader

__all__ = ["AgentLightningClient", "DevTaskLoader"]
