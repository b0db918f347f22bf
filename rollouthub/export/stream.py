"""Stream export rows out of any ``LightningStore`` (in process, a ``LightningStoreClient``, the server's own store),
page by page: memory stays bounded by one page of rollouts and the spans of one rollout (``preferences`` also keeps a
small index entry per selected rollout, see :mod:`rollouthub.export.preferences`; ``dedupe`` a hash per distinct
row)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, List, Optional, Set

from rollouthub.adapter.trajectory import build_trajectories
from rollouthub.types import Rollout, Span, TrajectoryLevel

from . import rows as row_builders
from .dedupe import RowDeduper
from .preferences import preference_rows
from .reading import final_reward_of, latest_attempt_id, spans_of
from .reward_cache import FinalRewardCache
from .selection import ExportFormat, ExportSelection, Pairing, TripletFields
from .summary import ExportSummary

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

__all__ = ["ExportSummary", "iter_export_rows", "iter_selected_rollouts", "DEFAULT_PAGE_SIZE"]

logger = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 200
"""Rollouts read per store query."""

ProgressCallback = Callable[[int, int], None]
"""``(rollouts read so far, rollouts matching the store-side filters)``."""


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


async def iter_export_rows(
    store: LightningStore,
    format: ExportFormat,
    selection: Optional[ExportSelection] = None,
    *,
    pairing: Pairing = "all",
    dedupe: bool = False,
    triplet_fields: TripletFields = "completion",
    page_size: int = DEFAULT_PAGE_SIZE,
    summary: Optional[ExportSummary] = None,
    on_progress: Optional[ProgressCallback] = None,
    rewards: Optional[FinalRewardCache] = None,
    level: TrajectoryLevel = "trajectory",
) -> AsyncIterator[Dict[str, Any]]:
    """Rows of ``format`` for the rollouts of ``selection``, in rollout start-time order (deterministic).

    Each rollout contributes through the spans of its latest attempt; rollouts that yield no row are counted in
    ``summary.skipped`` by reason (no attempt, no LLM call, no final reward, reward outside the range, spans the
    adapters cannot read). ``preferences`` pairs answers to one prompt (:mod:`rollouthub.export.preferences`).
    ``dedupe`` drops rows that repeat an earlier row's content (:mod:`rollouthub.export.dedupe`; ``ValueError`` for
    ``rewards``), counted in ``summary.dropped``. ``triplet_fields`` names the answer fields of ``triplets`` rows
    (:data:`~rollouthub.export.selection.TripletFields`).

    ``rewards``: a cache of final rewards shared between exports (the store server's): every final reward computed
    here is stored in it, and ``rewards`` rows take the rewards it holds instead of reading the spans (see
    :mod:`rollouthub.export.reward_cache`).

    ``level``: the level of ``trajectories`` rows (``trajectory`` or ``transition``); what the builder skipped or
    split inside the rollouts is counted in ``summary.notes``.
    """
    selection = selection or ExportSelection()
    summary = summary if summary is not None else ExportSummary(format)
    deduper = RowDeduper(format) if dedupe else None
    rollouts = iter_selected_rollouts(store, selection, page_size=page_size, summary=summary, on_progress=on_progress)
    if format == "preferences":
        rows = preference_rows(store, rollouts, selection, pairing, summary, rewards)
    else:
        rows = _rollout_rows(store, rollouts, format, selection, triplet_fields, level, summary, rewards)
    async for row in rows:
        if deduper is not None and not deduper.first_time(row):
            summary.drop("duplicate rows")
            continue
        summary.rows += 1
        yield row


async def _rollout_rows(
    store: LightningStore,
    rollouts: AsyncIterator[Rollout],
    format: ExportFormat,
    selection: ExportSelection,
    triplet_fields: TripletFields,
    level: TrajectoryLevel,
    summary: ExportSummary,
    rewards: Optional[FinalRewardCache],
) -> AsyncIterator[Dict[str, Any]]:
    """Rows of the formats built from one rollout at a time (``messages``, ``triplets``, ``rewards``,
    ``trajectories``)."""
    triplet_adapter = row_builders.TracerTraceToTriplet(llm_call_match=row_builders.DEFAULT_LLM_CALL_MATCH)
    async for rollout in rollouts:
        attempt_id = latest_attempt_id(rollout)
        if attempt_id is None:
            if format == "rewards" and not selection.filters_reward:
                summary.rollouts_exported += 1
                yield row_builders.reward_row(rollout, None, None)
            else:
                summary.skip("no attempt")
            continue
        spans: List[Span] = []  # a rewards row needs the final reward only: the cache may hold it
        if format == "rewards":
            reward = await final_reward_of(store, rollout, attempt_id, rewards)
        else:
            spans = await spans_of(store, rollout, attempt_id)
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
                built = row_builders.triplet_rows(rollout, attempt_id, spans, triplet_adapter, triplet_fields)
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
            yield row
