"""Token-level trajectories: training samples built from the LLM calls of one attempt, with the token ids the serving
engine reported -- what every trainer and ``rollouthub export trajectories`` use.

:func:`build_trajectories` reads the spans of one attempt:

1. **LLM calls** are the spans whose name matches :data:`DEFAULT_LLM_CALL_MATCH` (the LLM proxy's
   ``litellm_request``, the OpenAI SDK instrumentation's ``openai.chat.completion`` / ``openai.responses.create``),
   in span order (sequence id, then start time). Spans sharing a response id (``gen_ai.response.id``) are one call,
   seen by the proxy and by the agent: it counts once and takes each field from the first span that has it.
2. **Token ids** come from the ``prompt_token_ids`` / ``response_token_ids`` attributes, log-probabilities from
   ``logprobs.content`` (one finite ``logprob`` per response token, else none), the policy version from
   :data:`rollouthub.semconv.POLICY_VERSION_ATTRIBUTE`. Text is never re-tokenized: a call without prompt or response
   ids is skipped and counted (``missing_token_ids``). A failed call (span status ERROR) sampled nothing: skipped and
   counted. With ``n > 1`` choices only the first choice's ids are recorded: it is the sample, the others are
   counted (``dropped_choices``).
3. **Rewards**: every sample carries the attempt's final reward (the last reward emitted, as the export's), and per
   call the last reward emitted after that call and before the next one (``call_rewards``).
4. **Levels.** ``transition``: one sample per call, all of its response tokens sampled (mask 1). ``trajectory``:
   a call whose prompt ids begin with the open sample's prompt + response ids continues it -- the tokens between
   (tool results, user turns, template glue) are appended with mask 0, then its response with mask 1; any other call
   closes the sample and starts a new one, counted as a mismatch with its first differing position (logged and kept
   in :attr:`Trajectories.mismatches`). A call without token ids closes the open sample too (its sampled tokens would
   otherwise be spliced in as context).

The sample model is :class:`rollouthub.types.TrajectorySample`; the fields are described in ``docs/export.md``
("Trajectories").
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from rollouthub.emitter.reward import find_final_reward, get_reward_value
from rollouthub.semconv import POLICY_VERSION_ATTRIBUTE
from rollouthub.types.core import Rollout
from rollouthub.types.tracer import Span
from rollouthub.types.trajectory import (
    TRAJECTORY_LEVELS,
    Trajectories,
    TrajectoryLevel,
    TrajectoryMismatch,
    TrajectorySample,
)

from .base import TraceAdapter

__all__ = [
    "DEFAULT_LLM_CALL_MATCH",
    "build_trajectories",
    "input_group_id",
    "TraceToTrajectory",
]

logger = logging.getLogger(__name__)

DEFAULT_LLM_CALL_MATCH = r"openai\.chat\.completion|openai\.responses\.create|litellm_request"
"""Names of LLM-call spans (regex searched in the span name)."""

_COMPLETION_INDEX = re.compile(r"^gen_ai\.completion\.(\d+)\.")

_SortKey = Tuple[int, float]


def input_group_id(value: Any) -> str:
    """A stable id of a rollout input: equal inputs (as JSON, keys sorted) give equal ids -- the group key of
    group-relative algorithms and of the export's preference pairs (32 hex digits)."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _sort_key(span: Span) -> _SortKey:
    return span.sequence_id, span.start_time if span.start_time is not None else 0.0


# ---------------------------------------------------------------------------------------------------------------------
# One LLM call
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class _Call:
    """What the spans of one LLM call say about it."""

    key: _SortKey
    span_id: str
    response_id: Optional[str]
    failed: bool
    prompt_ids: Optional[List[int]]
    response_ids: Optional[List[int]]
    logprobs: Optional[List[float]]
    policy_version: Optional[int]
    extra_choices: int

    @property
    def has_token_ids(self) -> bool:
        return self.prompt_ids is not None and self.response_ids is not None


