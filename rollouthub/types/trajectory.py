"""Token-level training samples built from the LLM calls of one attempt (data models only; the builder is
:mod:`rollouthub.adapter.trajectory`, the fields are described in ``docs/export.md``, "Trajectories")."""

from __future__ import annotations

from typing import Dict, List, Literal, Optional, Tuple, get_args

from pydantic import BaseModel, Field, model_validator

__all__ = [
    "TrajectoryLevel",
    "TRAJECTORY_LEVELS",
    "TrajectorySample",
    "TrajectoryMismatch",
    "Trajectories",
]

TrajectoryLevel = Literal["transition", "trajectory"]
"""``transition``: one sample per LLM call; ``trajectory``: consecutive calls of an attempt merged into one sample while
each call's prompt ids begin with everything the sample holds so far."""

TRAJECTORY_LEVELS: Tuple[str, ...] = get_args(TrajectoryLevel)


class TrajectorySample(BaseModel):
    """One training sample: a prompt and the tokens after it, with a mask telling which of them the policy sampled.

    ``response_ids`` holds the sampled tokens of every call merged into the sample and, between them, the tokens that
    were spliced in (tool results, user or environment turns, chat-template glue): ``response_mask`` is 1 on sampled
    tokens and 0 on spliced ones. Token ids are those the serving engine reported; nothing is re-tokenized.
    """

    rollout_id: str
    attempt_id: str
    input_id: Optional[str] = None
    """Group key: a hash of the rollout's input (equal inputs, equal ids); ``None`` when the rollout was not given."""
    resources_id: Optional[str] = None
    """The resources (model/prompt version) the rollout ran with."""
    index: int = Field(ge=0)
    """Position of the sample among the samples of its attempt (0, 1, ...)."""
    prompt_ids: List[int]
    """Prompt token ids of the sample's first call."""
    response_ids: List[int]
    response_mask: List[int]
    """1 where the policy sampled the token, 0 on spliced tokens; as long as ``response_ids``."""
    response_logprobs: Optional[List[float]] = None
    """Log-probabilities the serving engine reported for the sampled tokens, 0.0 on masked positions; ``None`` when
    a call of the sample came without them (one finite number per sampled token is required)."""
    reward: Optional[float] = None
    """The attempt's final reward (the last reward emitted), ``None`` when it emitted none."""
    call_rewards: List[Optional[float]]
    """Per call of the sample: the last reward emitted after the call and before the next call (``None``: none)."""
    call_ranges: List[Tuple[int, int]]
    """Per call of the sample: ``[start, end)`` of its sampled tokens in ``response_ids`` (where to put a per-call
    reward: on token ``end - 1``)."""
    policy_version: Optional[int] = None
    """The oldest policy version that served a call of the sample (``None`` when no call recorded one)."""
    call_policy_versions: List[Optional[int]]
    """Per call of the sample: the policy version that served it (``None`` when not recorded)."""
    span_ids: List[str]
    """Per call of the sample: the id of the LLM-call span its tokens were read from."""

    @model_validator(mode="after")
    def _consistent(self) -> TrajectorySample:
        length = len(self.response_ids)
        if len(self.response_mask) != length:
            raise ValueError(f"response_mask has {len(self.response_mask)} entries for {length} response ids")
        if any(value not in (0, 1) for value in self.response_mask):
            raise ValueError("response_mask must hold only 0 and 1")
        if self.response_logprobs is not None and len(self.response_logprobs) != length:
            raise ValueError(f"response_logprobs has {len(self.response_logprobs)} entries for {length} response ids")
        calls = len(self.span_ids)
        for name in ("call_rewards", "call_ranges", "call_policy_versions"):
            if len(getattr(self, name)) != calls:
                raise ValueError(f"{name} must have one entry per call ({calls})")
        previous_end = 0
        for start, end in self.call_ranges:
            if not previous_end <= start <= end <= length:
                raise ValueError(
                    f"call_ranges must be ordered, non-overlapping ranges within the {length} response ids"
                )
            previous_end = end
        return self


class TrajectoryMismatch(BaseModel):
    """A call whose prompt ids did not begin with the sample built so far (prompt + response ids): the sample was
    closed there and the call started a new one."""

    span_id: str
    """The LLM-call span of the call that did not continue the sample."""
    call_index: int
    """Its position among the attempt's LLM calls (0, 1, ...)."""
    position: int
    """The first position where its prompt ids differ from the sample's prompt + response ids."""
    expected: Optional[int]
    """The sample's token id at ``position`` (``None``: the prompt is longer than the sample)."""
    found: Optional[int]
    """The call's prompt token id at ``position`` (``None``: its prompt ended there)."""


class Trajectories(BaseModel):
    """What :func:`rollouthub.adapter.trajectory.build_trajectories` made of one attempt's spans."""

    level: TrajectoryLevel
    samples: List[TrajectorySample] = Field(default_factory=list)
    calls: int = 0
    """Distinct LLM calls found (a call recorded by two spans counts once)."""
    duplicate_spans: int = 0
    """LLM-call spans of a call already seen (the proxy's and the agent's span of one call share a response id)."""
    missing_token_ids: int = 0
    """Calls skipped because their spans hold no prompt or no response token ids (text is never re-tokenized)."""
    failed_calls: int = 0
    """Calls skipped because they failed (span status ERROR): nothing was sampled."""
    missing_logprobs: int = 0
    """Calls used without log-probabilities (none reported, or not one finite number per response token)."""
    dropped_choices: int = 0
    """Choices beyond the first of calls with ``n > 1`` (spans record the token ids of the first choice only)."""
    mismatches: List[TrajectoryMismatch] = Field(default_factory=list)
    """Splits of the ``trajectory`` level: calls that did not continue the sample before them."""

    def counts(self) -> Dict[str, int]:
        """The non-zero counters by readable name, e.g. ``{"calls without token ids": 2, "prompt mismatches": 1}``."""
        counts = {
            "duplicate call spans": self.duplicate_spans,
            "calls without token ids": self.missing_token_ids,
            "failed calls": self.failed_calls,
            "calls without logprobs": self.missing_logprobs,
            "extra choices dropped": self.dropped_choices,
            "prompt mismatches": len(self.mismatches),
        }
        return {name: count for name, count in counts.items() if count}
