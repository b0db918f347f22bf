"""The GRPO loss as pure functions over tensors: packing, token log-probs, group advantages, the clipped loss.

Layout of a packed batch: each row is ``prompt + response``; prompts are *left*-padded to the widest prompt and
responses *right*-padded to the longest response, so every response starts at the same column. Position ids count
real tokens only (``cumsum(attention_mask) - 1``), so a row's log-probs do not depend on how much padding it got:
they equal those of the row alone, and those of a left-padded batched generation.

Loss aggregation is the **token mean**: the per-token losses of all policy-sampled tokens of a mini-batch are summed
and divided by their count, so every sampled token weighs the same whatever the length of its response (a long
answer is not diluted as in a per-sequence mean, DAPO's choice). Micro-batches divide by the count of the whole
mini-batch, so gradient accumulation gives the gradient of the full mini-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

from rollouthub.utils.extras import import_extra

import_extra("torch", extra="train", feature="GRPO")
import torch  # noqa: E402  (after the one-line message naming the extra when torch is missing)

from .config import AdvantageMode  # noqa: E402

__all__ = [
    "PackedBatch",
    "LossStats",
    "pack_batch",
    "token_logprobs",
    "group_advantages",
    "k3_kl",
    "clipped_policy_loss",
]


@dataclass
class PackedBatch:
    """Samples packed for one forward pass (see the module docstring for the layout)."""

    input_ids: torch.Tensor
    """``[batch, prompt_width + response_width]`` token ids (padding: the pad id)."""
    attention_mask: torch.Tensor
    """1 on real tokens, 0 on padding (same shape as ``input_ids``)."""
    position_ids: torch.Tensor
    """Positions counting real tokens only."""
    response_ids: torch.Tensor
    """``[batch, response_width]`` the response tokens (right-padded)."""
    loss_mask: torch.Tensor
    """``[batch, response_width]`` float, 1 on the tokens the policy sampled, 0 on spliced tokens and padding."""
    prompt_width: int

    def to(self, device: Any) -> PackedBatch:
        """The same batch on ``device``."""
        return PackedBatch(
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            position_ids=self.position_ids.to(device),
            response_ids=self.response_ids.to(device),
            loss_mask=self.loss_mask.to(device),
            prompt_width=self.prompt_width,
        )


def pack_batch(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    response_masks: Optional[Sequence[Sequence[int]]] = None,
    *,
    pad_token_id: int,
) -> PackedBatch:
    """Pack token lists into a :class:`PackedBatch` (``response_masks`` default to all ones).

    Raises ``ValueError`` on an empty prompt or response, or a mask of another length than its response.
    """
    if not prompts or len(prompts) != len(responses):
        raise ValueError(
            f"pack_batch needs as many prompts as responses (>= 1): got {len(prompts)} and {len(responses)}"
        )
    masks = response_masks if response_masks is not None else [[1] * len(response) for response in responses]
    if len(masks) != len(responses):
        raise ValueError(f"pack_batch needs one mask per response: got {len(masks)} for {len(responses)}")
    prompt_width = max(len(prompt) for prompt in prompts)
    response_width = max(len(response) for response in responses)
    rows, attention, loss_rows = [], [], []
    for index, (prompt, response, mask) in enumerate(zip(prompts, responses, masks, strict=True)):
        if not prompt or not response:
            raise ValueError(f"pack_batch: sample {index} has an empty {'prompt' if not prompt else 'response'}")
        if len(mask) != len(response):
            raise ValueError(f"pack_batch: sample {index} has {len(mask)} mask values for {len(response)} tokens")
        left, right = prompt_width - len(prompt), response_width - len(response)
        rows.append([pad_token_id] * left + list(prompt) + list(response) + [pad_token_id] * right)
        attention.append([0] * left + [1] * (len(prompt) + len(response)) + [0] * right)
        loss_rows.append([float(value) for value in mask] + [0.0] * right)
    input_ids = torch.tensor(rows, dtype=torch.long)
    attention_mask = torch.tensor(attention, dtype=torch.long)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return PackedBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        response_ids=input_ids[:, prompt_width:],
        loss_mask=torch.tensor(loss_rows, dtype=torch.float32),
        prompt_width=prompt_width,
    )


def token_logprobs(
    model: Any, batch: PackedBatch, temperature: float, *, with_entropy: bool = False
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Teacher-forced log-probs of the response tokens at ``temperature``: ``log_softmax(logits / T)[token]``.

    Returns ``(logprobs, entropy)``, each ``[batch, response_width]`` float32 (``entropy`` is ``None`` unless
    asked): the values on padding are meaningless, weigh them by ``batch.loss_mask``. Only the logits of response
    positions are computed (``logits_to_keep``), in float32 whatever the model's dtype.
    """
    width = batch.response_ids.shape[1]
    output = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=width + 1,
        use_cache=False,
    )
    # The logits at position i predict token i + 1: those of the response come from the last width + 1 positions,
    # all but the final one.
    logits = output.logits[:, :-1, :].float() / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    chosen = log_probs.gather(dim=-1, index=batch.response_ids.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(dim=-1) if with_entropy else None
    return chosen, entropy


def group_advantages(
    rewards: Sequence[float], groups: Sequence[Hashable], mode: AdvantageMode = "mean_std", eps: float = 1e-6
) -> List[float]:
    """The advantage of each reward relative to the others of its group (rewards with equal ``groups`` keys).

    ``mean_std``: ``(r - mean) / (std + eps)`` with the sample standard deviation (Bessel's correction);
    ``mean``: ``r - mean``; ``leave_one_out``: ``r - mean of the others`` (= ``n / (n - 1) * (r - mean)``).
    A group of one rollout has no baseline, a group of equal rewards no signal: their advantages are 0.
    """
    if len(rewards) != len(groups):
        raise ValueError(f"group_advantages: {len(rewards)} rewards for {len(groups)} group keys")
    members: Dict[Hashable, List[int]] = {}
    for index, key in enumerate(groups):
        members.setdefault(key, []).append(index)
    advantages = [0.0] * len(rewards)
    for indices in members.values():
        count = len(indices)
        if count < 2:
            continue
        values = torch.tensor([float(rewards[index]) for index in indices], dtype=torch.float64)
        if bool((values == values[0]).all()):
            continue  # all equal: no signal (and no 0 / 0 when eps is 0)
        centred = values - values.mean()
        if mode == "mean_std":
            scaled = centred / (values.std(correction=1) + eps)
        elif mode == "mean":
            scaled = centred
        elif mode == "leave_one_out":
            scaled = centred * count / (count - 1)
        else:
            raise ValueError(f"group_advantages: unknown mode {mode!r}")
        for index, value in zip(indices, scaled.tolist(), strict=True):
            advantages[index] = value
    return advantages


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(policy || reference): ``exp(ref - lp) - (ref - lp) - 1`` (>= 0, unbiased)."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1


@dataclass
class LossStats:
    """Sums over the tokens of one loss call; add them up over micro-batches, then :meth:`summary`."""

    tokens: float = 0.0
    clipped: float = 0.0
    ratio_sum: float = 0.0
    ratio_min: float = float("inf")
    ratio_max: float = float("-inf")
    kl_sum: float = 0.0
    entropy_sum: float = 0.0

    def add(self, other: LossStats) -> None:
        """Accumulate ``other`` into this one."""
        self.tokens += other.tokens
        self.clipped += other.clipped
        self.ratio_sum += other.ratio_sum
        self.ratio_min = min(self.ratio_min, other.ratio_min)
        self.ratio_max = max(self.ratio_max, other.ratio_max)
        self.kl_sum += other.kl_sum
        self.entropy_sum += other.entropy_sum

    def summary(self) -> Dict[str, float]:
        """Token means: ``clip_fraction``, ``ratio_mean``, ``ratio_min``, ``ratio_max``, ``kl``, ``entropy``."""
        count = max(self.tokens, 1.0)
        empty = self.tokens == 0
        return {
            "clip_fraction": self.clipped / count,
            "ratio_mean": 1.0 if empty else self.ratio_sum / count,
            "ratio_min": 1.0 if empty else self.ratio_min,
            "ratio_max": 1.0 if empty else self.ratio_max,
            "kl": self.kl_sum / count,
            "entropy": self.entropy_sum / count,
        }


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    token_count: Optional[float] = None,
    ref_logprobs: Optional[torch.Tensor] = None,
    kl_coef: float = 0.0,
    entropy: Optional[torch.Tensor] = None,
    entropy_coef: float = 0.0,
) -> Tuple[torch.Tensor, LossStats]:
    """The PPO-clipped, importance-weighted policy loss over the tokens where ``loss_mask`` is 1.

    Per token: ``-min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)`` with ``ratio = exp(logprobs -
    old_logprobs)`` (``old_logprobs``: the serving engine's), plus ``kl_coef * k3_kl`` to the reference and minus
    ``entropy_coef * entropy``; summed over masked-in tokens and divided by ``token_count`` (default: their number
    here; pass the mini-batch's count when accumulating micro-batches). ``advantages`` is ``[batch]`` (one per
    sample, broadcast over its tokens) or ``[batch, width]``. Masked-out tokens get exactly zero gradient.
    """
    mask = loss_mask.to(logprobs.dtype)
    per_token_advantage = advantages.to(logprobs.dtype)
    if per_token_advantage.dim() == 1:
        per_token_advantage = per_token_advantage.unsqueeze(1).expand_as(logprobs)
    # Masked positions get a log-ratio of exactly 0 before exp(), so a garbage value there can neither overflow nor
    # reach the gradient (a 0 * inf would be NaN).
    log_ratio = torch.where(mask > 0, logprobs - old_logprobs.to(logprobs.dtype), torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    unclipped = ratio * per_token_advantage
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * per_token_advantage
    per_token = -torch.minimum(unclipped, clipped)
    kl = None
    if ref_logprobs is not None:
        safe_ref = torch.where(mask > 0, ref_logprobs.to(logprobs.dtype), logprobs.detach())
        kl = k3_kl(logprobs, safe_ref)
        per_token = per_token + kl_coef * kl
    if entropy is not None and entropy_coef:
        per_token = per_token - entropy_coef * entropy
    count = float(mask.sum().item()) if token_count is None else float(token_count)
    loss = torch.where(mask > 0, per_token, torch.zeros_like(per_token)).sum() / max(count, 1.0)

    with torch.no_grad():
        selected = mask > 0
        tokens = float(selected.sum().item())
        # A token is clipped when the clipped term is the active one and has no gradient.
        active_clip = (clipped < unclipped) & selected
        ratios = ratio[selected]
        stats = LossStats(
            tokens=tokens,
            clipped=float(active_clip.sum().item()),
            ratio_sum=float(ratios.sum().item()),
            ratio_min=float(ratios.min().item()) if tokens else float("inf"),
            ratio_max=float(ratios.max().item()) if tokens else float("-inf"),
            kl_sum=float(kl[selected].sum().item()) if kl is not None else 0.0,
            entropy_sum=float(entropy[selected].sum().item()) if entropy is not None else 0.0,
        )
    return loss, stats