def _token_ids(value: Any) -> Optional[List[int]]:
    """A non-empty list of token ids, else ``None``."""
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(item, int) and not isinstance(item, bool) for item in value):
            return list(value)
    return None


def _logprobs(attributes: Dict[str, Any], count: int) -> Optional[List[float]]:
    """The ``logprob`` of each entry of ``logprobs.content`` (JSON) when there is one finite number per token."""
    raw = attributes.get("logprobs.content")
    if not isinstance(raw, str):
        return None
    try:
        entries = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entries, list) or len(entries) != count:
        return None
    values: List[float] = []
    for entry in entries:
        value = entry.get("logprob") if isinstance(entry, dict) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            return None
        values.append(float(value))
    return values


def _read_call(span: Span) -> _Call:
    attributes = span.attributes
    prompt_ids = _token_ids(attributes.get("prompt_token_ids"))
    response_ids = _token_ids(attributes.get("response_token_ids"))
    response_id = attributes.get("gen_ai.response.id")
    version = attributes.get(POLICY_VERSION_ATTRIBUTE)
    choices = {int(match.group(1)) for key in attributes if (match := _COMPLETION_INDEX.match(key))}
    return _Call(
        key=_sort_key(span),
        span_id=span.span_id,
        response_id=response_id if isinstance(response_id, str) and response_id else None,
        failed=span.status.status_code == "ERROR",
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        logprobs=None if response_ids is None else _logprobs(attributes, len(response_ids)),
        policy_version=version if isinstance(version, int) and not isinstance(version, bool) else None,
        extra_choices=max(len(choices) - 1, 0),
    )


def _merge(records: List[_Call]) -> _Call:
    """One call from the spans that recorded it (in span order): each field from the first successful span that has
    it, the token ids and log-probabilities from one span."""
    usable = [record for record in records if not record.failed] or records
    source = next((record for record in usable if record.has_token_ids), usable[0])
    logprobs = next(
        (r.logprobs for r in usable if r.logprobs is not None and r.response_ids == source.response_ids), None
    )
    return replace(
        source,
        key=min(record.key for record in records),
        failed=all(record.failed for record in records),
        logprobs=logprobs,
        policy_version=next((r.policy_version for r in usable if r.policy_version is not None), None),
        extra_choices=max(record.extra_choices for record in records),
    )


def _llm_calls(spans: Sequence[Span], llm_call_match: str) -> Tuple[List[_Call], int]:
    """The attempt's LLM calls in span order, and how many spans repeated a call already seen."""
    pattern = re.compile(llm_call_match)
    groups: Dict[str, List[_Call]] = {}
    calls: List[List[_Call]] = []
    duplicates = 0
    for span in sorted(spans, key=_sort_key):
        if pattern.search(span.name) is None:
            continue
        record = _read_call(span)
        if record.response_id is not None and record.response_id in groups:
            groups[record.response_id].append(record)
            duplicates += 1
            continue
        group = [record]
        calls.append(group)
        if record.response_id is not None:
            groups[record.response_id] = group
    return [_merge(group) for group in calls], duplicates


def _call_rewards(spans: Sequence[Span], calls: Sequence[_Call]) -> List[Optional[float]]:
    """Per call: the last reward emitted after it and before the next call (span order)."""
    rewards: List[Optional[float]] = [None] * len(calls)
    events = sorted(
        [(call.key, 0, index, None) for index, call in enumerate(calls)]
        + [(_sort_key(span), 1, -1, value) for span in spans if (value := get_reward_value(span)) is not None],
        key=lambda event: (event[0], event[1]),
    )
    current = -1
    for _, kind, index, value in events:
        if kind == 0:
            current = index
        elif current >= 0:
            rewards[current] = value
    return rewards


