"""Batched sampling straight from a transformers model, with the log-probs of the sampled tokens at temperature T.

The RL demo's direct loop (no proxy, no runners), the exactness tests and the learning benchmark use it. The
log-probs are ``log_softmax(logits / T)`` of the *raw* logits (not truncated by top-k/top-p: sampling here uses the
whole distribution), as the GRPO trainer recomputes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Sequence

from rollouthub.utils.extras import import_extra

import_extra("torch", extra="train", feature="Sampling from a local model")
import torch  # noqa: E402  (after the one-line message naming the extra when torch is missing)

__all__ = ["SampledResponse", "sample_responses"]


@dataclass(frozen=True)
class SampledResponse:
    """The tokens generated after one prompt (up to and including EOS) and their log-probs."""

    token_ids: List[int]
    logprobs: List[float]
    finished: bool
    """Whether the response ended with EOS (``False``: cut at ``max_new_tokens``)."""


@torch.no_grad()
def sample_responses(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    temperature: float,
    max_new_tokens: int,
    pad_token_id: int,
    eos_token_id: int,
    greedy: bool = False,
) -> List[SampledResponse]:
    """Generate one response per prompt in a single left-padded batch (``greedy``: argmax, else sampling at T).

    Sampling draws from torch's global generator (seed it with ``torch.manual_seed`` for repeatable runs).
    """
    if not prompts:
        return []
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (use greedy=True for argmax): got {temperature}")
    device = next(model.parameters()).device
    width = max(len(prompt) for prompt in prompts)
    input_ids = torch.tensor([[pad_token_id] * (width - len(p)) + list(p) for p in prompts], device=device)
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    options: dict[str, Any] = (
        {"do_sample": False}
        if greedy
        else {
            "do_sample": True,
            "temperature": temperature,
            "top_k": 0,
            "top_p": 1.0,
        }
    )
    output = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        max_new_tokens=max_new_tokens,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        **options,
    )
    generated = output.sequences[:, width:].tolist()
    log_probs = torch.stack([torch.log_softmax(step.float() / temperature, dim=-1) for step in output.logits], dim=1)
    responses = []
    for row, tokens in enumerate(generated):
        length = tokens.index(eos_token_id) + 1 if eos_token_id in tokens else len(tokens)
        kept = tokens[:length]
        chosen = log_probs[row, torch.arange(length), torch.tensor(kept)].tolist()
        responses.append(SampledResponse(kept, chosen, finished=bool(kept) and kept[-1] == eos_token_id))
    return responses
