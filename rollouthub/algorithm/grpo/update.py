"""One GRPO update: group-relative advantages, then AdamW steps on the clipped loss, micro-batch by micro-batch.

:class:`PolicyUpdater` owns the trainable policy (full fine-tune or a LoRA adapter), its optimizer and, when
``kl_coef > 0``, the frozen reference. :meth:`PolicyUpdater.update` takes the token samples of one step (anything
shaped like :class:`GRPOSample`, e.g. the trajectory adapter's samples) and returns :class:`UpdateMetrics`.
"""

from __future__ import annotations

import copy
import math
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Protocol, Sequence, Set

from rollouthub.utils.extras import import_extra

import_extra("torch", extra="train", feature="GRPO")
import torch  # noqa: E402  (after the one-line message naming the extra when torch is missing)

from .config import GRPOConfig  # noqa: E402
from .loss import LossStats, clipped_policy_loss, group_advantages, pack_batch, token_logprobs  # noqa: E402

__all__ = ["GRPOSample", "TokenSample", "UpdateMetrics", "PolicyUpdater", "resolve_device", "prepare_policy"]


class GRPOSample(Protocol):
    """What the update reads from a sample (the trajectory adapter's samples have these fields)."""

    @property
    def rollout_id(self) -> str:
        """The rollout the sample comes from."""
        ...

    @property
    def input_id(self) -> Optional[str]:
        """The group key: rollouts of the same input are compared with each other."""
        ...

    @property
    def prompt_ids(self) -> Sequence[int]:
        """Prompt token ids, as served."""
        ...

    @property
    def response_ids(self) -> Sequence[int]:
        """Tokens after the prompt: sampled ones and spliced ones."""
        ...

    @property
    def response_mask(self) -> Sequence[int]:
        """1 on tokens the policy sampled, 0 on spliced ones (as long as ``response_ids``)."""
        ...

    @property
    def response_logprobs(self) -> Optional[Sequence[float]]:
        """The serving engine's log-probs of the sampled tokens (any value on masked positions)."""
        ...

    @property
    def reward(self) -> Optional[float]:
        """The rollout's final reward."""
        ...


@dataclass(frozen=True)
class TokenSample:
    """A plain :class:`GRPOSample` (for direct sampling loops and tests)."""

    rollout_id: str
    input_id: Optional[str]
    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    response_mask: Sequence[int]
    response_logprobs: Optional[Sequence[float]]
    reward: Optional[float]


@dataclass
class UpdateMetrics:
    """What one update did (token means unless named otherwise); ``as_dict`` for logs and the store."""

    step: int
    samples: int
    rollouts: int
    groups: int
    uniform_groups: int
    """Groups whose rewards were all equal (no learning signal: a collapse shows here first)."""
    trained_samples: int
    """Samples in the update (those of uniform groups are left out when ``skip_uniform_groups``)."""
    tokens: int
    """Policy-sampled tokens of the trained samples (one pass)."""
    reward_mean: float
    reward_std: float
    advantage_mean: float
    advantage_std: float
    advantage_abs_max: float
    loss: float
    clip_fraction: float
    first_ratio_mean: float
    """Mean importance ratio on the first mini-batch (1 when the samples were served by the current policy)."""
    first_clip_fraction: float
    ratio_min: float
    ratio_max: float
    kl: float
    entropy: float
    grad_norm: float
    optimizer_steps: int
    seconds: float
    tokens_per_second: float
    """Trained tokens, times passes (``epochs``), per second of the update."""
    rollout_ids: List[str] = field(default_factory=list)
    """Every rollout this update consumed (uniform groups included), in input order."""

    def as_dict(self) -> Dict[str, Any]:
        """The metrics as a flat dict, without ``rollout_ids``."""
        values = dict(self.__dict__)
        values.pop("rollout_ids")
        return values


