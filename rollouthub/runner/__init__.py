"""Runners: long-running executors that pull rollouts from a store and run an agent."""

from __future__ import annotations

from .agent import LitAgentRunner
from .base import Runner
from .legacy import LegacyAgentRunner

__all__ = ["Runner", "LegacyAgentRunner", "LitAgentRunner"]
