"""Spans → RL triplets: ``TracerTraceToTriplet`` and ``LlmProxyTraceToTriplet``."""

from __future__ import annotations

import ast
import json
import logging
import re
from enum import Enum
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

from pydantic import BaseModel

from rollouthub.emitter.reward import get_reward_value
from rollouthub.semconv import AGL_OPERATION, AGL_REWARD, LightningSpanAttributes
from rollouthub.types.core import Triplet
from rollouthub.types.tracer import Span
from rollouthub.utils.otel import filter_and_unflatten_attributes

from .base import TraceAdapter

__all__ = [
    "TraceToTripletBase",
    "TracerTraceToTriplet",
    "LlmProxyTraceToTriplet",
    "TraceTree",
    "Transition",
    "RewardMatchPolicy",
]

logger = logging.getLogger(__name__)

_OP_INPUT = LightningSpanAttributes.OPERATION_INPUT.value
_OP_OUTPUT = LightningSpanAttributes.OPERATION_OUTPUT.value
_OP_NAME = LightningSpanAttributes.OPERATION_NAME.value
DEFAULT_LLM_CALL_MATCH = r"openai\.chat\.completion"


class RewardMatchPolicy(str, Enum):
    """How reward spans are assigned to LLM calls."""

    FIRST_SIBLING = "first_sibling"
    """A reward goes to the most recent earlier LLM-call sibling that has no reward yet."""

    FIRST_OCCURRENCE = "first_occurrence"
    """A reward goes to the most recent LLM call (in start-time order) that ended before it and has no reward."""


class Transition(BaseModel):
    """One RL transition (informational model)."""

    state: List[int]
    action: List[int]
    response_id: Optional[str]
    agent_name: str
    reward: Optional[float]


# ---------------------------------------------------------------------------------------------------------------
# Attribute helpers
# ---------------------------------------------------------------------------------------------------------------


def _subtree(attributes: Mapping[str, Any], prefix: str) -> Any:
    """The value stored at ``prefix`` itself, else the unflattened subtree below it (``{}`` if none)."""
    if prefix in attributes:
        return attributes[prefix]
    try:
        return filter_and_unflatten_attributes(attributes, prefix)
    except ValueError as exc:
        logger.warning("Cannot unflatten attributes below %r: %s", prefix, exc)
        return {}


def _int_list(value: Any, key: str) -> Optional[List[int]]:
    if not isinstance(value, (list, tuple)):
        return None
    if all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        return list(value)
    logger.warning("Attribute %r is a list but not a list of ints; ignoring it.", key)
    return None


def _first_int_list(attributes: Mapping[str, Any], keys: Sequence[str]) -> List[int]:
    for key in keys:
        if key in attributes:
            ids = _int_list(attributes[key], key)
            if ids is not None:
                return ids
    return []


def _response_id(span: Span) -> Optional[str]:
    for key in ("gen_ai.response.id", f"{_OP_OUTPUT}.id"):
        value = span.attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _without_keys(value: Any, keys: Iterable[str]) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in set(keys)}
    return value


def extract_prompt_image_urls(raw_prompt: Any) -> List[str]:
    """Collect ``image_url`` parts of a prompt (a list of messages, or a dict keyed by message index)."""
    if isinstance(raw_prompt, list):
        messages = raw_prompt
    elif isinstance(raw_prompt, dict):
        numeric = [key for key in raw_prompt if isinstance(key, str) and key.isdigit()]
        messages = [raw_prompt[key] for key in sorted(numeric, key=int)] if numeric else [raw_prompt]
    else:
        return []
    urls: List[str] = []
    for message in messages:
        if not isinstance(message, dict) or "content" not in message:
            continue
        content = message["content"]
        if isinstance(content, str):
            try:
                content = json.loads(content)
            except ValueError:
                continue
        if isinstance(content, dict):  # an unflattened list that kept numeric keys
            content = [content[k] for k in sorted(content, key=lambda k: int(k) if str(k).isdigit() else -1)]
        if not isinstance(content, list):
            continue
        for part in content:
            try:
                if part.get("type") == "image_url":
                    url = part["image_url"]["url"]
                    if isinstance(url, str):
                        urls.append(url)
            except (AttributeError, KeyError, TypeError):
                continue
    return urls


