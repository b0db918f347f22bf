"""Batched token generation for the local policy backend: one left-padded batch, each row with its own sampling.

A batch holds the sequences of several requests. They are left-padded to one length with an attention mask and
position ids counted from each row's first real token, so a row's logits do not depend on its neighbours (beyond
float rounding). Decoding is incremental with the model's key/value cache. Every request samples its rows with its
own ``torch.Generator`` (seeded by the request's ``seed``) and its own temperature, top-k, top-p, length and stop
conditions — which ``model.generate`` cannot do per row in one batch, hence this loop over the model's forward.

The log-prob of a sampled token is ``log_softmax(logits / T)`` at the request's temperature ``T`` (``T = 1`` for
greedy decoding) over the **whole** vocabulary: top-k/top-p only restrict what is sampled, never the reported
log-probs. A teacher-forced forward pass over prompt + answer at the same ``T`` recomputes them.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

from .local_api import SamplingParams, SequenceOutput

if TYPE_CHECKING:
    import torch

__all__ = ["DecodeRow", "BatchDecoder", "model_device", "filter_top_k_top_p"]


@dataclass
class DecodeRow:
    """One sequence to generate: its prompt, its request's sampling parameters and token budget.

    Rows of one request share ``group`` (they are sampled with one generator, in row order).
    """

    prompt_ids: List[int]
    params: SamplingParams
    max_tokens: int
    group: int


@dataclass
class _RowState:
    row: DecodeRow
    token_ids: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    top_logprobs: List[List[Tuple[int, float]]] = field(default_factory=list)
    finish_reason: Optional[str] = None
    stop_reason: Union[None, int, str] = None
    stop_at: Optional[int] = None  # where a matched stop string begins in the decoded text

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


def model_device(model: Any) -> torch.device:
    """The device of the model's first parameter."""
    return next(model.parameters()).device  # type: ignore[no-any-return]


