"""Stream export rows out of any ``LightningStore`` (in process, a ``LightningStoreClient``, the server's own store),
page by page: memory stays bounded by one page of rollouts and the spans of one rollout (``preferences`` also keeps a
small index entry per selected rollout, see :func:`iter_export_rows`)."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, List, Optional, Set, Tuple

from rollouthub.adapter.trajectory import build_trajectories, input_group_id
from rollouthub.types import Rollout, Span, TrajectoryLevel

from . import rows as row_builders
from .reward_cache import FinalRewardCache
from .selection import ExportFormat, ExportSelection, Pairing

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

__all__ = ["ExportSummary", "iter_export_rows", "iter_selected_rollouts", "DEFAULT_PAGE_SIZE"]

logger = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 200
"""Rollouts read per store query."""

ProgressCallback = Callable[[int, int], None]
"""``(rollouts read so far, rollouts matching the store-side filters)``."""


@dataclass
class ExportSummary:
    """What an export did: rows written, rollouts selected and exported, and why the others were skipped."""

    format: str
    rows: int = 0
    rollouts_selected: int = 0
    rollouts_exported: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)
    """Things counted inside exported rollouts (``trajectories``: calls without token ids, prompt mismatches...)."""

    def skip(self, reason: str, count: int = 1) -> None:
        """Count ``count`` rollouts skipped for ``reason``."""
        self.skipped[reason] += count

    def note(self, what: str, count: int = 1) -> None:
        """Count ``count`` occurrences of ``what`` inside the exported rollouts."""
        self.notes[what] += count

    def describe(self) -> str:
        """One line, e.g. ``"120 rows from 118 of 124 rollouts; skipped 6: 4 no LLM call, 2 no final reward"``."""
        unit = "row" if self.rows == 1 else "rows"
        text = f"{self.rows} {unit} from {self.rollouts_exported} of {self.rollouts_selected} selected rollouts"
        if self.skipped:
            reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items(), key=lambda kv: -kv[1]))
            text += f"; skipped {sum(self.skipped.values())}: {reasons}"
        if self.notes:
            text += "; " + ", ".join(f"{n} {what}" for what, n in sorted(self.notes.items(), key=lambda kv: -kv[1]))
        return text

    def as_dict(self) -> Dict[str, Any]:
        """JSON-able form."""
        return {
            "format": self.format,
            "rows": self.rows,
            "rollouts_selected": self.rollouts_selected,
            "rollouts_exported": self.rollouts_exported,
            "skipped": dict(self.skipped),
            "notes": dict(self.notes),
        }


def _latest_attempt_id(rollout: Rollout) -> Optional[str]:
    attempt = getattr(rollout, "attempt", None)
    return attempt.attempt_id if attempt is not None else None


async def iter_selected_rollouts(
    store: LightningStore,
    selection: ExportSelection,
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
    summary: Optional[ExportSummary] = None,
    on_progress: Optional[ProgressCallback] = None,
) -> AsyncIterator[Rollout]:
    """Rollouts matching ``selection`` (except the reward range, which needs spans), in start-time order.

    Pages through ``query_rollouts`` (status and ids filtered by the store, the rest here). A rollout that reaches a
    selected status while the export runs may or may not be included; none is yielded twice.
    """
    offset = 0
    previous_page: Set[str] = set()
    modes = set(selection.mode_in) if selection.mode_in else None
    resources = set(selection.resources_id_in) if selection.resources_id_in else None
    while True:
        page = await store.query_rollouts(
            status_in=selection.status_in,
            rollout_id_in=selection.rollout_id_in,
            sort_by="start_time",
            sort_order="asc",
            limit=page_size,
            offset=offset,
        )
        items = list(page.items)
        current: Set[str] = set()
        for rollout in items:
            current.add(rollout.rollout_id)
            if rollout.rollout_id in previous_page:  # shifted by a rollout inserted before it since the last page
                continue
            if on_progress is not None:
                on_progress(offset + len(current), page.total)
            if selection.until is not None and rollout.start_time > selection.until:
                if on_progress is not None:
                    on_progress(page.total, page.total)
                return  # sorted by start time: nothing later is selected
            if (
                selection.time_rejects(rollout.start_time)
                or (modes is not None and rollout.mode not in modes)
                or (resources is not None and rollout.resources_id not in resources)
            ):
                continue
            if summary is not None:
                summary.rollouts_selected += 1
            yield rollout
        if len(items) < page_size:
            return
        previous_page = current
        offset += len(items)


async def _spans_of(store: LightningStore, rollout: Rollout, attempt_id: str) -> List[Span]:
    return list(await store.query_spans(rollout.rollout_id, attempt_id))


async def _final_reward_of(
    store: LightningStore, rollout: Rollout, attempt_id: str, rewards: Optional[FinalRewardCache]
) -> Optional[float]:
    """``rollout``'s final reward: from ``rewards`` when it holds the current version, else from the spans."""
    if rewards is not None:
        hit, reward = rewards.lookup(rollout)
        if hit:
            return reward
    reward = row_builders.final_reward(await _spans_of(store, rollout, attempt_id))
    if rewards is not None:
        rewards.store(rollout, reward)
    return reward