# ---------------------------------------------------------------------------------------------------------------
# TraceTree
# ---------------------------------------------------------------------------------------------------------------


class TraceTree:
    """A node of a span tree: its span and children, plus the algorithms that turn a tree into triplets."""

    def __init__(self, id: str, span: Span, children: Optional[List[TraceTree]] = None) -> None:
        """Create a node with id ``id`` for ``span``."""
        self.id = id
        self.span = span
        self.children: List[TraceTree] = list(children) if children else []

    def __repr__(self) -> str:
        return f"TraceTree(id={self.id!r}, name={self.span.name!r}, children={len(self.children)})"

    @property
    def start_time(self) -> Optional[float]:
        """Start time of the span."""
        return self.span.start_time

    @property
    def end_time(self) -> Optional[float]:
        """End time of the span."""
        return self.span.end_time

    # -------------------------------------------------------------- structure

    def find_id(self, id: str) -> Optional[TraceTree]:
        """Return the node with ``id`` in this subtree, or ``None``."""
        for node in self.traverse():
            if node.id == id:
                return node
        return None

    def add_child(self, child: TraceTree) -> None:
        """Append ``child``."""
        self.children.append(child)

    def traverse(self) -> List[TraceTree]:
        """All nodes of the subtree in pre-order."""
        result: List[TraceTree] = []
        stack: List[TraceTree] = [self]
        while stack:
            node = stack.pop()
            result.append(node)
            stack.extend(reversed(node.children))
        return result

    def names_tuple(self) -> Tuple[str, List[Any]]:
        """``(span name, [children's names_tuple()])`` — handy for asserting tree shapes."""
        return self.span.name, [child.names_tuple() for child in self.children]

    def to_json(self) -> Dict[str, Any]:
        """A JSON-serialisable dump of the subtree."""
        return {
            "id": self.id,
            "span": self.span.model_dump(mode="json"),
            "children": [child.to_json() for child in self.children],
        }

    def visualize(self, filename: str, interested_span_match: Optional[str] = None) -> None:
        """Render the tree to ``<filename>.png`` with graphviz (optional dependency).

        Args:
            filename: Output path without extension.
            interested_span_match: Regex; when given, only matching spans and their ancestors are drawn.
        """
        try:
            import graphviz  # type: ignore[import-not-found]
        except ImportError as exc:  # pragma: no cover - depends on the optional dependency
            raise ImportError("TraceTree.visualize requires the 'graphviz' package.") from exc

        keep: Optional[Set[str]] = None
        if interested_span_match is not None:
            keep = set()

            def mark(node: TraceTree, ancestors: List[str]) -> None:
                if re.search(interested_span_match, node.span.name):
                    keep.update([*ancestors, node.id])  # type: ignore[union-attr]
                for child in node.children:
                    mark(child, [*ancestors, node.id])

            mark(self, [])
        dot = graphviz.Digraph(comment="Trace Tree")
        for node in self.traverse():
            if keep is not None and node.id not in keep:
                continue
            dot.node(node.id, f"{node.span.name}\n{node.id}")
            for child in node.children:
                if keep is None or child.id in keep:
                    dot.edge(node.id, child.id)
        dot.render(filename, format="png", cleanup=True)

    @classmethod
    def from_spans(cls, spans: Sequence[Span]) -> TraceTree:
        """Build a tree from spans; missing parents become virtual nodes and several roots get a virtual root.

        Raises:
            ValueError: If ``spans`` is empty or no root can be found.
        """
        if not spans:
            raise ValueError("Cannot build a trace tree from an empty list of spans")
        nodes: Dict[str, TraceTree] = {}
        for span in spans:
            nodes[span.span_id] = cls(span.span_id, span)
        roots: List[TraceTree] = []
        dangling: Dict[str, List[TraceTree]] = {}
        for span in spans:
            node = nodes[span.span_id]
            if span.parent_id is None:
                roots.append(node)
            elif span.parent_id in nodes and span.parent_id != span.span_id:
                nodes[span.parent_id].add_child(node)
            else:
                dangling.setdefault(span.parent_id, []).append(node)
        for parent_id, children in dangling.items():
            first = children[0].span
            starts = [c.start_time for c in children if c.start_time is not None]
            ends = [c.end_time for c in children if c.end_time is not None]
            virtual = Span.from_attributes(
                attributes={},
                rollout_id=first.rollout_id,
                attempt_id=first.attempt_id,
                sequence_id=first.sequence_id,
                trace_id=first.trace_id,
                span_id=parent_id,
                start_time=min(starts) if starts else None,
                end_time=max(ends) if ends else None,
            )
            roots.append(cls(parent_id, virtual, children))
        if not roots:
            raise ValueError("No root span found in the trace")
        if len(roots) == 1:
            return roots[0]
        first_root = roots[0].span
        root_span = Span.from_attributes(
            attributes={},
            rollout_id=first_root.rollout_id,
            attempt_id=first_root.attempt_id,
            sequence_id=first_root.sequence_id,
            trace_id=first_root.trace_id,
            name="virtual-root",
            start_time=roots[0].start_time,
            end_time=roots[-1].end_time,
        )
        return cls("virtual-root", root_span, roots)

    # -------------------------------------------------------------- span classification

    def agent_name(self) -> Optional[str]:
        """The agent this span represents, detected from framework-specific attributes (or ``None``)."""
        attributes = self.span.attributes
        name = self.span.name

        def text(key: str) -> Optional[str]:
            value = attributes.get(key)
            return value if isinstance(value, str) and value else None

        candidates = [
            lambda: text("agent.name"),
            lambda: text("operation.name") if attributes.get("agentops.span.kind") == "agent" else None,
            lambda: text("recipient_agent_type"),
            lambda: text("langchain.chain.type"),
            lambda: text("executor.id"),
            lambda: text(f"{_OP_INPUT}.name") if attributes.get("type") == "agent" else None,
            lambda: text("lc_name") if name.startswith("langchain.Chain.") else None,
        ]
        for candidate in candidates:
            found = candidate()
            if found is not None:
                return found
        return None

    def is_reward_span(self) -> bool:
        """Whether the span carries a reward or is an operation named ``agentlightning.reward``."""
        if get_reward_value(self.span) is not None:
            return True
        return self.span.name == AGL_OPERATION and self.span.attributes.get(_OP_NAME) == AGL_REWARD

    # -------------------------------------------------------------- repair

    def repair_hierarchy(self) -> None:
        """Move children attached too high up under the node whose time interval contains them most tightly.

        Only the first level (from this node down) that has several children is repaired.
        """
        if len(self.children) == 1:
            self.children[0].repair_hierarchy()
            return
        all_nodes = self.traverse()
        for child in list(self.children):
            if len(self.children) <= 1:
                break
            if child.start_time is None or child.end_time is None:
                continue
            excluded = {id(node) for node in child.traverse()}
            excluded.add(id(self))
            best: Optional[TraceTree] = None
            best_slack = float("inf")
            for node in all_nodes:
                if id(node) in excluded or node.start_time is None or node.end_time is None:
                    continue
                if node.start_time <= child.start_time and child.end_time <= node.end_time:
                    slack = (node.end_time - child.end_time) + (child.start_time - node.start_time)
                    if 0 < slack < best_slack:
                        best, best_slack = node, slack
            if best is not None:
                self.children.remove(child)
                best.add_child(child)

    # -------------------------------------------------------------- LLM calls and rewards

    def find_llm_calls(
        self,
        *,
        llm_call_match: str,
        agent_match: Optional[str],
        within_matching_subtree: Optional[str] = None,
        within_reward: Optional[bool] = None,
        within_llm_call: Optional[bool] = None,
        existing_llm_call_response_ids: Optional[Set[str]] = None,
    ) -> List[Tuple[TraceTree, str]]:
        """Find LLM-call nodes (pre-order) with the agent name of their subtree.

        Args:
            llm_call_match: Regex an LLM-call span name must match.
            agent_match: Regex agent names must match (``None`` accepts every agent).
            within_matching_subtree: Current agent label (``None`` = not inside a matching agent).
            within_reward: ``None`` disables reward exclusion; ``True`` means inside a reward span.
            within_llm_call: ``None`` disables nesting de-duplication; ``True`` means inside a selected call.
            existing_llm_call_response_ids: Response ids selected so far (shared by the whole traversal).
        """
        if existing_llm_call_response_ids is None:
            existing_llm_call_response_ids = set()
        results: List[Tuple[TraceTree, str]] = []
        response_id = _response_id(self.span)
        selected = (
            within_matching_subtree is not None
            and within_reward is not True
            and re.search(llm_call_match, self.span.name) is not None
            and (response_id is not None or within_llm_call is not True)
            and (response_id is None or response_id not in existing_llm_call_response_ids)
        )
        child_within_llm_call = within_llm_call
        if selected:
            results.append((self, within_matching_subtree))  # type: ignore[arg-type]
            if response_id is not None:
                existing_llm_call_response_ids.add(response_id)
            if within_llm_call is not None:
                child_within_llm_call = True
        label = within_matching_subtree
        own_agent = self.agent_name()
        if own_agent is not None:
            label = own_agent if agent_match is None or re.search(agent_match, own_agent) else None
        child_within_reward = within_reward
        if within_reward is not None and self.is_reward_span():
            child_within_reward = True
        for child in self.children:
            results.extend(
                child.find_llm_calls(
                    llm_call_match=llm_call_match,
                    agent_match=agent_match,
                    within_matching_subtree=label,
                    within_reward=child_within_reward,
                    within_llm_call=child_within_llm_call,
                    existing_llm_call_response_ids=existing_llm_call_response_ids,
                )
            )
        return results

    @staticmethod
    def _give_reward(
        candidates: List[TraceTree], reward_node: TraceTree, reward: float, assigned: Dict[str, Optional[float]]
    ) -> None:
        reward_start = reward_node.start_time
        if reward_start is None:
            return
        for call in reversed(candidates):
            if call.end_time is not None and call.end_time <= reward_start and assigned.get(call.id) is None:
                assigned[call.id] = reward
                return

    def match_rewards(
        self, reward_match: Union[RewardMatchPolicy, str], llm_calls: Sequence[TraceTree]
    ) -> Dict[str, Optional[float]]:
        """Assign reward values to LLM-call nodes according to ``reward_match``; unmatched calls map to ``None``."""
        policy = RewardMatchPolicy(reward_match)
        call_ids = {call.id for call in llm_calls}
        assigned: Dict[str, Optional[float]] = {call.id: None for call in llm_calls}
        if policy is RewardMatchPolicy.FIRST_OCCURRENCE:
            ordered = sorted(
                self.traverse(), key=lambda n: (n.start_time is None, n.start_time if n.start_time is not None else 0)
            )
            seen: List[TraceTree] = []
            for node in ordered:
                if node.id in call_ids:
                    seen.append(node)
                reward = get_reward_value(node.span)
                if reward is not None:
                    self._give_reward(seen, node, reward, assigned)
        else:
            for node in self.traverse():
                seen = []
                for child in node.children:
                    if child.id in call_ids:
                        seen.append(child)
                    reward = get_reward_value(child.span)
                    if reward is not None:
                        self._give_reward(seen, child, reward, assigned)
        return assigned

    def span_to_triplet(self, span: Span, agent_name: str) -> Triplet:
        """Convert one LLM-call span into a :class:`Triplet` (token ids, raw messages, metadata)."""
        attributes = span.attributes
        prompt_ids = _first_int_list(attributes, ("prompt_token_ids", f"{_OP_OUTPUT}.prompt_token_ids"))
        response_ids = _first_int_list(
            attributes,
            (
                "response_token_ids",
                f"{_OP_OUTPUT}.response_token_ids.0",
                f"{_OP_OUTPUT}.choices.0.token_ids",
                f"{_OP_OUTPUT}.choices.0.provider_specific_fields.token_ids",
            ),
        )
        request: Any = {}
        for prefix in ("gen_ai.request", _OP_INPUT):
            request = _subtree(attributes, prefix)
            if request:
                break
        response: Any = {}
        for prefix in ("gen_ai.response", _OP_OUTPUT):
            response = _subtree(attributes, prefix)
            if response:
                break
        raw_prompt: Any = {}
        for prefix in ("gen_ai.prompt", f"{_OP_INPUT}.messages"):
            raw_prompt = _subtree(attributes, prefix)
            if raw_prompt:
                break
        raw_completion: Any = {}
        for prefix in ("gen_ai.completion", f"{_OP_OUTPUT}.choices"):
            raw_completion = _subtree(attributes, prefix)
            if raw_completion:
                break
        response_part: Dict[str, Any] = {"token_ids": response_ids, "raw_content": raw_completion}
        logprobs = attributes.get("logprobs.content")
        if isinstance(logprobs, str):
            try:
                response_part["logprobs"] = json.loads(logprobs)
            except ValueError:
                logger.warning("Span %s has invalid JSON in logprobs.content", span.span_id)
        return Triplet(
            prompt={
                "token_ids": prompt_ids,
                "raw_content": raw_prompt,
                "image_urls": extract_prompt_image_urls(raw_prompt),
            },
            response=response_part,
            reward=None,
            metadata={
                "request": _without_keys(request, ["messages"]),
                "response": _without_keys(response, ["choices", "prompt_token_ids", "response_token_ids"]),
                "response_id": _response_id(span),
                "agent_name": agent_name,
            },
        )

    def to_trajectory(
        self,
        llm_call_match: str = DEFAULT_LLM_CALL_MATCH,
        agent_match: Optional[str] = None,
        exclude_llm_call_in_reward: bool = True,
        dedup_llm_call: bool = True,
        reward_match: Union[RewardMatchPolicy, str] = RewardMatchPolicy.FIRST_OCCURRENCE,
        final_reward: Optional[float] = None,
        _skip_empty_token_spans: bool = False,
    ) -> List[Triplet]:
        """Turn the tree into triplets: find LLM calls, convert them, and attach rewards."""
        calls = self.find_llm_calls(
            llm_call_match=llm_call_match,
            agent_match=agent_match,
            within_matching_subtree="*" if agent_match is None else None,
            within_reward=False if exclude_llm_call_in_reward else None,
            within_llm_call=False if dedup_llm_call else None,
            existing_llm_call_response_ids=set(),
        )
        kept: List[Tuple[TraceTree, Triplet]] = []
        for node, agent_name in calls:
            triplet = self.span_to_triplet(node.span, agent_name)
            if _skip_empty_token_spans and (not triplet.prompt["token_ids"] or not triplet.response["token_ids"]):
                logger.warning("Skipping LLM call span %s with empty prompt or response token ids.", node.id)
                continue
            kept.append((node, triplet))
        rewards = self.match_rewards(reward_match, [node for node, _ in kept])
        triplets: List[Triplet] = []
        for node, triplet in kept:
            triplet.reward = rewards.get(node.id)
            triplets.append(triplet)
        if final_reward is not None and triplets:
            triplets[-1].reward = final_reward
        return triplets


