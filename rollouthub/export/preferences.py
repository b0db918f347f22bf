"""``preferences`` rows: pairs of answers to one prompt, the better one ``chosen`` (TRL's conversational preference
layout: ``prompt`` / ``chosen`` / ``rejected`` lists of chat messages).

**Pairing rule.** Two rollouts are paired only when the model was asked the same thing: the same rollout ``input``
(equal JSON) *and* the same rendered prompt -- the messages before the first answer (system and user turns, compared
by role, text, tool calls and tool call id) and the same tools offered. Rollouts of different resources versions
are paired when those versions render the same prompt (a template re-published unchanged); rollouts whose prompts
differ (two prompt versions of APO) are never paired, nor are equal prompts of different inputs (the reward may judge
the answer against the input). Within a group of rollouts sharing a prompt, ``pairing="all"`` gives every pair with a
strictly higher final reward first, ``"best-worst"`` one pair per group.

**Shared prompt.** ``prompt`` is the longest common beginning of the two conversations that ends right before an
answer of each, so ``prompt`` is never empty, ``chosen`` and ``rejected`` start with an assistant message, and
``prompt + chosen`` is the whole chosen conversation. Two identical conversations with different rewards teach no
preference: that pair is dropped (counted in the summary).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from rollouthub.adapter.trajectory import input_group_id
from rollouthub.types import Rollout

from .reading import latest_attempt_id, spans_of
from .reward_cache import FinalRewardCache
from .rows import Conversation, conversations, final_reward, message_key, trace_llm_calls
from .selection import ExportSelection, Pairing
from .summary import ExportSummary

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore


__all__ = ["answer_start", "prompt_key", "split_pair", "preference_row", "iter_pairs", "preference_rows"]

logger = logging.getLogger(__name__)

Message = Dict[str, Any]

IDENTICAL_ANSWERS = "pairs of identical answers"
"""Summary reason of a dropped pair whose two conversations are the same."""


def answer_start(messages: Sequence[Mapping[str, Any]]) -> Optional[int]:
    """Index of the first assistant message (the first answer), or ``None`` when there is none."""
    for index, message in enumerate(messages):
        if message.get("role") == "assistant":
            return index
    return None


def prompt_key(input: Any, prompt: Sequence[Mapping[str, Any]], tools: Optional[Sequence[Any]]) -> bytes:
    """What two rollouts must share to be paired: their input (its :func:`~rollouthub.adapter.input_group_id`, the
    ``input_id`` of ``trajectories`` rows), the messages before the first answer and the tools."""
    shared = [input_group_id(input), [message_key(m) for m in prompt], tools or None]
    text = json.dumps(shared, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def split_pair(
    chosen: Sequence[Message], rejected: Sequence[Message]
) -> Optional[Tuple[List[Message], List[Message], List[Message]]]:
    """``(prompt, chosen answer, rejected answer)`` of two conversations that begin with the same prompt: the prompt
    is their longest common beginning that ends right before an assistant message of each; ``None`` when the two
    conversations are the same (nothing to prefer)."""
    shared = 0
    while shared < min(len(chosen), len(rejected)) and message_key(chosen[shared]) == message_key(rejected[shared]):
        shared += 1
    while shared > 0 and not (
        shared < len(chosen)
        and shared < len(rejected)
        and chosen[shared].get("role") == "assistant"
        and rejected[shared].get("role") == "assistant"
    ):
        shared -= 1
    if [message_key(m) for m in chosen[shared:]] == [message_key(m) for m in rejected[shared:]]:
        return None
    return list(chosen[:shared]), list(chosen[shared:]), list(rejected[shared:])


def preference_row(
    input: Any,
    tools: Optional[List[Dict[str, Any]]],
    split: Tuple[List[Message], List[Message], List[Message]],
    chosen: Mapping[str, Any],
    rejected: Mapping[str, Any],
) -> Dict[str, Any]:
    """One ``preferences`` row from :func:`split_pair`'s ``split``; ``chosen`` and ``rejected`` hold the
    ``rollout_id``, ``resources_id`` and ``reward`` of the two rollouts."""
    prompt, chosen_messages, rejected_messages = split
    return {
        "input": input,
        "prompt": prompt,
        "chosen": chosen_messages,
        "rejected": rejected_messages,
        "tools": tools,
        "chosen_reward": chosen["reward"],
        "rejected_reward": rejected["reward"],
        "chosen_rollout_id": chosen["rollout_id"],
        "rejected_rollout_id": rejected["rollout_id"],
        "chosen_resources_id": chosen["resources_id"],
        "rejected_resources_id": rejected["resources_id"],
    }


def iter_pairs(ranked: Sequence[Tuple[float, int]], pairing: str) -> Iterable[Tuple[int, int]]:
    """Index pairs (chosen, rejected) of rollouts ranked by ``(reward, order)``: ``all`` pairs with a strictly higher
    reward first, or only the best against the worst."""
    ordered = sorted(ranked, key=lambda item: (-item[0], item[1]))
    if pairing == "best-worst":
        best, worst = ordered[0], min(ordered, key=lambda item: (item[0], item[1]))
        if best[0] > worst[0]:
            yield best[1], worst[1]
        return
    for i, (reward_i, index_i) in enumerate(ordered):
        for reward_j, index_j in ordered[i + 1 :]:
            if reward_i > reward_j:
                yield index_i, index_j


def _one_conversation(spans: Sequence[Any]) -> Tuple[Optional[Conversation], Optional[str]]:
    """The rollout's only conversation, or ``(None, why it cannot be paired)``."""
    try:
        found = conversations(trace_llm_calls(spans))
    except ValueError as exc:
        logger.warning("The adapter cannot read the spans of a rollout: %s", exc)
        return None, "spans the adapter cannot read"
    if len(found) != 1:
        return None, "no LLM call" if not found else "several independent conversations"
    start = answer_start(found[0].messages)
    if start is None:
        return None, "no answer"
    if start == 0:
        return None, "no prompt before the first answer"
    return found[0], None


