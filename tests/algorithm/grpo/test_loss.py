"""Exactness of the GRPO loss: recomputed log-probs, advantages, ratios, clipping, masks, accumulation."""

from __future__ import annotations

import math
from typing import Any, List, Tuple

import pytest

from tests.train_stack import TRAIN_ONLY

pytestmark = TRAIN_ONLY


def _model_and_prompts(seed: int = 0) -> Tuple[Any, Any, List[List[int]]]:
    from rollouthub.testing.tiny_lm import build_tiny_lm

    model, tokenizer = build_tiny_lm(seed=seed)
    questions = ["hi", "what is 2+2?", "a much longer question, padded least", "x"]
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)["input_ids"]
        for q in questions
    ]
    return model, tokenizer, prompts


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recomputed_logprobs_equal_those_of_a_left_padded_batched_generation(temperature: float) -> None:
    import torch

    from rollouthub.algorithm.grpo.loss import pack_batch, token_logprobs
    from rollouthub.rl_demo.sampling import sample_responses

    model, tokenizer, prompts = _model_and_prompts()
    torch.manual_seed(0)
    prompts = prompts * 4  # 16 rows, prompts of 4 lengths: every row but the longest is left-padded
    responses = sample_responses(
        model,
        prompts,
        temperature=temperature,
        max_new_tokens=12,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    lengths = {len(response.token_ids) for response in responses}
    assert len(lengths) > 1, "responses of different lengths exercise the right padding"
    batch = pack_batch(prompts, [r.token_ids for r in responses], pad_token_id=tokenizer.pad_token_id)
    with torch.no_grad():
        recomputed, _ = token_logprobs(model, batch, temperature)
    deltas = []
    for row, response in enumerate(responses):
        served = torch.tensor(response.logprobs)
        deltas.append((recomputed[row, : len(served)] - served).abs())
    every = torch.cat(deltas)
    assert every.numel() == sum(len(r.token_ids) for r in responses)
    assert every.mean().item() < 1e-4
    assert every.max().item() < 1e-3


def test_a_rows_logprobs_do_not_depend_on_the_padding_it_got() -> None:
    import torch

    from rollouthub.algorithm.grpo.loss import pack_batch, token_logprobs

    model, tokenizer, prompts = _model_and_prompts(seed=1)
    responses = [[5 + i for i in range(n)] for n in (3, 9, 1, 6)]
    masks = [[1, 0, 1], [1] * 4 + [0] * 3 + [1] * 2, [1], [0, 1, 1, 1, 1, 1]]
    batch = pack_batch(prompts, responses, masks, pad_token_id=tokenizer.pad_token_id)
    assert batch.loss_mask.sum().item() == sum(sum(mask) for mask in masks)
    assert batch.attention_mask[0, 0].item() == 0 and batch.attention_mask[2, -1].item() == 0
    with torch.no_grad():
        together, entropy = token_logprobs(model, batch, 0.9, with_entropy=True)
        for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
            alone, _ = token_logprobs(model, pack_batch([prompt], [response], pad_token_id=0), 0.9)
            assert torch.allclose(together[row, : len(response)], alone[0], atol=1e-5)
    assert entropy is not None and (entropy >= 0).all() and (entropy <= math.log(len(tokenizer)) + 1e-4).all()


def test_pack_batch_rejects_bad_input_in_one_line() -> None:
    from rollouthub.algorithm.grpo.loss import pack_batch

    with pytest.raises(ValueError, match="sample 1 has 2 mask values for 3 tokens"):
        pack_batch([[1], [2]], [[3], [4, 5, 6]], [[1], [1, 1]], pad_token_id=0)
    with pytest.raises(ValueError, match="sample 0 has an empty response"):
        pack_batch([[1]], [[]], pad_token_id=0)
    with pytest.raises(ValueError, match="as many prompts as responses"):
        pack_batch([[1]], [], pad_token_id=0)


def test_group_advantages_on_hand_checked_numbers() -> None:
    from rollouthub.algorithm.grpo.loss import group_advantages

    rewards = [1.0, 0.0, 0.0, 1.0, 0.5, 1.0, 1.0, 0.2]
    groups = ["a", "a", "a", "a", "b", "c", "c", "a"]
    # Group a: rewards 1, 0, 0, 1, 0.2 (mean 0.44); b: one rollout (no baseline); c: all equal.
    mean = 0.44
    std = math.sqrt(sum((r - mean) ** 2 for r in (1, 0, 0, 1, 0.2)) / 4)  # 0.5177 (Bessel)
    got = group_advantages(rewards, groups, "mean_std", eps=0.0)
    assert got[:4] == pytest.approx([0.56 / std, -0.44 / std, -0.44 / std, 0.56 / std])
    assert got[0] == pytest.approx(1.08170, abs=1e-4)
    assert got[4:7] == [0.0, 0.0, 0.0]
    assert got[7] == pytest.approx(-0.24 / std)
    assert group_advantages(rewards, groups, "mean") == pytest.approx([0.56, -0.44, -0.44, 0.56, 0, 0, 0, -0.24])
    # Leave-one-out: 1 - mean(0, 0, 1, 0.2) = 0.7; 0 - mean(1, 0, 1, 0.2) = -0.55; 0.2 - mean(1, 0, 0, 1) = -0.3.
    loo = group_advantages(rewards, groups, "leave_one_out")
    assert loo == pytest.approx([0.7, -0.55, -0.55, 0.7, 0, 0, 0, -0.3])
    assert group_advantages([1.0, 0.0], ["g", "g"], "mean_std", eps=1e-6)[0] == pytest.approx(
        0.5 / (math.sqrt(0.5) + 1e-6)
    )
    with pytest.raises(ValueError, match="3 rewards for 2 group keys"):
        group_advantages([1.0, 0.0, 1.0], ["a", "b"])


def _loss(**overrides: Any) -> Tuple[Any, Any]:
    import torch

    from rollouthub.algorithm.grpo.loss import clipped_policy_loss

    values = {
        "logprobs": torch.log(torch.tensor([[0.5, 0.5], [0.2, 0.9]])),
        "old_logprobs": torch.log(torch.tensor([[0.5, 0.25], [0.4, 0.9]])),
        "advantages": torch.tensor([1.0, -2.0]),
        "loss_mask": torch.tensor([[1.0, 1.0], [1.0, 1.0]]),
        "clip_low": 0.2,
        "clip_high": 0.3,
    }
    values.update(overrides)
    return clipped_policy_loss(**values)


def test_clipped_loss_on_hand_checked_numbers() -> None:
    # Ratios: 1, 2 (clipped to 1.3, A=+1 -> clipped term active), 0.5 (clipped to 0.8, A=-2 -> clipped term active), 1.
    # Per-token loss: -min(r*A, clip(r)*A): -1, -1.3, -(-1.6) = 1.6, -(-2) = 2; token mean 1.3 / 4.
    loss, stats = _loss()
    assert loss.item() == pytest.approx((-1 - 1.3 + 1.6 + 2) / 4)
    assert stats.tokens == 4 and stats.clipped == 2
    summary = stats.summary()
    assert summary["clip_fraction"] == 0.5
    assert summary["ratio_mean"] == pytest.approx((1 + 2 + 0.5 + 1) / 4)
    assert (summary["ratio_min"], summary["ratio_max"]) == pytest.approx((0.5, 2.0))
    # A positive advantage with a ratio below the range is not clipped (the unclipped term is smaller).
    import torch

    _, below = _loss(advantages=torch.tensor([1.0, 1.0]))
    assert below.clipped == 1  # only the ratio 2 token
    # token_count divides instead of the local count (micro-batches of a larger mini-batch).
    half, _ = _loss(token_count=8)
    assert half.item() == pytest.approx(loss.item() / 2)


def test_the_ratio_is_one_and_nothing_is_clipped_on_policy() -> None:
    import torch

    lp = torch.log(torch.tensor([[0.3, 0.6, 0.1]]))
    loss, stats = _loss(
        logprobs=lp, old_logprobs=lp.clone(), advantages=torch.tensor([2.0]), loss_mask=torch.ones(1, 3)
    )
    assert stats.clipped == 0 and stats.summary()["ratio_mean"] == 1.0
    assert loss.item() == pytest.approx(-2.0)


def test_masked_tokens_get_exactly_zero_gradient_and_do_not_change_the_loss() -> None:
    import torch

    from rollouthub.algorithm.grpo.loss import clipped_policy_loss

    torch.manual_seed(0)
    logits = torch.randn(2, 4, 11, requires_grad=True)
    targets = torch.randint(0, 11, (2, 4))
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
    old = torch.randn(2, 4) - 2.5

    def loss_of(values: Any) -> Any:
        logprobs = torch.log_softmax(values, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        ref = logprobs.detach() + 0.3
        entropy = -(torch.log_softmax(values, -1).exp() * torch.log_softmax(values, -1)).sum(-1)
        loss, _ = clipped_policy_loss(
            logprobs, old, torch.tensor([0.7, -1.2]), mask, clip_low=0.2, clip_high=0.28,
            ref_logprobs=ref, kl_coef=0.1, entropy=entropy, entropy_coef=0.01,
        )  # fmt: skip
        return loss

    loss = loss_of(logits)
    loss.backward()
    assert logits.grad is not None
    masked = mask == 0
    assert torch.count_nonzero(logits.grad[masked]) == 0
    assert torch.count_nonzero(logits.grad[~masked]) > 0
    with torch.no_grad():
        changed = logits.detach().clone()
        changed[masked] += 100.0 * torch.randn_like(changed[masked])  # even absurd values on masked positions
        assert loss_of(changed).item() == loss.item()


def test_k3_kl_is_zero_on_equal_policies_and_positive_otherwise() -> None:
    import torch

    from rollouthub.algorithm.grpo.loss import k3_kl

    lp = torch.tensor([-0.1, -2.0, -5.0])
    assert torch.equal(k3_kl(lp, lp), torch.zeros(3))
    other = torch.tensor([-0.3, -1.0, -5.5])
    delta = other - lp
    assert torch.allclose(k3_kl(lp, other), delta.exp() - delta - 1)
    assert (k3_kl(lp, other) > 0).all()


def test_accumulated_micro_batches_give_the_gradient_of_the_whole_mini_batch() -> None:
    import torch

    from rollouthub.algorithm.grpo.loss import clipped_policy_loss, pack_batch, token_logprobs

    model, tokenizer, prompts = _model_and_prompts(seed=2)
    responses = [[7, 8, 9], [10] * 7, [11, 12], [13] * 5]
    masks = [[1, 1, 1], [1, 0, 0, 1, 1, 1, 1], [1, 1], [1, 1, 0, 1, 1]]
    old = [[-4.0] * len(r) for r in responses]
    advantages = [1.0, -0.5, 0.3, -1.1]
    count = float(sum(sum(m) for m in masks))

    def gradient(chunks: List[List[int]]) -> List[Any]:
        model.zero_grad()
        for rows in chunks:
            batch = pack_batch([prompts[i] for i in rows], [responses[i] for i in rows], [masks[i] for i in rows],
                               pad_token_id=0)  # fmt: skip
            width = batch.response_ids.shape[1]
            old_rows = torch.tensor([old[i] + [0.0] * (width - len(old[i])) for i in rows])
            logprobs, _ = token_logprobs(model, batch, 1.0)
            loss, _ = clipped_policy_loss(logprobs, old_rows, torch.tensor([advantages[i] for i in rows]),
                                          batch.loss_mask, clip_low=0.2, clip_high=0.2, token_count=count)  # fmt: skip
            loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    whole = gradient([[0, 1, 2, 3]])
    accumulated = gradient([[0], [1, 2], [3]])
    for a, b in zip(whole, accumulated, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