# ---------------------------------------------------------------------------------------------------------------
# Adapters
# ---------------------------------------------------------------------------------------------------------------


class TraceToTripletBase(TraceAdapter[List[Triplet]]):
    """Base class of adapters that turn spans into triplets."""


def _to_spans(spans: Sequence[Any]) -> List[Span]:
    return [span if isinstance(span, Span) else Span.from_opentelemetry(span, "dummy", "dummy", 0) for span in spans]


class TracerTraceToTriplet(TraceToTripletBase):
    """Turn the spans of one rollout (as produced by the tracers) into triplets, one per LLM call."""

    def __init__(
        self,
        repair_hierarchy: bool = True,
        llm_call_match: str = DEFAULT_LLM_CALL_MATCH,
        agent_match: Optional[str] = None,
        exclude_llm_call_in_reward: bool = True,
        reward_match: RewardMatchPolicy = RewardMatchPolicy.FIRST_OCCURRENCE,
        _skip_empty_token_spans: bool = False,
    ) -> None:
        """Configure the adapter.

        Args:
            repair_hierarchy: Re-attach spans to the agent span that temporally contains them.
            llm_call_match: Regex identifying LLM-call spans by name.
            agent_match: Regex restricting triplets to matching agents (``None`` = all).
            exclude_llm_call_in_reward: Ignore LLM calls made inside reward spans (e.g. LLM-as-judge).
            reward_match: Reward assignment policy.
            _skip_empty_token_spans: Drop LLM calls without prompt or response token ids.
        """
        self.repair_hierarchy = repair_hierarchy
        self.llm_call_match = llm_call_match
        self.agent_match = agent_match
        self.exclude_llm_call_in_reward = exclude_llm_call_in_reward
        self.reward_match = reward_match
        self._skip_empty_token_spans = _skip_empty_token_spans

    def _tree(self, spans: Sequence[Any]) -> TraceTree:
        tree = TraceTree.from_spans(_to_spans(spans))
        if self.repair_hierarchy:
            tree.repair_hierarchy()
        return tree

    def visualize(
        self, spans: Sequence[Any], /, filename: str = "trace_tree", interested_span_match: Optional[str] = None
    ) -> TraceTree:
        """Build (and repair) the tree, render it to ``<filename>.png`` and return it."""
        tree = self._tree(spans)
        tree.visualize(filename, interested_span_match=interested_span_match)
        return tree

    def adapt(self, source: Sequence[Any], /) -> List[Triplet]:
        """Convert spans (``Span`` or ``ReadableSpan``) into triplets."""
        return self._tree(source).to_trajectory(
            llm_call_match=self.llm_call_match,
            agent_match=self.agent_match,
            exclude_llm_call_in_reward=self.exclude_llm_call_in_reward,
            dedup_llm_call=True,
            reward_match=self.reward_match,
            final_reward=None,
            _skip_empty_token_spans=self._skip_empty_token_spans,
        )


