"""Helpers of the local-backend tests (need the ``[train]`` extra; torch is imported inside the functions)."""

from __future__ import annotations

import threading
from typing import Any, List, Sequence


def teacher_forced_logprobs(
    model: Any, prompt_ids: Sequence[int], response_ids: Sequence[int], temperature: float
) -> List[float]:
    """What a trainer recomputes: one forward pass over prompt + response, ``log_softmax(logits / T)`` of each
    response token (``T = 1`` for greedy answers), in float32."""
    import torch

    t = temperature if temperature > 0 else 1.0
    with torch.no_grad():
        ids = torch.tensor([list(prompt_ids) + list(response_ids)])
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
        logprobs = torch.log_softmax(logits / t, dim=-1)
        return logprobs.gather(1, torch.tensor(list(response_ids))[:, None])[:, 0].tolist()  # type: ignore[no-any-return]


def mean_abs_difference(a: Sequence[float], b: Sequence[float]) -> float:
    """Mean |a - b| of two equally long sequences."""
    assert len(a) == len(b) and a
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


def gated(model: Any) -> Any:
    """``model`` behind a gate: every forward pass announces itself (``entered``) and waits for ``gate`` — a real
    model whose generation the test can hold in flight."""
    import torch

    class Gated(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner
            self.entered = threading.Event()
            self.gate = threading.Event()

        @property
        def config(self) -> Any:
            return self.inner.config

        def forward(self, **kwargs: Any) -> Any:
            self.entered.set()
            assert self.gate.wait(30), "the test never opened the gate"
            return self.inner(**kwargs)

    return Gated(model)


def lively_tiny_lm(seed: int = 0) -> Any:
    """``build_tiny_lm(seed)`` with its attention and MLP projections scaled up ×8: freshly initialised, the tiny
    model's greedy answer repeats its last input token (tied embeddings dominate); scaled, its answers vary with the
    prompt and the weights, so comparing answers means something."""
    import torch

    from rollouthub.testing.tiny_lm import build_tiny_lm

    model, tokenizer = build_tiny_lm(seed=seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("proj.weight"):
                parameter.mul_(8.0)
    return model, tokenizer
