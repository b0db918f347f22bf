"""The token-level trajectory builder on hand-made spans: levels, masks, log-probabilities, rewards, and every call it
must skip or count (no token ids, duplicates, failures, n > 1, re-templated prompts)."""

from __future__ import annotations

import json
import logging
from typing import Any, Dict, List, Optional

import pytest
from pydantic import ValidationError

from rollouthub.adapter import TraceToTrajectory, build_trajectories, input_group_id
from rollouthub.semconv import POLICY_VERSION_ATTRIBUTE
from rollouthub.types import Rollout, TraceStatus, TrajectorySample
from rollouthub.types.tracer import Span

from .helpers import llm_attrs, make_span, reward_attrs


def call(
    span_id: int,
    sequence_id: int,
    prompt: List[int],
    response: Optional[List[int]],
    *,
    logprobs: Optional[List[float]] = None,
    response_id: Optional[str] = None,
    name: str = "litellm_request",
    version: Optional[int] = None,
    failed: bool = False,
    extra: Optional[Dict[str, Any]] = None,
) -> Span:
    """An LLM-call span as the proxy (``litellm_request``) or the OpenAI instrumentation records it."""
    attributes = llm_attrs(
        response_id if response_id is not None else f"chatcmpl-{span_id}", prompt_ids=prompt, response_ids=response
    )
    if logprobs is not None:
        attributes["logprobs.content"] = json.dumps([{"token": "t", "logprob": value} for value in logprobs])
    if version is not None:
        attributes[POLICY_VERSION_ATTRIBUTE] = version
    attributes.update(extra or {})
    span = make_span(name, span_id, start=float(sequence_id), attributes=attributes, sequence_id=sequence_id)
    if failed:
        span.status = TraceStatus(status_code="ERROR", description="upstream 500")
    return span


def reward(span_id: int, sequence_id: int, value: float) -> Span:
    return make_span("agentlightning.annotation", span_id, attributes=reward_attrs(value), sequence_id=sequence_id)


# A three-turn conversation whose prompts have the prefix property: 1-2 are the system/user turn, 9 a tool result.
P1, R1 = [1, 2], [10, 11]
P2 = [*P1, *R1, 9, 9]
R2 = [20]
P3 = [*P2, *R2, 8]
R3 = [30, 31, 32]


def test_transition_level_gives_one_sample_per_call_with_its_ids_rewards_and_version() -> None:
    spans = [
        call(1, 1, P1, R1, logprobs=[-0.5, -0.25], version=3),
        reward(2, 2, 0.5),
        call(3, 3, P2, R2, logprobs=[-1.0], version=4),
        reward(4, 4, 1.0),
    ]
    rollout = Rollout(rollout_id="ro-1", input={"q": "2+2?"}, start_time=0.0, resources_id="rs-7")
    result = build_trajectories(spans, level="transition", rollout=rollout)
    first, second = result.samples
    assert (first.prompt_ids, first.response_ids, first.response_mask) == (P1, R1, [1, 1])
    assert (second.prompt_ids, second.response_ids, second.response_mask) == (P2, R2, [1])
    assert first.response_logprobs == [-0.5, -0.25] and second.response_logprobs == [-1.0]
    assert [s.call_rewards for s in result.samples] == [[0.5], [1.0]]
    assert [s.reward for s in result.samples] == [1.0, 1.0]  # the final reward, on every sample
    assert [s.policy_version for s in result.samples] == [3, 4]
    assert [s.index for s in result.samples] == [0, 1] and first.call_ranges == [(0, 2)]
    assert (first.rollout_id, first.attempt_id, first.resources_id) == ("ro-1", "at-1", "rs-7")
    assert first.input_id == second.input_id == input_group_id({"q": "2+2?"})
    assert result.calls == 2 and result.counts() == {} and not result.mismatches


def test_trajectory_level_merges_continuing_calls_and_masks_the_spliced_tokens() -> None:
    spans = [
        call(1, 1, P1, R1, logprobs=[-0.5, -0.25], version=5),
        call(2, 2, P2, R2, logprobs=[-1.0], version=4),
        call(3, 3, P3, R3, logprobs=[-0.125, -0.75, -2.0], version=5),
        reward(4, 4, 1.0),
    ]
    result = build_trajectories(spans)
    [sample] = result.samples
    assert sample.prompt_ids == P1
    assert sample.response_ids == [*R1, 9, 9, *R2, 8, *R3]
    assert sample.response_mask == [1, 1, 0, 0, 1, 0, 1, 1, 1]
    assert sample.response_logprobs == [-0.5, -0.25, 0.0, 0.0, -1.0, 0.0, -0.125, -0.75, -2.0]
    assert sample.call_ranges == [(0, 2), (4, 5), (6, 9)]
    assert sample.call_rewards == [None, None, 1.0] and sample.reward == 1.0
    assert sample.call_policy_versions == [5, 4, 5] and sample.policy_version == 4  # the oldest
    assert sample.span_ids == [spans[0].span_id, spans[1].span_id, spans[2].span_id]
    assert sample.input_id is None and sample.resources_id is None  # no rollout given
    assert TraceToTrajectory().adapt(spans) == [sample]
    assert TraceToTrajectory("transition").adapt(spans) == build_trajectories(spans, level="transition").samples