def _input_key(value: Any) -> bytes:
    return bytes.fromhex(input_group_id(value))


async def iter_export_rows(
    store: LightningStore,
    format: ExportFormat,
    selection: Optional[ExportSelection] = None,
    *,
    pairing: Pairing = "all",
    page_size: int = DEFAULT_PAGE_SIZE,
    summary: Optional[ExportSummary] = None,
    on_progress: Optional[ProgressCallback] = None,
    rewards: Optional[FinalRewardCache] = None,
    level: TrajectoryLevel = "trajectory",
) -> AsyncIterator[Dict[str, Any]]:
    """Rows of ``format`` for the rollouts of ``selection``, in rollout start-time order (deterministic).

    Each rollout contributes through the spans of its latest attempt; rollouts that yield no row are counted in
    ``summary.skipped`` by reason (no attempt, no LLM call, no final reward, reward outside the range, spans the
    adapters cannot read). ``preferences`` first reads every selected rollout once, keeping a small index entry per
    rollout (a hash of its input, ids and reward: ~200 bytes), then reads the rollouts of each input with two or more
    different rewards again to build the pairs, input after input in order of first appearance.

    ``rewards``: a cache of final rewards shared between exports (the store server's): every final reward computed
    here is stored in it, and ``rewards`` rows and the first ``preferences`` pass take the rewards it holds instead of
    reading the spans (see :mod:`rollouthub.export.reward_cache`).

    ``level``: the level of ``trajectories`` rows (``trajectory`` or ``transition``); what the builder skipped or
    split inside the rollouts is counted in ``summary.notes``.
    """
    selection = selection or ExportSelection()
    summary = summary if summary is not None else ExportSummary(format)
    rollouts = iter_selected_rollouts(store, selection, page_size=page_size, summary=summary, on_progress=on_progress)
    if format == "preferences":
        async for row in _preference_rows(store, rollouts, selection, pairing, summary, rewards):
            yield row
        return
    triplet_adapter = row_builders.TracerTraceToTriplet(llm_call_match=row_builders.DEFAULT_LLM_CALL_MATCH)
    async for rollout in rollouts:
        attempt_id = _latest_attempt_id(rollout)
        if attempt_id is None:
            if format == "rewards" and not selection.filters_reward:
                summary.rollouts_exported += 1
                summary.rows += 1
                yield row_builders.reward_row(rollout, None, None)
            else:
                summary.skip("no attempt")
            continue
        spans: List[Span] = []  # a rewards row needs the final reward only: the cache may hold it
        if format == "rewards":
            reward = await _final_reward_of(store, rollout, attempt_id, rewards)
        else:
            spans = await _spans_of(store, rollout, attempt_id)
            reward = row_builders.final_reward(spans)
            if rewards is not None:
                rewards.store(rollout, reward)
        reason = selection.reward_rejects(reward)
        if reason is not None:
            summary.skip(reason)
            continue
        try:
            if format == "messages":
                built = row_builders.messages_rows(rollout, attempt_id, spans)
            elif format == "triplets":
                built = row_builders.triplet_rows(rollout, attempt_id, spans, triplet_adapter)
            elif format == "trajectories":
                trajectories = build_trajectories(spans, level=level, rollout=rollout)
                for what, count in trajectories.counts().items():
                    summary.note(what, count)
                built = row_builders.trajectory_rows(rollout, attempt_id, trajectories)
                if not built and trajectories.calls:
                    summary.skip("no LLM call with token ids")
                    continue
            else:
                built = [row_builders.reward_row(rollout, attempt_id, reward)]
        except ValueError as exc:
            logger.warning("Rollout %s: the adapter cannot read its spans: %s", rollout.rollout_id, exc)
            summary.skip("spans the adapter cannot read")
            continue
        if not built:
            summary.skip("no LLM call")
            continue
        summary.rollouts_exported += 1
        for row in built:
            summary.rows += 1
            yield row


