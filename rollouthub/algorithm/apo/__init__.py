"""Automatic Prompt Optimization (runtime.md 10.5)."""

from .apo import APO, RolloutResultForAPO, VersionedPromptTemplate

__all__ = ["APO", "VersionedPromptTemplate", "RolloutResultForAPO"]