_Entry = Tuple[str, str, Optional[str], float]  # rollout id, attempt id, resources id, reward


async def preference_rows(
    store: LightningStore,
    rollouts: AsyncIterator[Rollout],
    selection: ExportSelection,
    pairing: Pairing,
    summary: ExportSummary,
    rewards: Optional[FinalRewardCache] = None,
) -> AsyncIterator[Dict[str, Any]]:
    """Pairs of the selected ``rollouts`` (see the module doc), group after group in order of first appearance.

    Two passes: the first reads each rollout's spans once and keeps a small entry per pairable rollout (a 16-byte key
    of input and prompt, its ids and final reward); the second reads again the conversations of the rollouts of one
    group at a time to write their pairs. Every final reward computed is remembered in ``rewards``.
    """
    groups: Dict[bytes, List[_Entry]] = {}
    async for rollout in rollouts:
        attempt_id = latest_attempt_id(rollout)
        if attempt_id is None:
            summary.skip("no attempt")
            continue
        spans = await spans_of(store, rollout, attempt_id)
        reward = final_reward(spans)
        if rewards is not None:
            rewards.store(rollout, reward)
        reason = selection.reward_rejects(reward) or ("no final reward" if reward is None else None)
        if reason is not None:
            summary.skip(reason)
            continue
        conversation, reason = _one_conversation(spans)
        if conversation is None:
            summary.skip(reason or "no LLM call")
            continue
        start = answer_start(conversation.messages) or 0
        key = prompt_key(rollout.input, conversation.messages[:start], conversation.tools)
        entry: _Entry = (rollout.rollout_id, attempt_id, rollout.resources_id, float(reward))  # type: ignore[arg-type]
        groups.setdefault(key, []).append(entry)
    for entries in groups.values():
        async for row in _group_rows(store, entries, pairing, summary):
            yield row


async def _group_rows(
    store: LightningStore, entries: List[_Entry], pairing: Pairing, summary: ExportSummary
) -> AsyncIterator[Dict[str, Any]]:
    """The pairs of one group of rollouts that share input and prompt."""
    if len(entries) < 2:
        summary.skip("no other answer to the same prompt")
        return
    if len({entry[3] for entry in entries}) < 2:
        summary.skip("same reward as every other answer to its prompt", len(entries))
        return
    pairs = list(iter_pairs([(entry[3], i) for i, entry in enumerate(entries)], pairing))
    used = sorted({i for pair in pairs for i in pair})
    found: Dict[int, Conversation] = {}
    input_value: Any = None
    for i in used:
        rollout = await store.get_rollout_by_id(entries[i][0])
        if rollout is None:
            continue
        input_value = rollout.input
        conversation, reason = _one_conversation(await spans_of(store, rollout, entries[i][1]))
        if conversation is None:
            summary.skip(reason or "no LLM call")
            continue
        found[i] = conversation
    exported: Set[int] = set()
    for chosen, rejected in pairs:
        if chosen not in found or rejected not in found:
            continue
        split = split_pair(found[chosen].messages, found[rejected].messages)
        if split is None:
            summary.drop(IDENTICAL_ANSWERS)
            continue
        info = [
            {"rollout_id": entries[i][0], "resources_id": entries[i][2], "reward": entries[i][3]}
            for i in (chosen, rejected)
        ]
        exported.update((chosen, rejected))
        yield preference_row(input_value, found[chosen].tools, split, info[0], info[1])
    summary.rollouts_exported += len(exported)
    unpaired = len(entries) - len(used)
    if unpaired:
        summary.skip("not paired (best-worst pairing)", unpaired)
