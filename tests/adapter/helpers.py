"""Span builders for the adapter tests."""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional

from rollouthub.instrumentation import instrument_openai, uninstrument_openai
from rollouthub.store.base import LightningStore
from rollouthub.tracer import OtelTracer, clear_active_tracer, get_active_tracer
from rollouthub.types.tracer import Span

TRACE_ID = "0" * 31 + "1"
_ids = itertools.count(1)


@contextmanager
def instrumented_tracer(store: Optional[LightningStore] = None) -> Iterator[OtelTracer]:
    """The agent's side of a test: the OpenAI SDK instrumented and an ``OtelTracer`` (writing to ``store`` if given),
    torn down afterwards with any active tracer cleared."""
    while get_active_tracer() is not None:
        clear_active_tracer()
    instrument_openai()
    tracer = OtelTracer()
    tracer.init_worker(0, store)
    try:
        yield tracer
    finally:
        uninstrument_openai()
        tracer.teardown_worker(0)
        while get_active_tracer() is not None:
            clear_active_tracer()


def sid(n: int) -> str:
    """A 16-hex-digit span id."""
    return format(n, "016x")


def make_span(
    name: str,
    span_id: int,
    parent: Optional[int] = None,
    start: Optional[float] = 0.0,
    end: Optional[float] = 1.0,
    attributes: Optional[Dict[str, Any]] = None,
    sequence_id: int = 0,
) -> Span:
    """A stored span with explicit ids and times."""
    return Span.from_attributes(
        attributes=attributes or {},
        rollout_id="ro-1",
        attempt_id="at-1",
        sequence_id=sequence_id,
        name=name,
        trace_id=TRACE_ID,
        span_id=sid(span_id),
        parent_id=sid(parent) if parent is not None else None,
        start_time=start,
        end_time=end,
    )


def llm_attrs(
    response_id: Optional[str],
    prompt: str = "question",
    completion: str = "answer",
    prompt_ids: Optional[List[int]] = None,
    response_ids: Optional[List[int]] = None,
) -> Dict[str, Any]:
    """Attributes of an ``openai.chat.completion`` span, as the OpenAI instrumentation writes them."""
    attrs: Dict[str, Any] = {
        "gen_ai.request.model": "mock-model",
        "gen_ai.request.temperature": 0.0,
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": prompt,
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": completion,
        "gen_ai.completion.0.finish_reason": "stop",
        "gen_ai.response.model": "mock-model",
    }
    if response_id is not None:
        attrs["gen_ai.response.id"] = response_id
    if prompt_ids is not None:
        attrs["prompt_token_ids"] = prompt_ids
    if response_ids is not None:
        attrs["response_token_ids"] = response_ids
    return attrs


def reward_attrs(value: float) -> Dict[str, Any]:
    """Attributes of a v0.3 reward span."""
    return {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": value}