def _literal(value: Any) -> Any:
    """Parse Python-literal strings safely; other values are returned unchanged (unparseable → ``None``)."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return value


def _ids(value: Any) -> List[int]:
    parsed = _literal(value)
    if isinstance(parsed, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in parsed):
        return list(parsed)
    return []


class LlmProxyTraceToTriplet(TraceToTripletBase):
    """Experimental: turn LLM-proxy spans into triplets, ordering events by ``sequence_id`` only."""

    def _llm_ids(self, span: Span) -> Tuple[List[int], List[int]]:
        attributes = span.attributes
        if span.name == "raw_gen_ai_request":
            prompt = _ids(attributes.get("llm.hosted_vllm.prompt_token_ids"))
            response: List[int] = []
            raw = _literal(attributes.get("llm.hosted_vllm.response_token_ids"))
            if isinstance(raw, (list, tuple)) and raw:
                response = _ids(raw[0]) if isinstance(raw[0], (list, tuple)) else _ids(raw)
            if not response:
                choices = _literal(attributes.get("llm.hosted_vllm.choices"))
                if isinstance(choices, (list, tuple)) and choices and isinstance(choices[0], dict):
                    response = _ids(choices[0].get("token_ids"))
            return prompt, response
        if span.name == "litellm_request":
            return _ids(attributes.get("prompt_token_ids")), _ids(attributes.get("response_token_ids"))
        return [], []

    def adapt(self, source: Sequence[Any], /) -> List[Triplet]:
        """Convert proxy spans into triplets; a reward goes to the latest unrewarded call with a smaller sequence."""
        spans = sorted(
            _to_spans(source), key=lambda s: (s.sequence_id, s.start_time if s.start_time is not None else 0.0)
        )
        items: List[Dict[str, Any]] = []
        taken: Set[str] = set()
        for span in spans:
            prompt, response = self._llm_ids(span)
            if not prompt or not response:
                continue
            request_id: Optional[str] = None
            for key in ("gen_ai.response.id", "llm.hosted_vllm.id"):
                value = span.attributes.get(key)
                if isinstance(value, str) and value:
                    request_id = value
                    break
            if request_id is not None:
                if request_id in taken:
                    continue
                taken.add(request_id)
            items.append({"sequence_id": span.sequence_id, "prompt": prompt, "response": response, "id": request_id})
        items.sort(key=lambda item: item["sequence_id"])
        rewards = [(span.sequence_id, get_reward_value(span)) for span in spans]
        assigned: Dict[int, float] = {}
        for sequence_id, value in sorted((r for r in rewards if r[1] is not None), key=lambda r: r[0]):
            for index in range(len(items) - 1, -1, -1):
                if items[index]["sequence_id"] < sequence_id and index not in assigned:
                    assigned[index] = value  # type: ignore[assignment]
                    break
        return [
            Triplet(
                prompt={"token_ids": item["prompt"]},
                response={"token_ids": item["response"]},
                reward=assigned.get(index),
                metadata={"response_id": item["id"]},
            )
            for index, item in enumerate(items)
        ]
