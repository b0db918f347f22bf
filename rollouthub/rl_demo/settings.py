"""The RL demo's model sizes and hyperparameters, chosen by experiment (docs/rl.md has the curves). No torch here."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict

from rollouthub.algorithm.grpo.config import GRPOConfig

__all__ = ["DemoSettings", "DEMO_SETTINGS"]


@dataclass(frozen=True)
class DemoSettings:
    """Everything that defines a demo run besides its seed."""

    # The model (``rollouthub.testing.tiny_lm.build_tiny_lm``): about 90 000 parameters.
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    max_positions: int = 64

    # Rollouts
    inputs_per_step: int = 8
    group_size: int = 16
    """8 inputs x 16 rollouts = 128 rollouts per step."""
    temperature: float = 1.5
    """Sampling above 1 keeps exploring after the policy sharpens: at 1.0 some seeds lock a wrong letter in (a
    group whose rollouts all give the same wrong letter has no signal left)."""
    eval_size: int = 100
    eval_every: int = 10

    # The update
    learning_rate: float = 1e-3
    mini_batch_size: int = 32
    """4 AdamW steps per step of 128 rollouts (the later ones off-policy, hence the clipped ratio)."""
    micro_batch_size: int = 128
    clip_low: float = 0.2
    clip_high: float = 0.2

    def model_sizes(self) -> Dict[str, int]:
        """Keyword arguments of ``build_tiny_lm`` (besides the seed)."""
        return {
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "max_positions": self.max_positions,
        }

    def grpo_config(self, seed: int, **overrides: Any) -> GRPOConfig:
        """The :class:`GRPOConfig` of a demo run (CPU, full fine-tune); ``overrides`` replace fields."""
        config = GRPOConfig(
            group_size=self.group_size,
            temperature=self.temperature,
            learning_rate=self.learning_rate,
            mini_batch_size=self.mini_batch_size,
            micro_batch_size=self.micro_batch_size,
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            seed=seed,
            device="cpu",
            extra={"demo": {"model": self.model_sizes(), "inputs_per_step": self.inputs_per_step}},
        )
        return replace(config, **overrides) if overrides else config


DEMO_SETTINGS = DemoSettings()
"""The settings ``python -m rollouthub.quickstart --rl`` and ``benchmarks/grpo_learning.py`` use."""