_Entry = Tuple[str, Optional[str], Optional[str], float]  # rollout id, attempt id, resources id, reward


async def _preference_rows(
    store: LightningStore,
    rollouts: AsyncIterator[Rollout],
    selection: ExportSelection,
    pairing: Pairing,
    summary: ExportSummary,
    rewards: Optional[FinalRewardCache],
) -> AsyncIterator[Dict[str, Any]]:
    groups: Dict[bytes, List[_Entry]] = {}
    async for rollout in rollouts:
        attempt_id = _latest_attempt_id(rollout)
        if attempt_id is None:
            summary.skip("no attempt")
            continue
        reward = await _final_reward_of(store, rollout, attempt_id, rewards)
        reason = selection.reward_rejects(reward) or ("no final reward" if reward is None else None)
        if reason is not None:
            summary.skip(reason)
            continue
        groups.setdefault(_input_key(rollout.input), []).append(
            (rollout.rollout_id, attempt_id, rollout.resources_id, float(reward))  # type: ignore[arg-type]
        )
    for entries in groups.values():
        if len(entries) < 2:
            summary.skip("no other rollout of the same input")
            continue
        if len({entry[3] for entry in entries}) < 2:
            summary.skip("same reward as every other rollout of its input", len(entries))
            continue
        pairs = list(row_builders.iter_pairs([(entry[3], i) for i, entry in enumerate(entries)], pairing))
        used = sorted({i for pair in pairs for i in pair})
        conversations: Dict[int, List[Dict[str, Any]]] = {}
        input_value: Any = None
        for i in used:
            rollout_id, attempt_id, _, _ = entries[i]
            found_rollout = await store.get_rollout_by_id(rollout_id)
            if found_rollout is None:
                continue
            input_value = found_rollout.input
            try:
                found = row_builders.conversations(
                    row_builders.trace_llm_calls(await store.query_spans(rollout_id, attempt_id))
                )
            except ValueError as exc:
                logger.warning("Rollout %s: the adapter cannot read its spans: %s", rollout_id, exc)
                summary.skip("spans the adapter cannot read")
                continue
            if len(found) != 1:
                summary.skip("no LLM call" if not found else "several independent conversations")
                continue
            conversations[i] = found[0].messages
        exported: Set[int] = set()
        for chosen, rejected in pairs:
            if chosen not in conversations or rejected not in conversations:
                continue
            info = [
                {"rollout_id": entries[i][0], "resources_id": entries[i][2], "reward": entries[i][3]}
                for i in (chosen, rejected)
            ]
            exported.update((chosen, rejected))
            summary.rows += 1
            yield row_builders.preference_row(
                input_value, (info[0], conversations[chosen]), (info[1], conversations[rejected])
            )
        summary.rollouts_exported += len(exported)
        unpaired = len(entries) - len(used)
        if unpaired:
            summary.skip("not paired (best-worst pairing)", unpaired)
