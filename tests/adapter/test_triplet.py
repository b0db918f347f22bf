"""``TracerTraceToTriplet`` and ``TraceTree``."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollouthub.adapter import TracerTraceToTriplet
from rollouthub.adapter.triplet import RewardMatchPolicy, TraceTree, Transition, extract_prompt_image_urls
from rollouthub.types.tracer import Span

from .helpers import llm_attrs, make_span, reward_attrs, sid

LLM = "openai.chat.completion"

# ---------------------------------------------------------------------------------------------------------------
# Tree building
# ---------------------------------------------------------------------------------------------------------------


def test_from_spans_requires_spans() -> None:
    with pytest.raises(ValueError):
        TraceTree.from_spans([])


def test_from_spans_single_root_keeps_child_order() -> None:
    spans = [
        make_span("root", 1),
        make_span("b", 3, parent=1),
        make_span("a", 2, parent=1),
        make_span("a.child", 4, parent=2),
    ]
    tree = TraceTree.from_spans(spans)
    assert tree.id == sid(1)
    assert tree.names_tuple() == ("root", [("b", []), ("a", [("a.child", [])])])
    assert [node.span.name for node in tree.traverse()] == ["root", "b", "a", "a.child"]
    assert tree.find_id(sid(4)) is not None and tree.find_id("nope") is None


def test_from_spans_missing_parent_becomes_virtual_node() -> None:
    spans = [make_span("x", 1, parent=99, start=2.0, end=3.0), make_span("y", 2, parent=99, start=1.0, end=5.0)]
    tree = TraceTree.from_spans(spans)
    assert tree.id == sid(99)
    assert tree.span.name == "agentlightning.virtual"
    assert tree.span.parent_id is None
    assert (tree.start_time, tree.end_time) == (1.0, 5.0)
    assert (tree.span.rollout_id, tree.span.attempt_id, tree.span.trace_id) == ("ro-1", "at-1", spans[0].trace_id)
    assert [child.span.name for child in tree.children] == ["x", "y"]


def test_from_spans_multiple_roots_get_virtual_root() -> None:
    spans = [
        make_span("r1", 1, start=0.0, end=2.0),
        make_span("orphan", 3, parent=77, start=1.0, end=4.0),
        make_span("r2", 2, start=3.0, end=6.0),
    ]
    tree = TraceTree.from_spans(spans)
    assert tree.id == "virtual-root"
    assert tree.span.name == "virtual-root"
    assert tree.names_tuple() == (
        "virtual-root",
        [("r1", []), ("r2", []), ("agentlightning.virtual", [("orphan", [])])],
    )
    assert tree.start_time == 0.0
    assert tree.end_time == 4.0  # the last root is the virtual parent of the orphan
    json.dumps(tree.to_json())


# ---------------------------------------------------------------------------------------------------------------
# Hierarchy repair
# ---------------------------------------------------------------------------------------------------------------


def test_repair_moves_llm_call_under_containing_agent() -> None:
    spans = [
        make_span("root", 1, start=0, end=10),
        make_span("agent", 2, parent=1, start=1, end=5),
        make_span(LLM, 3, parent=1, start=2, end=3),
        make_span("later-llm", 4, parent=1, start=6, end=7),
    ]
    tree = TraceTree.from_spans(spans)
    tree.repair_hierarchy()
    assert tree.names_tuple() == ("root", [("agent", [(LLM, [])]), ("later-llm", [])])


def test_repair_descends_through_single_child_and_picks_tightest_container() -> None:
    spans = [
        make_span("root", 1, start=0, end=10),
        make_span("session", 2, parent=1, start=0, end=10),
        make_span("outer", 3, parent=2, start=1, end=9),
        make_span("inner", 4, parent=3, start=1.5, end=4),
        make_span(LLM, 5, parent=2, start=2, end=3),
    ]
    tree = TraceTree.from_spans(spans)
    tree.repair_hierarchy()
    assert tree.names_tuple() == ("root", [("session", [("outer", [("inner", [(LLM, [])])])])])


def test_repair_ignores_zero_slack_and_missing_times() -> None:
    spans = [
        make_span("root", 1, start=0, end=10),
        make_span("same-interval", 2, parent=1, start=2, end=3),
        make_span("no-times", 3, parent=1, start=None, end=None),
        make_span(LLM, 4, parent=1, start=2, end=3),
    ]
    tree = TraceTree.from_spans(spans)
    tree.repair_hierarchy()
    assert tree.names_tuple() == ("root", [("same-interval", []), ("no-times", []), (LLM, [])])


def test_repair_only_first_level_with_several_children() -> None:
    spans = [
        make_span("root", 1, start=0, end=10),
        make_span("agent", 2, parent=1, start=1, end=8),
        make_span("sub", 3, parent=2, start=2, end=4),
        make_span("deep-llm", 4, parent=2, start=2.5, end=3),
        make_span("other", 5, parent=1, start=9, end=9.5),
    ]
    tree = TraceTree.from_spans(spans)
    tree.repair_hierarchy()
    # 'deep-llm' is inside 'sub' in time, but only the root level is repaired.
    assert tree.names_tuple() == ("root", [("agent", [("sub", []), ("deep-llm", [])]), ("other", [])])


# ---------------------------------------------------------------------------------------------------------------
# Triplets
# ---------------------------------------------------------------------------------------------------------------


def three_calls_then_reward() -> list[Span]:
    return [
        make_span("rollout", 1, start=0, end=20),
        make_span(LLM, 2, parent=1, start=1, end=2, attributes=llm_attrs("r1", "q1", "a1", [1, 2], [3])),
        make_span(LLM, 3, parent=1, start=3, end=4, attributes=llm_attrs("r2", "q2", "a2", [4], [5, 6])),
        make_span(LLM, 4, parent=1, start=5, end=6, attributes=llm_attrs("r3", "q3", "a3", [7], [8])),
        make_span("agentlightning.annotation", 5, parent=1, start=7, end=7, attributes=reward_attrs(0.75)),
    ]


def test_three_calls_and_final_reward() -> None:
    triplets = TracerTraceToTriplet().adapt(three_calls_then_reward())
    assert len(triplets) == 3
    assert [t.reward for t in triplets] == [None, None, 0.75]
    first = triplets[0]
    assert first.prompt == {
        "token_ids": [1, 2],
        "raw_content": [{"role": "user", "content": "q1"}],
        "image_urls": [],
    }
    assert first.response == {
        "token_ids": [3],
        "raw_content": [{"role": "assistant", "content": "a1", "finish_reason": "stop"}],
    }
    assert first.metadata == {
        "request": {"model": "mock-model", "temperature": 0.0},
        "response": {"id": "r1", "model": "mock-model"},
        "response_id": "r1",
        "agent_name": "*",
    }
    assert [t.metadata["response_id"] for t in triplets] == ["r1", "r2", "r3"]
    assert [t.response["raw_content"][0]["content"] for t in triplets] == ["a1", "a2", "a3"]


def test_adapter_is_callable_and_accepts_sdk_spans() -> None:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("rollout"):
        with tracer.start_as_current_span(LLM, attributes=llm_attrs("sdk-1", prompt_ids=[1], response_ids=[2])):
            pass
    triplets = TracerTraceToTriplet()(list(exporter.get_finished_spans()))
    assert len(triplets) == 1
    assert triplets[0].prompt["token_ids"] == [1]
    assert triplets[0].response["token_ids"] == [2]
    assert triplets[0].metadata["response_id"] == "sdk-1"


def test_rewards_interleaved_first_occurrence() -> None:
    spans = [
        make_span("rollout", 1, start=0, end=20),
        make_span(LLM, 2, parent=1, start=1, end=2, attributes=llm_attrs("r1")),
        make_span("reward", 3, parent=1, start=2.5, end=2.5, attributes=reward_attrs(0.1)),
        make_span(LLM, 4, parent=1, start=3, end=4, attributes=llm_attrs("r2")),
        make_span("reward", 5, parent=1, start=4.5, end=4.5, attributes=reward_attrs(0.2)),
        make_span("reward", 6, parent=1, start=5, end=5, attributes=reward_attrs(0.3)),  # nothing left to reward
    ]
    assert [t.reward for t in TracerTraceToTriplet().adapt(spans)] == [0.1, 0.2]


def test_reward_before_call_end_is_not_assigned() -> None:
    spans = [
        make_span("rollout", 1, start=0, end=20),
        make_span(LLM, 2, parent=1, start=1, end=5, attributes=llm_attrs("r1")),
        make_span("reward", 3, parent=1, start=3, end=3, attributes=reward_attrs(1.0)),
    ]
    assert [t.reward for t in TracerTraceToTriplet(repair_hierarchy=False).adapt(spans)] == [None]


def reward_outside_agent() -> list[Span]:
    return [
        make_span("rollout", 1, start=0, end=20),
        make_span("agent", 2, parent=1, start=0.5, end=5, attributes={"agent.name": "solver"}),
        make_span(LLM, 3, parent=2, start=1, end=2, attributes=llm_attrs("r1")),
        make_span("reward", 4, parent=1, start=6, end=6, attributes=reward_attrs(0.9)),
    ]


def test_reward_policies_differ() -> None:
    spans = reward_outside_agent()
    assert [t.reward for t in TracerTraceToTriplet().adapt(spans)] == [0.9]
    sibling = TracerTraceToTriplet(reward_match=RewardMatchPolicy.FIRST_SIBLING)
    assert [t.reward for t in sibling.adapt(spans)] == [None]


def test_first_sibling_policy_matches_preceding_siblings() -> None:
    spans = [
        make_span("rollout", 1, start=0, end=20),
        make_span("reward", 2, parent=1, start=0.5, end=0.5, attributes=reward_attrs(9.0)),  # before any call
        make_span(LLM, 3, parent=1, start=1, end=2, attributes=llm_attrs("r1")),
        make_span("reward", 4, parent=1, start=3, end=3, attributes=reward_attrs(0.1)),
        make_span(LLM, 5, parent=1, start=4, end=5, attributes=llm_attrs("r2")),
        make_span("reward", 6, parent=1, start=6, end=6, attributes=reward_attrs(0.2)),
    ]
    adapter = TracerTraceToTriplet(reward_match="first_sibling")  # type: ignore[arg-type]
    assert [t.reward for t in adapter.adapt(spans)] == [0.1, 0.2]


def test_agent_filtering_and_names() -> None:
    spans = [
        make_span("rollout", 1, start=0, end=20),
        make_span("solver-span", 2, parent=1, start=1, end=5, attributes={"agent.name": "solver"}),
        make_span(LLM, 3, parent=2, start=2, end=3, attributes=llm_attrs("r1")),
        make_span("judge-span", 4, parent=1, start=6, end=12, attributes={"agent.name": "judge"}),
        make_span(LLM, 5, parent=4, start=7, end=8, attributes=llm_attrs("r2")),
        make_span("nested-solver", 6, parent=4, start=9, end=11, attributes={"agent.name": "solver-2"}),
        make_span(LLM, 7, parent=6, start=9.5, end=10, attributes=llm_attrs("r3")),
    ]
    all_calls = TracerTraceToTriplet().adapt(spans)
    assert [t.metadata["agent_name"] for t in all_calls] == ["solver", "judge", "solver-2"]
    solver_only = TracerTraceToTriplet(agent_match="^solver").adapt(spans)
    assert [t.metadata["response_id"] for t in solver_only] == ["r1", "r3"]
    assert TracerTraceToTriplet(agent_match="nobody").adapt(spans) == []


def test_llm_calls_outside_any_agent_are_excluded_with_agent_match() -> None:
    spans = [
        make_span("rollout", 1, start=0, end=20),
        make_span(LLM, 2, parent=1, start=1, end=2, attributes=llm_attrs("r1")),
    ]
    assert TracerTraceToTriplet(agent_match="solver").adapt(spans) == []


def test_dedup_by_response_id_and_nesting() -> None:
    spans = [
        make_span("rollout", 1, start=0, end=20),
        make_span(LLM, 2, parent=1, start=1, end=4, attributes=llm_attrs("same")),
        make_span(LLM, 3, parent=2, start=1.5, end=3.5, attributes=llm_attrs("same")),  # duplicate instrumentation
        make_span(LLM, 4, parent=2, start=2, end=3, attributes=llm_attrs(None)),  # nested, no id: skipped
        make_span(LLM, 5, parent=2, start=2, end=3, attributes=llm_attrs("inner")),  # nested, new id: kept
        make_span(LLM, 6, parent=1, start=5, end=6, attributes=llm_attrs("same")),  # sibling duplicate
        make_span(LLM, 7, parent=1, start=7, end=8, attributes=llm_attrs(None)),  # top-level, no id: kept
    ]
    triplets = TracerTraceToTriplet(repair_hierarchy=False).adapt(spans)
    assert [t.metadata["response_id"] for t in triplets] == ["same", "inner", None]


def test_without_dedup_nested_calls_are_kept() -> None:
    spans = [
        make_span("rollout", 1, start=0, end=20),
        make_span(LLM, 2, parent=1, start=1, end=4, attributes=llm_attrs("a")),
        make_span(LLM, 3, parent=2, start=2, end=3, attributes=llm_attrs(None)),
    ]
    tree = TraceTree.from_spans(spans)
    assert len(tree.to_trajectory(dedup_llm_call=False)) == 2
    assert len(tree.to_trajectory(dedup_llm_call=True)) == 1


def judge_inside_reward_operation() -> list[Span]:
    return [
        make_span("rollout", 1, start=0, end=20),
        make_span(LLM, 2, parent=1, start=1, end=2, attributes=llm_attrs("policy")),
        make_span(
            "agentlightning.operation",
            3,
            parent=1,
            start=3,
            end=6,
            attributes={"agentlightning.operation.name": "agentlightning.reward"},
        ),
        make_span(LLM, 4, parent=3, start=4, end=5, attributes=llm_attrs("judge")),
        make_span("agentlightning.annotation", 5, parent=1, start=7, end=7, attributes=reward_attrs(0.5)),
    ]


def test_llm_calls_inside_reward_scopes_are_excluded() -> None:
    triplets = TracerTraceToTriplet().adapt(judge_inside_reward_operation())
    assert [(t.metadata["response_id"], t.reward) for t in triplets] == [("policy", 0.5)]
    included = TracerTraceToTriplet(exclude_llm_call_in_reward=False).adapt(judge_inside_reward_operation())
    assert [(t.metadata["response_id"], t.reward) for t in included] == [("policy", None), ("judge", 0.5)]


def test_llm_call_match_is_a_regex() -> None:
    spans = [
        make_span("rollout", 1, start=0, end=20),
        make_span("my.llm.call", 2, parent=1, start=1, end=2, attributes=llm_attrs("x")),
        make_span(LLM, 3, parent=1, start=3, end=4, attributes=llm_attrs("y")),
    ]
    triplets = TracerTraceToTriplet(llm_call_match=r"^my\.llm").adapt(spans)
    assert [t.metadata["response_id"] for t in triplets] == ["x"]


def test_skip_empty_token_spans() -> None:
    spans = [
        make_span("rollout", 1, start=0, end=20),
        make_span(LLM, 2, parent=1, start=1, end=2, attributes=llm_attrs("with", prompt_ids=[1], response_ids=[2])),
        make_span(LLM, 3, parent=1, start=3, end=4, attributes=llm_attrs("without")),
        make_span("reward", 4, parent=1, start=5, end=5, attributes=reward_attrs(1.0)),
    ]
    assert len(TracerTraceToTriplet().adapt(spans)) == 2
    kept = TracerTraceToTriplet(_skip_empty_token_spans=True).adapt(spans)
    assert [(t.metadata["response_id"], t.reward) for t in kept] == [("with", 1.0)]


def test_logprobs_and_non_int_token_lists() -> None:
    attrs = llm_attrs("lp", prompt_ids=[1])
    attrs["response_token_ids"] = ["a", "b"]
    attrs["logprobs.content"] = json.dumps([{"token": "x", "logprob": -0.1}])
    spans = [make_span("rollout", 1, start=0, end=5), make_span(LLM, 2, parent=1, start=1, end=2, attributes=attrs)]
    (triplet,) = TracerTraceToTriplet().adapt(spans)
    assert triplet.response["token_ids"] == []
    assert triplet.response["logprobs"] == [{"token": "x", "logprob": -0.1}]


def test_weave_style_operation_spans() -> None:
    attrs: Dict[str, Any] = {
        "agentlightning.operation.input.model": "m",
        "agentlightning.operation.input.messages.0.role": "user",
        "agentlightning.operation.input.messages.0.content": "hi",
        "agentlightning.operation.output.id": "weave-1",
        "agentlightning.operation.output.model": "m",
        "agentlightning.operation.output.prompt_token_ids": [5, 6],
        "agentlightning.operation.output.choices.0.message.content": "hello",
        "agentlightning.operation.output.choices.0.token_ids": [7],
    }
    spans = [
        make_span("root", 1, start=0, end=5),
        make_span("openai.chat.completions.create", 2, parent=1, start=1, end=2, attributes=attrs),
    ]
    (triplet,) = TracerTraceToTriplet().adapt(spans)
    assert triplet.prompt["token_ids"] == [5, 6]
    assert triplet.prompt["raw_content"] == [{"role": "user", "content": "hi"}]
    assert triplet.response["token_ids"] == [7]
    assert triplet.response["raw_content"] == [{"message": {"content": "hello"}, "token_ids": [7]}]
    assert triplet.metadata["response_id"] == "weave-1"
    assert triplet.metadata["request"] == {"model": "m"}
    assert triplet.metadata["response"] == {"id": "weave-1", "model": "m"}


def test_weave_response_token_ids_variants() -> None:
    base = {"agentlightning.operation.output.id": "w"}
    for key in (
        "agentlightning.operation.output.response_token_ids.0",
        "agentlightning.operation.output.choices.0.provider_specific_fields.token_ids",
    ):
        spans = [make_span("r", 1), make_span(LLM, 2, parent=1, attributes={**base, key: [9, 9]})]
        (triplet,) = TracerTraceToTriplet().adapt(spans)
        assert triplet.response["token_ids"] == [9, 9]


# ---------------------------------------------------------------------------------------------------------------
# Multimodal prompts
# ---------------------------------------------------------------------------------------------------------------


def test_image_urls_from_json_string_content() -> None:
    content = json.dumps(
        [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "http://img/1.png"}},
            {"type": "image_url"},  # malformed: skipped
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ]
    )
    attrs = llm_attrs("mm")
    attrs["gen_ai.prompt.0.content"] = content
    spans = [make_span("r", 1), make_span(LLM, 2, parent=1, attributes=attrs)]
    (triplet,) = TracerTraceToTriplet().adapt(spans)
    assert triplet.prompt["image_urls"] == ["http://img/1.png", "data:image/png;base64,AAAA"]


@pytest.mark.parametrize(
    "raw_prompt, expected",
    [
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u1"}}]}], ["u1"]),
        (
            {
                "1": {"content": [{"type": "image_url", "image_url": {"url": "second"}}]},
                "0": {"content": [{"type": "image_url", "image_url": {"url": "first"}}]},
            },
            ["first", "second"],
        ),
        ({"content": [{"type": "image_url", "image_url": {"url": "single"}}]}, ["single"]),
        ([{"content": "plain text"}, {"no_content": 1}, "junk", {"content": [None, 3]}], []),
        ("not a prompt", []),
    ],
)
def test_extract_prompt_image_urls(raw_prompt: Any, expected: list[str]) -> None:
    assert extract_prompt_image_urls(raw_prompt) == expected


# ---------------------------------------------------------------------------------------------------------------
# Agent-name detection and misc
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, attributes, expected",
    [
        ("s", {"agent.name": "a1"}, "a1"),
        ("s", {"agentops.span.kind": "agent", "operation.name": "a2"}, "a2"),
        ("s", {"agentops.span.kind": "tool", "operation.name": "a2"}, None),
        ("s", {"recipient_agent_type": "a3"}, "a3"),
        ("s", {"langchain.chain.type": "a4"}, "a4"),
        ("s", {"executor.id": "a5"}, "a5"),
        ("s", {"type": "agent", "agentlightning.operation.input.name": "a6"}, "a6"),
        ("langchain.Chain.graph", {"lc_name": "a7"}, "a7"),
        ("other", {"lc_name": "a7"}, None),
        ("s", {"agent.name": "first", "executor.id": "second"}, "first"),
        ("s", {}, None),
    ],
)
def test_agent_name_rules(name: str, attributes: Dict[str, Any], expected: Optional[str]) -> None:
    assert TraceTree("x", make_span(name, 1, attributes=attributes)).agent_name() == expected


def test_is_reward_span_node() -> None:
    assert TraceTree("x", make_span("a", 1, attributes=reward_attrs(0.0))).is_reward_span()
    marker = make_span(
        "agentlightning.operation", 1, attributes={"agentlightning.operation.name": "agentlightning.reward"}
    )
    assert TraceTree("x", marker).is_reward_span()
    assert not TraceTree("x", make_span("agentlightning.operation", 1)).is_reward_span()


def test_final_reward_overrides_last_triplet() -> None:
    tree = TraceTree.from_spans(three_calls_then_reward())
    triplets = tree.to_trajectory(final_reward=5.0)
    assert [t.reward for t in triplets] == [None, None, 5.0]


def test_public_attributes_and_transition_model() -> None:
    adapter = TracerTraceToTriplet()
    assert adapter.repair_hierarchy is True
    assert adapter.llm_call_match == r"openai\.chat\.completion"
    assert adapter.agent_match is None
    assert adapter.exclude_llm_call_in_reward is True
    assert adapter.reward_match is RewardMatchPolicy.FIRST_OCCURRENCE
    assert RewardMatchPolicy("first_sibling") is RewardMatchPolicy.FIRST_SIBLING
    transition = Transition(state=[1], action=[2], response_id=None, agent_name="*", reward=None)
    assert transition.agent_name == "*"


class FakeDigraph:
    """Records what ``TraceTree.visualize`` draws (graphviz itself is an optional dependency)."""

    instances: list[FakeDigraph] = []

    def __init__(self, comment: str = "") -> None:
        self.nodes: list[str] = []
        self.edges: list[tuple[str, str]] = []
        self.rendered: Optional[tuple[str, str]] = None
        FakeDigraph.instances.append(self)

    def node(self, node_id: str, label: str) -> None:
        self.nodes.append(node_id)

    def edge(self, parent: str, child: str) -> None:
        self.edges.append((parent, child))

    def render(self, filename: str, format: str, cleanup: bool) -> None:
        self.rendered = (filename, format)


def test_visualize_filters_to_matches_and_ancestors(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    fake = types.ModuleType("graphviz")
    fake.Digraph = FakeDigraph  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "graphviz", fake)
    FakeDigraph.instances.clear()
    spans = [
        make_span("root", 1, start=0, end=10),
        make_span("agent", 2, parent=1, start=1, end=5),
        make_span(LLM, 3, parent=2, start=2, end=3),
        make_span("noise", 4, parent=1, start=6, end=7),
    ]
    tree = TracerTraceToTriplet().visualize(spans, filename="out/tree", interested_span_match=r"openai")
    assert isinstance(tree, TraceTree)
    (graph,) = FakeDigraph.instances
    assert graph.nodes == [sid(1), sid(2), sid(3)]
    assert graph.edges == [(sid(1), sid(2)), (sid(2), sid(3))]
    assert graph.rendered == ("out/tree", "png")
    FakeDigraph.instances.clear()
    tree.visualize("all")
    assert len(FakeDigraph.instances[0].nodes) == 4
