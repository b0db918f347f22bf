"""Automatic Prompt Optimization."""

from .apo import APO, RolloutResultForAPO, VersionedPromptTemplate

__all__ = ["APO", "VersionedPromptTemplate", "RolloutResultForAPO"]
