"""``LlmProxyTraceToTriplet``: only sequence ids order events."""

from __future__ import annotations

from typing import Any, Dict

from rollouthub.adapter import LlmProxyTraceToTriplet

from .helpers import make_span, reward_attrs


def raw_request(seq: int, span_id: int, request_id: str, prompt: Any, response: Any, **extra: Any) -> Any:
    """A LiteLLM raw-request span; nested lists are stored as Python-literal strings, as LiteLLM does."""
    attrs: Dict[str, Any] = {"llm.hosted_vllm.id": request_id, **extra}
    for key, value in (("llm.hosted_vllm.prompt_token_ids", prompt), ("llm.hosted_vllm.response_token_ids", response)):
        if value is None:
            continue
        nested = isinstance(value, list) and any(isinstance(item, list) for item in value)
        attrs[key] = str(value) if nested else value
    return make_span("raw_gen_ai_request", span_id, attributes=attrs, sequence_id=seq)


def reward(seq: int, span_id: int, value: float) -> Any:
    # Clocks may disagree between machines: give rewards a start time *before* the calls.
    return make_span(
        "agentlightning.annotation", span_id, start=-100.0, end=-100.0, attributes=reward_attrs(value), sequence_id=seq
    )


def test_sequence_matching_and_literal_parsing() -> None:
    spans = [
        reward(5, 10, 0.5),
        raw_request(4, 2, "req-2", "[4, 5]", "[[6]]"),
        raw_request(1, 1, "req-1", "[1, 2]", "[[3, 3]]"),
        reward(2, 11, 0.1),
    ]
    triplets = LlmProxyTraceToTriplet().adapt(spans)
    assert [(t.prompt, t.response, t.reward, t.metadata) for t in triplets] == [
        ({"token_ids": [1, 2]}, {"token_ids": [3, 3]}, 0.1, {"response_id": "req-1"}),
        ({"token_ids": [4, 5]}, {"token_ids": [6]}, 0.5, {"response_id": "req-2"}),
    ]


def test_reward_requires_strictly_smaller_sequence() -> None:
    spans = [raw_request(3, 1, "req", [1], [[2]]), reward(3, 2, 1.0)]
    assert [t.reward for t in LlmProxyTraceToTriplet().adapt(spans)] == [None]


def test_reward_goes_to_latest_unrewarded_call() -> None:
    spans = [
        raw_request(1, 1, "a", [1], [[1]]),
        raw_request(2, 2, "b", [2], [[2]]),
        reward(3, 3, 0.3),
        reward(4, 4, 0.4),
        reward(5, 5, 0.5),  # every call already rewarded: dropped
    ]
    assert [t.reward for t in LlmProxyTraceToTriplet().adapt(spans)] == [0.4, 0.3]


def test_duplicates_and_missing_token_ids_are_skipped() -> None:
    spans = [
        raw_request(1, 1, "dup", [1], [[2]]),
        raw_request(2, 2, "dup", [3], [[4]]),
        raw_request(3, 3, "no-prompt", [], [[4]]),
        raw_request(4, 4, "no-response", [1], []),
        raw_request(5, 5, "garbage", "not a literal", [[1]]),
        make_span("unrelated", 6, attributes={"prompt_token_ids": [1], "response_token_ids": [2]}, sequence_id=6),
    ]
    triplets = LlmProxyTraceToTriplet().adapt(spans)
    assert [t.metadata["response_id"] for t in triplets] == ["dup"]
    assert triplets[0].prompt == {"token_ids": [1]}


def test_choices_fallback_and_litellm_request_spans() -> None:
    choices = str([{"token_ids": [8, 9], "text": "x"}])
    spans = [
        raw_request(1, 1, "via-choices", "[1]", None, **{"llm.hosted_vllm.choices": choices}),
        make_span(
            "litellm_request",
            2,
            attributes={"prompt_token_ids": "[5]", "response_token_ids": [6, 7], "gen_ai.response.id": "lite"},
            sequence_id=2,
        ),
        make_span(
            "litellm_request",
            3,
            attributes={"prompt_token_ids": ["a"], "response_token_ids": [6], "gen_ai.response.id": "bad"},
            sequence_id=3,
        ),
    ]
    triplets = LlmProxyTraceToTriplet().adapt(spans)
    assert [(t.metadata["response_id"], t.response["token_ids"]) for t in triplets] == [
        ("via-choices", [8, 9]),
        ("lite", [6, 7]),
    ]


def test_gen_ai_response_id_preferred_and_flat_response_list() -> None:
    spans = [raw_request(1, 1, "vllm-id", [1], [2, 3], **{"gen_ai.response.id": "gen-id"})]
    (triplet,) = LlmProxyTraceToTriplet().adapt(spans)
    assert triplet.metadata == {"response_id": "gen-id"}
    assert triplet.response == {"token_ids": [2, 3]}