# ---------------------------------------------------------------------------------------------------------------------
# Samples
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class _OpenSample:
    """A sample being assembled from consecutive calls."""

    prompt_ids: List[int]
    response_ids: List[int] = field(default_factory=list)
    response_mask: List[int] = field(default_factory=list)
    logprobs: Optional[List[float]] = field(default_factory=list)
    call_rewards: List[Optional[float]] = field(default_factory=list)
    call_ranges: List[Tuple[int, int]] = field(default_factory=list)
    versions: List[Optional[int]] = field(default_factory=list)
    span_ids: List[str] = field(default_factory=list)

    def add(self, call: _Call, spliced: Sequence[int], reward: Optional[float]) -> None:
        """Append ``spliced`` (mask 0), then the call's sampled response (mask 1)."""
        assert call.response_ids is not None
        self.response_ids.extend(spliced)
        self.response_mask.extend([0] * len(spliced))
        start = len(self.response_ids)
        self.response_ids.extend(call.response_ids)
        self.response_mask.extend([1] * len(call.response_ids))
        if self.logprobs is not None and call.logprobs is not None:
            self.logprobs.extend([0.0] * len(spliced))
            self.logprobs.extend(call.logprobs)
        else:
            self.logprobs = None
        self.call_ranges.append((start, len(self.response_ids)))
        self.call_rewards.append(reward)
        self.versions.append(call.policy_version)
        self.span_ids.append(call.span_id)

    def continued_by(self, prompt_ids: Sequence[int]) -> bool:
        """Whether ``prompt_ids`` begin with this sample's prompt + response ids."""
        head = len(self.prompt_ids)
        total = head + len(self.response_ids)
        return (
            len(prompt_ids) >= total
            and list(prompt_ids[:head]) == self.prompt_ids
            and list(prompt_ids[head:total]) == self.response_ids
        )

    def first_difference(self, prompt_ids: Sequence[int]) -> Tuple[int, Optional[int], Optional[int]]:
        """``(position, expected id, found id)`` of the first difference between ``prompt_ids`` and this sample."""
        sample = [*self.prompt_ids, *self.response_ids]
        common = min(len(sample), len(prompt_ids))
        position = next((i for i in range(common) if sample[i] != prompt_ids[i]), common)
        return (
            position,
            sample[position] if position < len(sample) else None,
            prompt_ids[position] if position < len(prompt_ids) else None,
        )

    def finish(self, ids: Dict[str, Any], index: int, reward: Optional[float]) -> TrajectorySample:
        """The sample, with the attempt's ids, its position and the final reward."""
        versions = [version for version in self.versions if version is not None]
        return TrajectorySample(
            **ids,
            index=index,
            prompt_ids=self.prompt_ids,
            response_ids=self.response_ids,
            response_mask=self.response_mask,
            response_logprobs=self.logprobs,
            reward=reward,
            call_rewards=self.call_rewards,
            call_ranges=self.call_ranges,
            policy_version=min(versions) if versions else None,
            call_policy_versions=self.versions,
            span_ids=self.span_ids,
        )


def _checked_level(level: str) -> TrajectoryLevel:
    if level not in TRAJECTORY_LEVELS:
        raise ValueError(f"unknown trajectory level {level!r}; use one of {', '.join(TRAJECTORY_LEVELS)}")
    return level  # type: ignore[return-value]


def _attempt_of(spans: Sequence[Span], rollout: Optional[Rollout]) -> Tuple[Optional[str], Optional[str]]:
    rollouts = {span.rollout_id for span in spans}
    attempts = {span.attempt_id for span in spans}
    if len(attempts) > 1 or len(rollouts) > 1:
        raise ValueError(
            f"spans of {len(attempts)} attempts of {len(rollouts)} rollouts given; build trajectories from the spans "
            "of one attempt"
        )
    rollout_id = next(iter(rollouts), rollout.rollout_id if rollout is not None else None)
    if rollout is not None and rollout_id != rollout.rollout_id:
        raise ValueError(f"the spans belong to rollout {rollout_id}, not to the given rollout {rollout.rollout_id}")
    return rollout_id, next(iter(attempts), None)


