"""Batched generation of the local backend: exact log-probs with and without neighbours, per-row sampling."""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

import pytest

from rollouthub.llm_proxy.local_api import SamplingParams
from tests.train_stack import TRAIN_ONLY

from .tiny_policy import lively_tiny_lm, mean_abs_difference, teacher_forced_logprobs

pytestmark = TRAIN_ONLY

PROMPTS = ["hi", "a much longer prompt, to pad the others well", "mid-sized one"]


@pytest.fixture(scope="module")
def tiny() -> Tuple[Any, Any]:
    return lively_tiny_lm(seed=0)


def prompt_ids(tokenizer: Any, text: str) -> List[int]:
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer.encode(rendered, add_special_tokens=False))


def decoder(tokenizer: Any) -> Any:
    import torch

    from rollouthub.llm_proxy.local_decode import BatchDecoder

    return BatchDecoder(torch, tokenizer, frozenset({tokenizer.eos_token_id}), tokenizer.pad_token_id)


def generate(tiny: Tuple[Any, Any], rows: List[Tuple[str, SamplingParams, int]], seeds: List[int]) -> List[Any]:
    import torch

    from rollouthub.llm_proxy.local_decode import DecodeRow

    model, tokenizer = tiny
    decode_rows = [
        DecodeRow(prompt_ids(tokenizer, text), params, budget, i) for i, (text, params, budget) in enumerate(rows)
    ]
    generators = [torch.Generator().manual_seed(seed) for seed in seeds]
    return decoder(tokenizer).generate(model, decode_rows, generators)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.7),
        SamplingParams(temperature=1.3, top_k=5, top_p=0.8),
    ],
    ids=["greedy", "t0.7", "t1.3-topk-topp"],
)
def test_served_logprobs_equal_a_teacher_forced_recomputation_batched_and_alone(
    tiny: Tuple[Any, Any], params: SamplingParams
) -> None:
    model, tokenizer = tiny
    batched = generate(tiny, [(text, params, 24) for text in PROMPTS], seeds=[1, 2, 3])
    alone = [
        generate(tiny, [(text, params, 24)], seeds=[seed])[0] for text, seed in zip(PROMPTS, [1, 2, 3], strict=True)
    ]
    for text, together, single in zip(PROMPTS, batched, alone, strict=True):
        ids = prompt_ids(tokenizer, text)
        for output in (together, single):
            recomputed = teacher_forced_logprobs(model, ids, output.token_ids, params.temperature)
            assert mean_abs_difference(recomputed, output.logprobs) < 1e-4
            assert max(abs(a - b) for a, b in zip(recomputed, output.logprobs, strict=True)) < 1e-4
        # padding and neighbours do not change what a row samples with its own generator
        assert together.token_ids == single.token_ids


def test_logprobs_are_not_truncated_by_top_k(tiny: Tuple[Any, Any]) -> None:
    """top_k = 1 samples the greedy tokens, but reports their probability under the whole distribution at T."""
    greedy = generate(tiny, [(PROMPTS[0], SamplingParams(temperature=0.0), 12)], seeds=[0])[0]
    top1 = generate(tiny, [(PROMPTS[0], SamplingParams(temperature=0.5, top_k=1), 12)], seeds=[0])[0]
    assert top1.token_ids == greedy.token_ids
    assert all(lp < -1e-3 for lp in top1.logprobs)  # a truncated distribution would report log(1) = 0
    model, tokenizer = tiny
    recomputed = teacher_forced_logprobs(model, prompt_ids(tokenizer, PROMPTS[0]), top1.token_ids, 0.5)
    assert mean_abs_difference(recomputed, top1.logprobs) < 1e-4


def first_fresh(items: Sequence[Any], start: int) -> int:
    """The first index >= ``start`` whose item does not occur before it."""
    return next(i for i in range(start, len(items)) if items[i] not in items[:i])