def resolve_device(device: str) -> torch.device:
    """``auto`` → CUDA when available, else the CPU; other values as given."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"GRPOConfig.device is {device!r} but CUDA is not available here")
    return resolved


def prepare_policy(model: Any, config: GRPOConfig, device: torch.device) -> Any:
    """The model to train: on ``device`` in float32, wrapped in a LoRA adapter when ``config.lora_rank > 0``."""
    model = model.to(device=device, dtype=torch.float32)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if config.lora_rank:
        peft = import_extra("peft", extra="lora", feature="GRPO with lora_rank > 0")
        settings = peft.LoraConfig(
            r=config.lora_rank,
            lora_alpha=config.lora_alpha,
            lora_dropout=0.0,
            target_modules=list(config.lora_target_modules),
            task_type="CAUSAL_LM",
        )
        model = peft.get_peft_model(model, settings)
    # Evaluation mode: no dropout, so recomputed log-probs are those the serving engine computed.
    return model.eval()


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass(frozen=True)
class _Item:
    sample: GRPOSample
    advantage: float


@dataclass(frozen=True)
class _RolloutGroups:
    """The rollouts of a step by group (input): one reward and one advantage per rollout, in input order."""

    rewards: Dict[str, float]
    advantages: Dict[str, float]
    group_of: Dict[str, str]
    uniform: Set[str]
    """Groups whose rewards are all equal (every advantage 0)."""
    count: int

    @classmethod
    def of(cls, samples: Sequence[GRPOSample], config: GRPOConfig) -> _RolloutGroups:
        """Group ``samples`` by ``input_id`` (a sample without one is a group of its own: no baseline, no signal);
        a rollout of several samples (one per LLM call) counts once, with its reward."""
        rewards: Dict[str, float] = {}
        group_of: Dict[str, str] = {}
        for sample in samples:
            rewards[sample.rollout_id] = float(sample.reward)  # type: ignore[arg-type]
            group_of[sample.rollout_id] = sample.input_id if sample.input_id is not None else sample.rollout_id
        ids = list(rewards)
        values = group_advantages(
            [rewards[i] for i in ids], [group_of[i] for i in ids], config.advantage, config.advantage_eps
        )
        by_group: Dict[str, List[float]] = {}
        for rollout_id in ids:
            by_group.setdefault(group_of[rollout_id], []).append(rewards[rollout_id])
        uniform = {group for group, members in by_group.items() if max(members) == min(members)}
        return cls(rewards, dict(zip(ids, values, strict=True)), group_of, uniform, len(by_group))


class PolicyUpdater:
    """The trainable policy, its AdamW optimizer and the GRPO update (see the module docstring).

    Args:
        model: a causal LM (``transformers`` ``PreTrainedModel``); moved to the configured device in float32.
        config: the options (learning rate, clipping, batch sizes, LoRA...).
    """

    def __init__(self, model: Any, config: GRPOConfig) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        self.model = prepare_policy(model, config, self.device)
        self.reference: Optional[Any] = None
        if config.kl_coef > 0 and not config.lora_rank:
            self.reference = copy.deepcopy(self.model).requires_grad_(False)
        self.parameters = [parameter for parameter in self.model.parameters() if parameter.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.parameters,
            lr=config.learning_rate,
            betas=config.adam_betas,
            eps=config.adam_eps,
            weight_decay=config.weight_decay,
        )
        pad = getattr(getattr(model, "config", None), "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else 0
        """Fills padding positions (any valid id: they are masked out)."""
        self.step = 0
        """Updates completed so far."""
        self.generator = torch.Generator().manual_seed(config.seed)
        """Shuffles samples into mini-batches (saved in checkpoints)."""

    def autocast(self) -> AbstractContextManager[Any]:
        """The precision context of forward passes: bfloat16 autocast on CUDA when configured, else nothing."""
        wants_bf16 = self.config.dtype == "bfloat16" or (
            self.config.dtype == "auto" and self.device.type == "cuda" and torch.cuda.is_bf16_supported()
        )
        if self.device.type == "cuda" and wants_bf16:
            return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        return nullcontext()

    def reference_logprobs(self, batch: Any) -> Optional[torch.Tensor]:
        """Log-probs of the frozen reference policy (``None`` when ``kl_coef`` is 0)."""
        if not self.config.kl_coef:
            return None
        with torch.no_grad(), self.autocast():
            if self.reference is not None:
                return token_logprobs(self.reference, batch, self.config.temperature)[0]
            with self.model.disable_adapter():  # LoRA: the base model is the reference
                return token_logprobs(self.model, batch, self.config.temperature)[0]

    def update(self, samples: Sequence[GRPOSample]) -> UpdateMetrics:
        """One training step on ``samples`` (every rollout of the step's groups); returns its metrics.

        Raises ``ValueError`` (one line, naming the rollout) on a sample without a reward or serving log-probs.
        """
        started = time.perf_counter()
        if not samples:
            raise ValueError("PolicyUpdater.update needs at least one sample")
        for sample in samples:
            if sample.reward is None or not math.isfinite(sample.reward):
                raise ValueError(f"sample of rollout {sample.rollout_id} has no finite reward: {sample.reward!r}")
            if sample.response_logprobs is None or len(sample.response_logprobs) != len(sample.response_ids):
                raise ValueError(f"sample of rollout {sample.rollout_id} has no serving log-probs for its tokens")
        groups = _RolloutGroups.of(samples, self.config)
        items = [
            _Item(sample, groups.advantages[sample.rollout_id])
            for sample in samples
            if not (self.config.skip_uniform_groups and groups.group_of[sample.rollout_id] in groups.uniform)
            and any(sample.response_mask)
        ]
        totals, first = LossStats(), LossStats()
        losses: List[float] = []
        grad_norms: List[float] = []
        optimizer_steps = 0
        size = self.config.mini_batch_size or max(len(items), 1)
        for _ in range(self.config.epochs):
            order = torch.randperm(len(items), generator=self.generator).tolist()
            for mini_batch in _chunks([items[index] for index in order], size):
                stats, loss, grad_norm = self._optimizer_step(mini_batch)
                if optimizer_steps == 0:
                    first = stats
                totals.add(stats)
                losses.append(loss)
                grad_norms.append(grad_norm)
                optimizer_steps += 1
        self.step += 1

        summary, first_summary = totals.summary(), first.summary()
        advantages = torch.tensor(list(groups.advantages.values()), dtype=torch.float64)
        rewards = torch.tensor(list(groups.rewards.values()), dtype=torch.float64)
        seconds = time.perf_counter() - started
        return UpdateMetrics(
            step=self.step,
            samples=len(samples),
            rollouts=len(groups.rewards),
            groups=groups.count,
            uniform_groups=len(groups.uniform),
            trained_samples=len(items),
            tokens=sum(sum(1 for value in item.sample.response_mask if value) for item in items),
            reward_mean=float(rewards.mean()),
            reward_std=float(rewards.std(correction=0)),
            advantage_mean=float(advantages.mean()),
            advantage_std=float(advantages.std(correction=0)),
            advantage_abs_max=float(advantages.abs().max()),
            loss=sum(losses) / len(losses) if losses else 0.0,
            clip_fraction=summary["clip_fraction"],
            first_ratio_mean=first_summary["ratio_mean"],
            first_clip_fraction=first_summary["clip_fraction"],
            ratio_min=summary["ratio_min"],
            ratio_max=summary["ratio_max"],
            kl=summary["kl"],
            entropy=summary["entropy"],
            grad_norm=max(grad_norms) if grad_norms else 0.0,
            optimizer_steps=optimizer_steps,
            seconds=seconds,
            tokens_per_second=totals.tokens / seconds if seconds > 0 else 0.0,
            rollout_ids=list(groups.rewards),
        )

    def _optimizer_step(self, mini_batch: Sequence[_Item]) -> tuple[LossStats, float, float]:
        """Accumulate the mini-batch's gradient micro-batch by micro-batch, clip it, step AdamW."""
        config = self.config
        token_count = float(sum(sum(1 for value in item.sample.response_mask if value) for item in mini_batch))
        self.optimizer.zero_grad(set_to_none=True)
        stats = LossStats()
        loss_total = 0.0
        for micro in _chunks(mini_batch, config.micro_batch_size):
            batch = pack_batch(
                [item.sample.prompt_ids for item in micro],
                [item.sample.response_ids for item in micro],
                [item.sample.response_mask for item in micro],
                pad_token_id=self.pad_token_id,
            ).to(self.device)
            width = batch.response_ids.shape[1]
            old = torch.tensor(
                [
                    list(item.sample.response_logprobs or []) + [0.0] * (width - len(item.sample.response_ids))
                    for item in micro
                ],
                dtype=torch.float32,
                device=self.device,
            )
            advantages = torch.tensor([item.advantage for item in micro], dtype=torch.float32, device=self.device)
            reference = self.reference_logprobs(batch)
            with self.autocast():
                logprobs, entropy = token_logprobs(self.model, batch, config.temperature, with_entropy=True)
            loss, micro_stats = clipped_policy_loss(
                logprobs,
                old,
                advantages,
                batch.loss_mask,
                clip_low=config.clip_low,
                clip_high=config.clip_high,
                token_count=token_count,
                ref_logprobs=reference,
                kl_coef=config.kl_coef,
                entropy=entropy,
                entropy_coef=config.entropy_coef,
            )
            loss.backward()
            stats.add(micro_stats)
            loss_total += float(loss.item())
        # With max_grad_norm 0 the norm is only measured (an infinite bound clips nothing).
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.parameters, config.max_grad_norm or math.inf))
        self.optimizer.step()
        return stats, loss_total, grad_norm