def test_a_re_templated_prompt_is_a_counted_mismatch_with_its_first_differing_position(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rewritten = [*P1, *R1, 9, 7, *R2]  # the agent rewrote the tool result before the next call
    spans = [call(1, 1, P1, R1), call(2, 2, P2, R2), call(3, 3, rewritten, R3)]
    with caplog.at_level(logging.WARNING, logger="rollouthub.adapter.trajectory"):
        result = build_trajectories(spans)
    first, second = result.samples
    assert first.response_ids == [*R1, 9, 9, *R2] and first.span_ids == [spans[0].span_id, spans[1].span_id]
    assert (second.prompt_ids, second.response_ids, second.response_mask) == (rewritten, R3, [1, 1, 1])
    [mismatch] = result.mismatches
    assert (mismatch.call_index, mismatch.span_id) == (2, spans[2].span_id)
    assert (mismatch.position, mismatch.expected, mismatch.found) == (5, 9, 7)
    assert result.counts() == {"prompt mismatches": 1, "calls without logprobs": 3}
    assert "LLM call 2" in caplog.text and "differ at position 5 (expected 9, found 7)" in caplog.text
    # A prompt that is a strict prefix of the sample (the history was cut) differs where it ends.
    result = build_trajectories([call(1, 1, P1, R1), call(2, 2, [*P1, 10], R2)])
    assert [(m.position, m.expected, m.found) for m in result.mismatches] == [(3, 11, None)]


def test_calls_without_token_ids_are_skipped_counted_and_end_the_open_sample() -> None:
    spans = [
        call(1, 1, P1, R1),
        call(2, 2, P2, None),  # no response ids: its sampled tokens are unknown
        call(3, 3, P3, R3),
        make_span("openai.chat.completion", 4, attributes=llm_attrs("chatcmpl-4"), sequence_id=4),  # no ids at all
    ]
    result = build_trajectories(spans)
    assert result.calls == 4 and result.missing_token_ids == 2 and not result.mismatches
    assert [s.prompt_ids for s in result.samples] == [P1, P3]  # call 3 starts a new sample: nothing spliced across
    assert result.samples[1].response_mask == [1, 1, 1]
    assert result.counts()["calls without token ids"] == 2
    assert build_trajectories([call(1, 1, [], [5])]).missing_token_ids == 1  # empty ids are no ids


def test_a_call_seen_by_the_proxy_and_the_agent_counts_once() -> None:
    agent_side = call(2, 2, P1, R1, response_id="chatcmpl-a", name="openai.chat.completion", logprobs=[-1.0, -2.0])
    proxy_side = call(1, 1, P1, R1, response_id="chatcmpl-a", version=7)
    second_agent = call(4, 4, P2, R2, response_id="chatcmpl-b", name="openai.chat.completion")
    second_proxy = call(3, 3, P2, R2, response_id="chatcmpl-b", logprobs=[-0.5], version=8)
    result = build_trajectories([second_agent, agent_side, proxy_side, second_proxy, reward(5, 5, 1.0)])
    assert result.calls == 2 and result.duplicate_spans == 2 and result.missing_logprobs == 0
    [sample] = result.samples
    assert sample.response_ids == [*R1, 9, 9, *R2] and sample.call_policy_versions == [7, 8]
    assert sample.response_logprobs == [-1.0, -2.0, 0.0, 0.0, -0.5]  # each field from the span that has it
    assert sample.span_ids == [proxy_side.span_id, second_proxy.span_id]  # in span order
    # Spans without a response id cannot be matched: each is a call.
    twice = [call(1, 1, P1, R1, response_id=""), call(2, 2, P1, R1, response_id="")]
    assert build_trajectories(twice, level="transition").calls == 2


def test_per_call_rewards_are_the_last_reward_before_the_next_call() -> None:
    spans = [
        reward(1, 1, 9.0),  # before any call: no call's reward (and not the final one)
        call(2, 2, P1, R1),
        reward(3, 3, 0.25),
        reward(4, 4, 0.5),
        call(5, 5, P2, R2),
        call(6, 6, P3, R3),
        reward(7, 7, 1.0),
    ]
    result = build_trajectories(spans)
    assert result.samples[0].call_rewards == [0.5, None, 1.0] and result.samples[0].reward == 1.0
    transitions = build_trajectories(spans, level="transition").samples
    assert [s.call_rewards for s in transitions] == [[0.5], [None], [1.0]]
    # A reward after a call that gave no sample stays with that call; it is never moved to an earlier one.
    result = build_trajectories([call(1, 1, P1, R1), call(2, 2, P2, None), reward(3, 3, 1.0)])
    assert result.samples[0].call_rewards == [None] and result.samples[0].reward == 1.0


def test_a_failed_attempt_keeps_its_samples_and_failed_calls_are_skipped() -> None:
    exception = make_span("agentlightning.exception", 9, attributes={"exception.type": "ValueError"}, sequence_id=4)
    spans = [
        call(1, 1, P1, R1),
        call(2, 2, P2, [], failed=True),  # upstream error: nothing sampled
        call(3, 3, P2, R2),  # the agent retried the same prompt
        exception,
    ]
    result = build_trajectories(spans)
    assert result.failed_calls == 1 and result.calls == 3 and not result.mismatches
    [sample] = result.samples
    assert sample.response_ids == [*R1, 9, 9, *R2] and sample.reward is None and sample.call_rewards == [None, None]


def test_logprobs_are_kept_only_when_complete() -> None:
    missing = build_trajectories([call(1, 1, P1, R1, logprobs=[-0.5, -0.5]), call(2, 2, P2, R2)])
    assert missing.samples[0].response_logprobs is None and missing.missing_logprobs == 1
    for bad in ([-0.5], [-0.5, float("-inf")]):  # one per token, finite
        assert build_trajectories([call(1, 1, P1, R1, logprobs=bad)]).samples[0].response_logprobs is None
    broken = call(1, 1, P1, R1, extra={"logprobs.content": "not json"})
    assert build_trajectories([broken]).missing_logprobs == 1


def test_n_greater_than_one_keeps_the_first_choice_and_counts_the_others() -> None:
    extra = {
        "gen_ai.completion.1.role": "assistant",
        "gen_ai.completion.1.content": "other",
        "gen_ai.completion.2.content": "x",
    }
    result = build_trajectories([call(1, 1, P1, R1, extra=extra)])
    assert result.dropped_choices == 2 and result.samples[0].response_ids == R1
    assert result.counts() == {"extra choices dropped": 2, "calls without logprobs": 1}


def test_inputs_are_checked() -> None:
    other_attempt = make_span("litellm_request", 2, attributes={}, sequence_id=2).model_copy(
        update={"attempt_id": "at-2"}
    )
    with pytest.raises(ValueError, match="spans of 2 attempts"):
        build_trajectories([call(1, 1, P1, R1), other_attempt])
    with pytest.raises(ValueError, match="not to the given rollout ro-9"):
        build_trajectories([call(1, 1, P1, R1)], rollout=Rollout(rollout_id="ro-9", input=None, start_time=0.0))
    with pytest.raises(ValueError, match="unknown trajectory level 'turn'"):
        build_trajectories([], level="turn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown trajectory level"):
        TraceToTrajectory("turn")  # type: ignore[arg-type]
    empty = build_trajectories([])
    assert empty.samples == [] and empty.calls == 0 and empty.level == "trajectory"


def test_input_group_id_is_stable_and_distinguishes_inputs() -> None:
    assert input_group_id({"a": 1, "b": [1, 2]}) == input_group_id({"b": [1, 2], "a": 1})
    assert input_group_id({"a": 1}) != input_group_id({"a": 2}) and len(input_group_id(None)) == 32
    assert input_group_id({1: "x", "y": 2}) == input_group_id({1: "x", "y": 2})  # not JSON-sortable: still stable


def test_sample_model_rejects_inconsistent_fields() -> None:
    fields: Dict[str, Any] = {
        "rollout_id": "ro",
        "attempt_id": "at",
        "index": 0,
        "prompt_ids": [1],
        "response_ids": [2, 3],
        "response_mask": [1, 1],
        "call_rewards": [None],
        "call_ranges": [(0, 2)],
        "call_policy_versions": [None],
        "span_ids": ["s"],
    }
    TrajectorySample(**fields)
    for change, message in (
        ({"response_mask": [1]}, "response_mask has 1 entries"),
        ({"response_mask": [1, 2]}, "only 0 and 1"),
        ({"response_logprobs": [0.0]}, "response_logprobs has 1 entries"),
        ({"call_rewards": []}, "call_rewards must have one entry per call"),
        ({"call_ranges": [(1, 3)]}, "call_ranges must be ordered"),
    ):
        with pytest.raises(ValidationError, match=message):
            TrajectorySample(**{**fields, **change})