def test_each_row_keeps_its_own_budget_stop_and_top_logprobs(tiny: Tuple[Any, Any]) -> None:
    """Rows sampled with the same seed follow the same answer until their own stop condition ends them."""
    _, tokenizer = tiny
    params = SamplingParams(temperature=1.0)
    base = generate(tiny, [(PROMPTS[1], params, 30)], seeds=[7])[0]
    text = base.text
    k = next(i for i in range(1, len(text) - 1) if text.find(text[i : i + 2]) == i)
    stop = text[k : k + 2]
    j = first_fresh(base.token_ids, 2)
    rows = [
        (PROMPTS[1], SamplingParams(temperature=1.0, stop=("\x00", stop)), 30),
        (PROMPTS[1], SamplingParams(temperature=1.0, logprobs=True, top_logprobs=3), 4),
        (PROMPTS[1], SamplingParams(temperature=1.0, stop_token_ids=(base.token_ids[j],)), 30),
    ]
    stopped, short, stop_token = generate(tiny, rows, seeds=[7, 7, 7])
    assert (stopped.finish_reason, stopped.stop_reason, stopped.text) == ("stop", stop, text[:k])
    # the answer's tokens run up to the one that completes the stop string (the text is cut before it)
    ends = [n for n in range(1, 31) if stop in tokenizer.decode(base.token_ids[:n], skip_special_tokens=True)]
    assert stopped.token_ids == base.token_ids[: ends[0]]
    assert (short.finish_reason, short.stop_reason, short.token_ids) == ("length", None, base.token_ids[:4])
    for chosen, logprob, top in zip(short.token_ids, short.logprobs, short.top_logprobs, strict=True):
        assert len(top) == 3 and [value for _, value in top] == sorted((value for _, value in top), reverse=True)
        alternatives = dict(top)
        if chosen in alternatives:
            assert alternatives[chosen] == pytest.approx(logprob)
        else:
            assert logprob <= top[-1][1]
    assert (stop_token.finish_reason, stop_token.stop_reason) == ("stop", base.token_ids[j])
    assert stop_token.token_ids == base.token_ids[: j + 1]
    assert stop_token.text == tokenizer.decode(base.token_ids[:j], skip_special_tokens=True)


def test_the_end_of_sequence_token_ends_the_answer_and_stays_in_its_token_ids(tiny: Tuple[Any, Any]) -> None:
    """With a token of a sampled answer declared end-of-sequence, the answer ends on it (kept in the ids, like vLLM)."""
    import torch

    from rollouthub.llm_proxy.local_decode import BatchDecoder, DecodeRow

    model, tokenizer = tiny
    params = SamplingParams(temperature=1.0)
    base = generate(tiny, [(PROMPTS[2], params, 20)], seeds=[3])[0]
    j = first_fresh(base.token_ids, 2)
    custom = BatchDecoder(torch, tokenizer, frozenset({base.token_ids[j]}), tokenizer.pad_token_id)
    row = DecodeRow(prompt_ids(tokenizer, PROMPTS[2]), params, 20, 0)
    (output,) = custom.generate(model, [row], [torch.Generator().manual_seed(3)])
    assert (output.finish_reason, output.stop_reason) == ("stop", None)
    assert output.token_ids == base.token_ids[: j + 1]
    assert output.text == tokenizer.decode(base.token_ids[:j], skip_special_tokens=True)


def test_filter_top_k_top_p() -> None:
    import torch

    from rollouthub.llm_proxy.local_decode import filter_top_k_top_p

    scores = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = lambda filtered: torch.isfinite(filtered)[0].tolist()  # noqa: E731
    assert kept(filter_top_k_top_p(torch, scores, 0, 1.0)) == [True] * 4
    assert kept(filter_top_k_top_p(torch, scores, 2, 1.0)) == [True, True, False, False]
    assert kept(filter_top_k_top_p(torch, scores, 0, 0.7)) == [True, True, False, False]  # 0.5 < 0.7 <= 0.8
    assert kept(filter_top_k_top_p(torch, scores, 0, 0.5)) == [True, False, False, False]
    assert kept(filter_top_k_top_p(torch, scores, 0, 0.01)) == [True, False, False, False]  # the best always stays
    assert kept(filter_top_k_top_p(torch, scores[:, [3, 1, 0, 2]], 3, 0.9)) == [False, True, True, True]
