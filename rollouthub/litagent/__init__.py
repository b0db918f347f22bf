"""Agents: ``LitAgent`` and the rollout decorators."""

from .decorator import llm_rollout, prompt_rollout, rollout
from .litagent import LitAgent

__all__ = ["LitAgent", "llm_rollout", "prompt_rollout", "rollout"]
