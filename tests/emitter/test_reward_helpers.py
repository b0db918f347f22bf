"""Reward readers and the deprecated reward surface."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings
from types import SimpleNamespace
from typing import Any, Dict, Optional

import pytest

from rollouthub.emitter import (
    emit_reward,
    find_final_reward,
    find_reward_spans,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
    reward,
)
from rollouthub.semconv import RewardPydanticModel
from rollouthub.types.tracer import Span

from .conftest import RecordingTracer


def make_span(attributes: Dict[str, Any], name: str = "some.span") -> Any:
    """A span; duck-typed when an attribute holds a dict (which real span models reject)."""
    if any(isinstance(value, dict) for value in attributes.values()):
        return SimpleNamespace(name=name, attributes=attributes)
    return Span.from_attributes(attributes=attributes, name=name)


V03 = {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 0.3}
AGENTOPS = {"agentops.task.output": {"type": "reward", "value": 0.7}}


def test_get_rewards_from_span_multi_dimensional() -> None:
    span = emit_reward({"acc": 1.0, "len": 0.5}, primary_key="len", propagate=False)
    assert get_rewards_from_span(span) == [
        RewardPydanticModel(name="len", value=0.5),
        RewardPydanticModel(name="acc", value=1.0),
    ]
    assert get_rewards_from_span(make_span({"other": 1})) == []


def test_v03_format_wins_over_legacy_formats() -> None:
    span = make_span({**V03, **AGENTOPS, "reward": 0.9}, name="agentlightning.annotation")
    assert get_reward_value(span) == 0.3


def test_agentops_format_wins_over_v02() -> None:
    span = make_span({**AGENTOPS, "reward": 0.9}, name="agentlightning.annotation")
    assert get_reward_value(span) == 0.7


@pytest.mark.parametrize(
    "attributes, expected",
    [
        ({"agentops.task.output": json.dumps({"type": "reward", "value": 0.25})}, 0.25),
        ({"agentops.entity.output": {"type": "reward", "value": 1.5}}, 1.5),
        ({"agentops.entity.output": json.dumps({"type": "reward", "value": None})}, None),
        ({"agentops.task.output": json.dumps({"type": "other", "value": 1.0})}, None),
        ({"agentops.task.output": "not json"}, None),
        (
            {
                "agentops.task.output": json.dumps({"type": "other"}),
                "agentops.entity.output": json.dumps({"type": "reward", "value": 2.0}),
            },
            2.0,
        ),
    ],
)
def test_agentops_legacy_format(attributes: Dict[str, Any], expected: Optional[float]) -> None:
    assert get_reward_value(make_span(attributes)) == expected


def test_v02_legacy_format_only_on_annotation_spans() -> None:
    assert get_reward_value(make_span({"reward": 0.9}, name="agentlightning.annotation")) == 0.9
    assert get_reward_value(make_span({"reward": 0.9}, name="other")) is None


def test_is_reward_span_and_find_reward_spans_keep_order() -> None:
    spans = [
        make_span({}, name="a"),
        make_span({**V03}, name="r1"),
        make_span({"agentops.task.output": {"type": "reward", "value": None}}, name="none-reward"),
        make_span({"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 1.0}, name="r2"),
    ]
    assert [is_reward_span(s) for s in spans] == [False, True, False, True]
    assert [s.name for s in find_reward_spans(spans)] == ["r1", "r2"]


def test_find_final_reward_scans_from_the_end() -> None:
    first = emit_reward(0.1, propagate=False)
    last = emit_reward(0.9, propagate=False)
    trailing = make_span({"agentops.task.output": {"type": "reward", "value": None}})
    assert find_final_reward([first, make_span({}), last, trailing, make_span({})]) == 0.9
    assert find_final_reward([make_span({})]) is None
    assert find_final_reward([]) is None


def test_malformed_reward_attributes_are_ignored() -> None:
    span = make_span({"agentlightning.reward.0.name": "primary"})
    assert get_rewards_from_span(span) == []
    assert get_reward_value(span) is None


def test_deprecated_reward_decorator_sync(recording_tracer: RecordingTracer) -> None:
    with pytest.warns(DeprecationWarning):

        @reward
        def score(x: float) -> float:
            """Score doc."""
            return x * 2

    assert score.__name__ == "score"
    assert score(0.25) == 0.5
    assert get_reward_value(recording_tracer.spans[0]) == 0.5


async def test_deprecated_reward_decorator_async(recording_tracer: RecordingTracer) -> None:
    with pytest.warns(DeprecationWarning):

        @reward
        async def score() -> int:
            return 1

    assert await score() == 1
    assert get_reward_value(recording_tracer.spans[0]) == 1.0


def test_reward_alias_module_warns_and_reexports() -> None:
    sys.modules.pop("rollouthub.reward", None)
    with pytest.warns(DeprecationWarning, match="rollouthub.reward"):
        module = importlib.import_module("rollouthub.reward")
    assert module.find_final_reward is find_final_reward
    assert module.emit_reward is emit_reward
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from rollouthub.reward import get_reward_value as alias  # noqa: F401  (cached import: no new warning)


def test_library_never_imports_the_alias_module() -> None:
    code = (
        "import sys, rollouthub, rollouthub.emitter, rollouthub.adapter, rollouthub.litagent\n"
        "assert 'rollouthub.reward' not in sys.modules, 'alias module imported'\n"
        "assert callable(rollouthub.emitter.reward)\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning:rollouthub.reward", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
