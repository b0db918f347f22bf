"""GRPO: reinforcement learning of the agent's own model from its traces (needs the ``[train]`` extra).

Importing this package needs no torch: :class:`GRPOConfig` is plain Python. The torch modules are imported on first
use of their names (``from rollouthub.algorithm.grpo import PolicyUpdater``) and, without torch, raise
:class:`~rollouthub.utils.extras.MissingExtraError`, whose message is one line naming ``rollouthub[train]``.

- :mod:`.config`: :class:`GRPOConfig`, every option with its default and domain.
- :mod:`.loss`: pure tensor functions: packing, token log-probs at a temperature, group advantages, the clipped loss.
- :mod:`.update`: :class:`PolicyUpdater`, the optimizer step over a step's token samples.
- :mod:`.checkpoint`: atomic checkpoints and ``resume``.
- :mod:`.rollouts` (no torch): a step's rollouts: enqueue the groups, wait, read spans into samples, the drop rule.
- :mod:`.metrics` (no torch): the per-step metrics stored as record rollouts, and reading them back.
- :mod:`.algorithm`: :class:`GRPO`, the algorithm the ``Trainer`` runs.
"""

from __future__ import annotations

import importlib
from typing import Any

from .config import AdvantageMode, DType, GRPOConfig

__all__ = [
    "AdvantageMode",
    "DType",
    "GRPOConfig",
    # torch (imported on first use)
    "GRPOSample",
    "TokenSample",
    "UpdateMetrics",
    "PolicyUpdater",
    "TrainingState",
    "save_checkpoint",
    "latest_checkpoint",
    "load_checkpoint",
    "resume",
    "group_advantages",
    "clipped_policy_loss",
    "token_logprobs",
    "pack_batch",
    "GRPO",
    "RunSummary",
    "StepRecord",
    "read_step_records",
]

_LAZY = {
    "GRPOSample": "update",
    "TokenSample": "update",
    "UpdateMetrics": "update",
    "PolicyUpdater": "update",
    "TrainingState": "checkpoint",
    "save_checkpoint": "checkpoint",
    "latest_checkpoint": "checkpoint",
    "load_checkpoint": "checkpoint",
    "resume": "checkpoint",
    "group_advantages": "loss",
    "clipped_policy_loss": "loss",
    "token_logprobs": "loss",
    "pack_batch": "loss",
    "GRPO": "algorithm",
    "RunSummary": "algorithm",
    "StepRecord": "metrics",
    "read_step_records": "metrics",
}


def __getattr__(name: str) -> Any:
    """Import the torch-based names on first use (one-line ``MissingExtraError`` without the extra)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
