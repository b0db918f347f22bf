"""``GRPOConfig``: every option of the GRPO update, its default, and its domain, checked at construction.

No torch here: a configuration can be built, validated, saved and compared without the ``[train]`` extra. Each bad
value raises ``ValueError`` with one line naming the field, e.g. ``GRPOConfig.clip_low must be in [0, 1): got 1.5``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Literal, Mapping, Optional, Tuple, get_args

__all__ = ["AdvantageMode", "DType", "GRPOConfig"]

AdvantageMode = Literal["mean_std", "mean", "leave_one_out"]
"""How a rollout's advantage is computed from the rewards of its group (the rollouts of one input):
``mean_std``: (r - mean) / (std + eps) (GRPO); ``mean``: r - mean (no std scaling); ``leave_one_out``: r minus the
mean of the *other* rollouts of the group (RLOO)."""

DType = Literal["auto", "float32", "bfloat16"]
"""Compute precision of the update: ``auto`` is float32 on a CPU and bfloat16 autocast on CUDA (float32 weights)."""


def _fail(name: str, rule: str, value: Any) -> ValueError:
    return ValueError(f"GRPOConfig.{name} must be {rule}: got {value!r}")


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(name, "a finite number", value)
    return float(value)


def _integer(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(name, f"an integer >= {minimum}", value)
    return value


@dataclass(frozen=True)
class GRPOConfig:
    """Options of the GRPO policy update (group-relative advantages, PPO-clipped loss against serving log-probs).

    The defaults suit a pretrained model of a few hundred million parameters or more; the CPU demo overrides the
    learning rate and batch sizes (see ``rollouthub.rl_demo``).
    """

    # Sampling and advantages
    group_size: int = 8
    """Rollouts per input in a step; the advantage of a rollout is relative to the others of its group (>= 2)."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts; the trainer recomputes log-probs as log-softmax(logits / temperature)."""
    advantage: AdvantageMode = "mean_std"
    advantage_eps: float = 1e-6
    """Added to the group's standard deviation before dividing (``mean_std`` only)."""
    skip_uniform_groups: bool = True
    """Leave out of the update the groups whose rewards are all equal (every advantage is 0: no policy gradient);
    they are still counted in the step's metrics."""

    # Loss
    clip_low: float = 0.2
    """The ratio is clipped to [1 - clip_low, 1 + clip_high] (PPO); a larger ``clip_high`` is DAPO's clip-higher."""
    clip_high: float = 0.2
    kl_coef: float = 0.0
    """Weight of the k3 KL estimate to a frozen copy of the initial policy; 0 keeps no reference model."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (subtracted from the loss); 0 only reports the entropy."""

    # Optimisation
    learning_rate: float = 1e-6
    weight_decay: float = 0.0
    adam_betas: Tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global L2 norm before each optimizer step (0 disables clipping)."""
    mini_batch_size: Optional[int] = None
    """Samples per optimizer step; ``None``: the whole step's batch in one optimizer step."""
    micro_batch_size: int = 8
    """Samples per forward/backward pass; a mini-batch is accumulated from micro-batches (memory bound)."""
    epochs: int = 1
    """Passes over the step's batch (each pass is one optimizer step per mini-batch)."""
    seed: int = 0
    """Seeds the order of samples in mini-batches."""

    # Model
    lora_rank: int = 0
    """0: full fine-tune; > 0: train a LoRA adapter of this rank (needs the ``[lora]`` extra: peft)."""
    lora_alpha: int = 16
    lora_target_modules: Tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    device: str = "auto"
    """``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    dtype: DType = "auto"
    gradient_checkpointing: bool = False

    # Checkpoints
    checkpoint_every: int = 0
    """Save a checkpoint every this many steps (0: never)."""
    keep_checkpoints: int = 2
    """How many complete checkpoints to keep (older ones are deleted after a newer one is complete)."""

    extra: Dict[str, Any] = field(default_factory=dict)
    """Free-form values saved with the configuration in checkpoints (e.g. the task and model sizes of a run)."""

    def __post_init__(self) -> None:
        _integer("group_size", self.group_size, 2)
        if _number("temperature", self.temperature) <= 0:
            raise _fail("temperature", "> 0", self.temperature)
        if self.advantage not in get_args(AdvantageMode):
            raise _fail("advantage", f"one of {', '.join(get_args(AdvantageMode))}", self.advantage)
        if _number("advantage_eps", self.advantage_eps) < 0:
            raise _fail("advantage_eps", ">= 0", self.advantage_eps)
        for name in ("clip_low", "clip_high"):
            value = _number(name, getattr(self, name))
            if not 0 <= value < (1 if name == "clip_low" else math.inf):
                raise _fail(name, "in [0, 1)" if name == "clip_low" else ">= 0", value)
        for name in ("kl_coef", "entropy_coef", "weight_decay", "max_grad_norm", "adam_eps"):
            if _number(name, getattr(self, name)) < 0:
                raise _fail(name, ">= 0", getattr(self, name))
        if _number("learning_rate", self.learning_rate) <= 0:
            raise _fail("learning_rate", "> 0", self.learning_rate)
        betas = self.adam_betas
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise _fail("adam_betas", "a pair of numbers in [0, 1)", betas)
        if not all(0 <= _number("adam_betas", beta) < 1 for beta in betas):
            raise _fail("adam_betas", "a pair of numbers in [0, 1)", betas)
        if self.mini_batch_size is not None:
            _integer("mini_batch_size", self.mini_batch_size, 1)
        _integer("micro_batch_size", self.micro_batch_size, 1)
        _integer("epochs", self.epochs, 1)
        _integer("seed", self.seed, 0)
        _integer("lora_rank", self.lora_rank, 0)
        _integer("lora_alpha", self.lora_alpha, 1)
        targets = self.lora_target_modules
        if isinstance(targets, str) or not targets or not all(isinstance(name, str) and name for name in targets):
            raise _fail("lora_target_modules", "a non-empty list of module names", targets)
        device = self.device
        if not isinstance(device, str) or not (device in ("auto", "cpu", "cuda") or _is_cuda_index(device)):
            raise _fail("device", "auto, cpu, cuda or cuda:N", device)
        if self.dtype not in get_args(DType):
            raise _fail("dtype", f"one of {', '.join(get_args(DType))}", self.dtype)
        if self.dtype == "bfloat16" and device == "cpu":
            raise _fail("dtype", "float32 or auto on the CPU (bfloat16 is for CUDA)", self.dtype)
        if not isinstance(self.gradient_checkpointing, bool):
            raise _fail("gradient_checkpointing", "true or false", self.gradient_checkpointing)
        if not isinstance(self.skip_uniform_groups, bool):
            raise _fail("skip_uniform_groups", "true or false", self.skip_uniform_groups)
        _integer("checkpoint_every", self.checkpoint_every, 0)
        _integer("keep_checkpoints", self.keep_checkpoints, 1)
        if not isinstance(self.extra, Mapping):
            raise _fail("extra", "a mapping", self.extra)
        # Normalise sequences to tuples so that a configuration read back from JSON compares equal.
        object.__setattr__(self, "adam_betas", (float(betas[0]), float(betas[1])))
        object.__setattr__(self, "lora_target_modules", tuple(targets))

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict of every field (``GRPOConfig.from_dict`` reads it back)."""
        values = dataclasses.asdict(self)
        values["adam_betas"] = list(self.adam_betas)
        values["lora_target_modules"] = list(self.lora_target_modules)
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> GRPOConfig:
        """Build from :meth:`to_dict`'s output; an unknown key is a one-line ``ValueError`` naming it."""
        known = {item.name for item in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"GRPOConfig has no option {unknown[0]!r}")
        fields = dict(values)
        for name in ("adam_betas", "lora_target_modules"):
            if isinstance(fields.get(name), list):
                fields[name] = tuple(fields[name])
        return cls(**fields)


def _is_cuda_index(device: str) -> bool:
    prefix, _, index = device.partition(":")
    return prefix == "cuda" and index.isdigit()