def build_trajectories(
    spans: Sequence[Span],
    *,
    level: TrajectoryLevel = "trajectory",
    rollout: Optional[Rollout] = None,
    llm_call_match: str = DEFAULT_LLM_CALL_MATCH,
) -> Trajectories:
    """Training samples from the spans of one attempt, with counters of what was skipped (see the module docstring).

    Args:
        spans: the spans of one attempt of one rollout (``store.query_spans(rollout_id, attempt_id)``).
        level: ``"trajectory"`` (consecutive calls merged while each continues the last) or ``"transition"`` (one
            sample per call).
        rollout: the rollout, for ``input_id`` (:func:`input_group_id` of its input) and ``resources_id``.
        llm_call_match: regex of LLM-call span names.

    Raises:
        ValueError: if the spans belong to several attempts, or to another rollout than ``rollout``.
    """
    result = Trajectories(level=_checked_level(level))
    rollout_id, attempt_id = _attempt_of(spans, rollout)
    calls, result.duplicate_spans = _llm_calls(spans, llm_call_match)
    result.calls = len(calls)
    if not calls or rollout_id is None or attempt_id is None:
        return result
    rewards = _call_rewards(spans, calls)
    final_reward = find_final_reward(sorted(spans, key=lambda span: span.sequence_id))
    ids: Dict[str, Any] = {
        "rollout_id": rollout_id,
        "attempt_id": attempt_id,
        "input_id": input_group_id(rollout.input) if rollout is not None else None,
        "resources_id": rollout.resources_id if rollout is not None else None,
    }
    finished: List[_OpenSample] = []
    open_sample: Optional[_OpenSample] = None
    for index, call in enumerate(calls):
        if call.failed:
            result.failed_calls += 1
            continue
        if not call.has_token_ids:
            result.missing_token_ids += 1
            open_sample = None  # the call's sampled tokens are unknown: nothing may continue across it
            continue
        assert call.prompt_ids is not None
        result.dropped_choices += call.extra_choices
        if call.logprobs is None:
            result.missing_logprobs += 1
        if level == "trajectory" and open_sample is not None:
            if open_sample.continued_by(call.prompt_ids):
                spliced = call.prompt_ids[len(open_sample.prompt_ids) + len(open_sample.response_ids) :]
                open_sample.add(call, spliced, rewards[index])
                continue
            position, expected, found = open_sample.first_difference(call.prompt_ids)
            result.mismatches.append(
                TrajectoryMismatch(
                    span_id=call.span_id, call_index=index, position=position, expected=expected, found=found
                )
            )
            logger.warning(
                "Rollout %s, attempt %s: LLM call %d (span %s) does not continue the trajectory: its prompt ids "
                "differ at position %d (expected %s, found %s); it starts a new sample.",
                rollout_id,
                attempt_id,
                index,
                call.span_id,
                position,
                expected,
                found,
            )
        open_sample = _OpenSample(prompt_ids=list(call.prompt_ids))
        open_sample.add(call, [], rewards[index])
        finished.append(open_sample)
    result.samples = [sample.finish(ids, index, final_reward) for index, sample in enumerate(finished)]
    return result


class TraceToTrajectory(TraceAdapter[List[TrajectorySample]]):
    """Adapter: the spans of one attempt → token-level samples (see :func:`build_trajectories`).

    ``input_id`` and ``resources_id`` need the rollout: call :func:`build_trajectories` with ``rollout=`` for them.
    """

    def __init__(self, level: TrajectoryLevel = "trajectory", llm_call_match: str = DEFAULT_LLM_CALL_MATCH) -> None:
        """Configure the level and the LLM-call span names."""
        self.level = _checked_level(level)
        self.llm_call_match = llm_call_match

    def adapt(self, source: Sequence[Span], /) -> List[TrajectorySample]:
        """The samples of ``source`` (one attempt's spans)."""
        return build_trajectories(source, level=self.level, llm_call_match=self.llm_call_match).samples