def filter_top_k_top_p(torch_module: Any, scores: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """``scores`` (rows × vocabulary) with every token outside the ``top_k`` most likely and outside the smallest set
    whose probability reaches ``top_p`` set to ``-inf`` (``top_k`` 0 and ``top_p`` 1 keep everything; the most likely
    token always stays)."""
    if 0 < top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = scores.sort(dim=-1, descending=True)
        probs = ordered.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # the mass of the strictly more likely tokens
        drop_sorted = before >= top_p
        drop = torch_module.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores


def _keyword_of(model: Any, candidates: Sequence[str]) -> Optional[str]:
    """The first of ``candidates`` that the model's forward (or a wrapped base model's) accepts."""
    targets = [model]
    base = getattr(model, "get_base_model", None)
    if callable(base):  # e.g. a peft model, whose forward takes **kwargs
        targets.append(base())
    for target in targets:
        try:
            parameters = inspect.signature(target.forward).parameters
        except (TypeError, ValueError):
            continue
        for name in candidates:
            if name in parameters:
                return name
    return None


class BatchDecoder:
    """Generate batches of :class:`DecodeRow` with a causal LM (call from one thread at a time).

    Args:
        torch_module: the imported ``torch``.
        tokenizer: decodes answers (stop strings, the answer's text).
        eos_token_ids: tokens that end a sequence with ``finish_reason="stop"``.
        pad_token_id: the token that fills left padding and finished rows.
    """

    def __init__(self, torch_module: Any, tokenizer: Any, eos_token_ids: FrozenSet[int], pad_token_id: int) -> None:
        """Keep the decoding constants."""
        self.torch = torch_module
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.pad_token_id = pad_token_id

    def generate(self, model: Any, rows: Sequence[DecodeRow], generators: Sequence[Any]) -> List[SequenceOutput]:
        """Generate every row (``generators[row.group]`` samples the rows of one request); outputs in row order."""
        torch = self.torch
        device = model_device(model)
        width = max(len(row.prompt_ids) for row in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long, device=device)
        attention = torch.zeros((len(rows), width), dtype=torch.long, device=device)
        for i, row in enumerate(rows):
            input_ids[i, width - len(row.prompt_ids) :] = torch.tensor(row.prompt_ids, dtype=torch.long)
            attention[i, width - len(row.prompt_ids) :] = 1
        positions = (attention.cumsum(dim=-1) - 1).clamp(min=0)
        states = [_RowState(row) for row in rows]
        keep = _keyword_of(model, ("logits_to_keep", "num_logits_to_keep"))
        extra: Dict[str, Any] = {keep: 1} if keep else {}
        with torch.inference_mode():
            out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True, **extra)
            cache_key = "cache" if "cache" in out.keys() else "past_key_values"
            next_position = positions[:, -1:] + 1
            for _ in range(max(row.max_tokens for row in rows)):
                tokens = self._sample(out.logits[:, -1, :].float(), states, generators)
                if all(state.finished for state in states):
                    break
                attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=-1)
                out = model(
                    input_ids=tokens[:, None],
                    attention_mask=attention,
                    position_ids=next_position,
                    use_cache=True,
                    **{cache_key: out[cache_key]},
                    **extra,
                )
                next_position = next_position + 1
        return [self._output(state) for state in states]

    def _sample(self, logits: torch.Tensor, states: List[_RowState], generators: Sequence[Any]) -> torch.Tensor:
        """Sample the next token of every unfinished row; finished rows get the padding token."""
        torch = self.torch
        tokens = torch.full((len(states),), self.pad_token_id, dtype=torch.long, device=logits.device)
        groups: Dict[int, List[int]] = {}
        for i, state in enumerate(states):
            if not state.finished:
                groups.setdefault(state.row.group, []).append(i)
        for group, indices in groups.items():
            params = states[indices[0]].row.params
            index = torch.tensor(indices, dtype=torch.long, device=logits.device)
            rows_logits = logits.index_select(0, index)
            logprobs = torch.log_softmax(rows_logits / params.logprob_temperature, dim=-1)
            if params.greedy:
                chosen = rows_logits.argmax(dim=-1)
            else:
                scores = filter_top_k_top_p(torch, rows_logits / params.temperature, params.top_k, params.top_p)
                chosen = torch.multinomial(scores.softmax(dim=-1), 1, generator=generators[group]).squeeze(-1)
            chosen_logprobs = logprobs.gather(-1, chosen[:, None]).squeeze(-1).tolist()
            top: List[List[Tuple[int, float]]] = [[] for _ in indices]
            if params.top_logprobs:
                values, ids = logprobs.topk(params.top_logprobs, dim=-1)
                top = [
                    list(zip(i_row, v_row, strict=True))
                    for i_row, v_row in zip(ids.tolist(), values.tolist(), strict=True)
                ]
            tokens[index] = chosen
            for j, (token, logprob) in enumerate(zip(chosen.tolist(), chosen_logprobs, strict=True)):
                self._append(states[indices[j]], token, logprob, top[j])
        return tokens

    def _append(self, state: _RowState, token: int, logprob: float, top: List[Tuple[int, float]]) -> None:
        """Record one sampled token and decide whether the row is finished."""
        state.token_ids.append(token)
        state.logprobs.append(logprob)
        state.top_logprobs.append(top)
        params = state.row.params
        if token in params.stop_token_ids:
            state.finish_reason, state.stop_reason = "stop", token
        elif token in self.eos_token_ids:
            state.finish_reason = "stop"
        elif params.stop:
            text = self.tokenizer.decode(state.token_ids, skip_special_tokens=True)
            found = [(text.find(stop), stop) for stop in params.stop if stop in text]
            if found:
                state.stop_at, state.stop_reason = min(found)
                state.finish_reason = "stop"
        if state.finish_reason is None and len(state.token_ids) >= state.row.max_tokens:
            state.finish_reason = "length"

    def _output(self, state: _RowState) -> SequenceOutput:
        """The finished row as a :class:`SequenceOutput` (text without the ending token or the stop string)."""
        text_ids = state.token_ids
        if state.finish_reason == "stop" and state.stop_at is None:
            text_ids = text_ids[:-1]  # the end-of-sequence or stop token
        text = self.tokenizer.decode(text_ids, skip_special_tokens=True)
        if state.stop_at is not None:
            text = text[: state.stop_at]
        return SequenceOutput(
            token_ids=state.token_ids,
            logprobs=state.logprobs,
            top_logprobs=state.top_logprobs,
            text=text,
            finish_reason=state.finish_reason or "length",
            stop_reason=state.stop_reason,
        )
