"""Spans and sequence ids: allocating sequence ids, storing spans (heartbeats of their attempts), querying them."""

from __future__ import annotations

import logging
import time
from typing import (
    Any,
    Dict,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
    cast,
)

from rollouthub.types import (
    Attempt,
    FilterOptions,
    PaginatedResult,
    Rollout,
    SortOptions,
    Span,
)
from rollouthub.types.queries import SpanQuery

from ..base import (
    check_assign_flags,
    paginated_json,
    paginated_json_from_items,
)
from ..collection.base import (
    DuplicatedPrimaryKeyError,
    LightningCollections,
)
from ..domains import MAX_SEQUENCE_ID
from ..utils import (
    heartbeat_attempt_status,
    heartbeat_promotes_rollout,
)
from .core import (
    StoreCore,
    T_collections,
    _by_attempt,
    healthcheck_before,
    tracked,
)

logger = logging.getLogger(__name__)


class SpansMixin(StoreCore[T_collections]):
    """Span storage and queries, sequence ids."""

    # ----------------------------------------------------------------------------------------------------------
    # Spans and sequence ids
    # ----------------------------------------------------------------------------------------------------------

    @tracked("get_next_span_sequence_id")
    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        """Atomically bump the rollout's counter and return the new value."""
        return (await self._issue_many_span_sequence_ids([(rollout_id, attempt_id)]))[0]

    @tracked("get_many_span_sequence_ids")
    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[Tuple[str, str]]) -> Sequence[int]:
        """Allocate consecutive ids per rollout, handed out in input order."""
        if not rollout_attempt_ids:
            return []
        return await self._issue_many_span_sequence_ids(rollout_attempt_ids)

    @tracked("_issue_many_span_sequence_ids")
    async def _issue_many_span_sequence_ids(self, pairs: Sequence[Tuple[str, str]]) -> List[int]:
        counts: Dict[str, int] = {}
        for rollout_id, _ in pairs:
            counts[rollout_id] = counts.get(rollout_id, 0) + 1
        async with self.collections.atomic(mode="rw", snapshot=False, labels=["span_sequence_ids"]) as c:
            next_value = await self._unlocked_issue_sequence_ids(c, counts)
        out: List[int] = []
        for rollout_id, _ in pairs:
            out.append(next_value[rollout_id])
            next_value[rollout_id] += 1
        return out

    async def _unlocked_issue_sequence_ids(self, c: LightningCollections, counts: Dict[str, int]) -> Dict[str, int]:
        """Inside a unit: bump each rollout's counter by its count; returns the first new id per rollout."""
        first: Dict[str, int] = {}
        for rollout_id, count in counts.items():
            end = int(await c.span_sequence_ids.inc(rollout_id, count))
            first[rollout_id] = end - count + 1
        return first

    @tracked("_sync_span_sequence_id")
    async def _unlocked_sync_span_sequence_id(self, c: LightningCollections, rollout_id: str, sequence_id: int) -> None:
        """Inside a unit: raise the rollout's counter to at least ``sequence_id``.

        The counter is written only when needed (``KeyValue.raise_to``): spans whose ids were allocated by the store
        (the common case) then never write the counter row, so concurrent span inserts of one rollout do not contend
        on it.
        """
        await c.span_sequence_ids.raise_to(rollout_id, sequence_id)

    @tracked("add_span")
    async def add_span(self, span: Span) -> Span | None:
        """Insert a span; ``None`` (logged) for a duplicate ``(rollout_id, attempt_id, span_id)``."""
        inserted = await self._add_many_spans_helper(span.rollout_id, span.attempt_id, [span])
        return span if inserted else None

    @tracked("add_many_spans")
    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        """Insert spans group by group (by rollout and attempt); returns exactly the newly stored spans."""
        groups: Dict[Tuple[str, str], List[Span]] = {}
        for span in spans:
            groups.setdefault((span.rollout_id, span.attempt_id), []).append(span)
        stored: List[Span] = []
        for (rollout_id, attempt_id), group in groups.items():
            stored.extend(await self._add_many_spans_helper(rollout_id, attempt_id, group))
        return stored

    @tracked("add_many_spans_assigning_ids")
    async def add_many_spans_assigning_ids(self, spans: Sequence[Span], assign: Sequence[bool]) -> Sequence[Span]:
        """Like :meth:`add_many_spans`, allocating the flagged spans' sequence ids inside each group's insert unit
        (set in place on those spans)."""
        check_assign_flags(spans, assign)
        groups: Dict[Tuple[str, str], Tuple[List[Span], List[bool]]] = {}
        for span, flag in zip(spans, assign, strict=True):
            entry = groups.setdefault((span.rollout_id, span.attempt_id), ([], []))
            entry[0].append(span)
            entry[1].append(bool(flag))
        assigning = [rollout_id for (rollout_id, _), (_, flags) in groups.items() if any(flags)]
        if len(assigning) != len(set(assigning)):
            # Ids are consecutive per rollout in input order: with several attempts of one rollout in one call,
            # allocate them all first (in one unit) instead of group by group.
            return await super().add_many_spans_assigning_ids(spans, assign)
        stored: List[Span] = []
        for (rollout_id, attempt_id), (group, flags) in groups.items():
            stored.extend(await self._add_many_spans_helper(rollout_id, attempt_id, group, flags))
        return stored

    @tracked("_add_many_spans_helper")
    async def _add_many_spans_helper(
        self, rollout_id: str, attempt_id: str, spans: List[Span], assign: Optional[List[bool]] = None
    ) -> List[Span]:
        """Validate, allocate the ``assign``-flagged spans' sequence ids, raise the sequence counter, insert and
        heartbeat in ONE unit; on a duplicate, fall back to one-by-one inserts."""
        max_provided: Optional[int]
        if assign is None:
            n_assign, max_provided = 0, max(span.sequence_id for span in spans)
        else:
            n_assign = sum(assign)
            provided = [span.sequence_id for span, flag in zip(spans, assign, strict=True) if not flag]
            max_provided = max(provided) if provided else None
        if max_provided is not None and max_provided > MAX_SEQUENCE_ID:
            raise ValueError(
                f"sequence_id {max_provided} is above the largest span sequence id {MAX_SEQUENCE_ID} (2^53 - 1)"
            )

        async def assign_ids(c: LightningCollections) -> None:
            next_id = (await self._unlocked_issue_sequence_ids(c, {rollout_id: n_assign}))[rollout_id]
            for span, flag in zip(spans, assign or (), strict=True):
                if flag:
                    span.sequence_id = next_id
                    next_id += 1

        async def insert_and_beat(c: LightningCollections) -> Optional[Rollout]:
            rollout, attempt, latest = await self._unlocked_validate_rollout_and_attempt(c, rollout_id, attempt_id)
            if n_assign:
                await assign_ids(c)
            if max_provided is not None:
                await self._unlocked_sync_span_sequence_id(c, rollout_id, max_provided)
            await c.spans.insert(spans)  # all-or-nothing: a duplicate aborts the unit before any write
            # The unit holds the rows: the heartbeat reuses them instead of reading them again.
            return await self._unlocked_on_attempt_heartbeat(c, rollout_id, attempt_id, rollout, attempt, latest)

        try:
            promoted = await self._commit(insert_and_beat, "rollouts", "attempts", "spans", "span_sequence_ids")
            inserted = spans
        except DuplicatedPrimaryKeyError:
            async with self.collections.atomic(mode="rw", labels=["span_sequence_ids"]) as c:
                if n_assign:
                    await assign_ids(c)
                await self._unlocked_sync_span_sequence_id(c, rollout_id, max(span.sequence_id for span in spans))
            inserted = await self._insert_spans_with_fallback(spans)
            promoted = await self._on_attempt_heartbeat(rollout_id, attempt_id) if inserted else None
        if promoted is not None:
            await self._post_update_rollout([(promoted, ("status",))])
        if inserted:
            await self._post_add_spans(inserted, rollout_id, attempt_id)
        return inserted

    async def _unlocked_validate_rollout_and_attempt(
        self, c: LightningCollections, rollout_id: str, attempt_id: str
    ) -> Tuple[Rollout, Attempt, Optional[Attempt]]:
        """Inside a unit: the rollout, the attempt and -- when a heartbeat would promote the rollout, which only its
        latest attempt may do -- the latest attempt (else ``None``); ``ValueError`` when either does not exist.

        All three are read at once (:meth:`~.collection.base.LightningCollections.get_rollout_and_attempts`)."""
        rollout, latest, attempt = await c.get_rollout_and_attempts(rollout_id, attempt_id)
        if rollout is None:
            raise ValueError(f"Rollout {rollout_id} not found")
        if attempt is None:
            raise ValueError(f"Attempt {attempt_id} not found for rollout {rollout_id}")
        return rollout, attempt, latest if heartbeat_promotes_rollout(rollout.status) else None

    @tracked("_insert_spans_with_fallback")
    async def _insert_spans_with_fallback(self, spans: List[Span]) -> List[Span]:
        """Insert spans one by one, skipping (and logging) duplicates; returns the newly stored ones."""
        inserted: List[Span] = []
        for span in spans:
            try:
                async with self.collections.atomic(mode="w", labels=["spans"]) as c:
                    await c.spans.insert([span])
                inserted.append(span)
            except DuplicatedPrimaryKeyError:
                logger.error(
                    "Duplicated span added for rollout=%s, attempt=%s, span=%s. Skipping.",
                    span.rollout_id,
                    span.attempt_id,
                    span.span_id,
                )
        return inserted

    @tracked("_post_add_spans")
    async def _post_add_spans(self, spans: Sequence[Span], rollout_id: str, attempt_id: str) -> None:
        """After spans were stored (and the heartbeat written): backend work such as memory accounting."""

    @tracked("_on_attempt_heartbeat")
    async def _on_attempt_heartbeat(self, rollout_id: str, attempt_id: str) -> Optional[Rollout]:
        """The heartbeat in a unit of its own; returns the rollout when it was promoted to ``running``."""

        async def beat(c: LightningCollections) -> Optional[Rollout]:
            return await self._unlocked_on_attempt_heartbeat(c, rollout_id, attempt_id)

        return cast(Optional[Rollout], await self._commit(beat, "rollouts", "attempts"))

    async def _unlocked_on_attempt_heartbeat(
        self,
        c: LightningCollections,
        rollout_id: str,
        attempt_id: str,
        rollout: Optional[Rollout] = None,
        attempt: Optional[Attempt] = None,
        latest: Optional[Attempt] = None,
    ) -> Optional[Rollout]:
        """Inside a unit: a span is a heartbeat -- refresh and revive the attempt (only ``last_heartbeat_time`` and
        ``status`` are written) and promote the rollout to ``running`` when this is its latest attempt.

        ``rollout``/``attempt``/``latest``: the rows when the caller already read them in this unit (they are read
        otherwise; ``latest``, the rollout's latest attempt, is only needed when the rollout may be promoted).
        """
        if attempt is None:
            attempt = await c.attempts.get(filter=_by_attempt(rollout_id, attempt_id))
            if attempt is None:
                return None
        if rollout is None:
            rollout = await c.rollouts.get(filter={"rollout_id": {"exact": rollout_id}})
            if rollout is None:
                return None
        updated = attempt.model_copy(
            update={"last_heartbeat_time": time.time(), "status": heartbeat_attempt_status(attempt.status)}
        )
        await c.attempts.write_update([updated], update_fields=["last_heartbeat_time", "status"])
        if not heartbeat_promotes_rollout(rollout.status):
            return None
        if latest is None:
            latest = await self._unlocked_get_latest_attempt(c, rollout_id)
        if latest is None or latest.attempt_id != attempt_id:
            return None
        promoted = rollout.model_copy(update={"status": "running"})
        await c.rollouts.write_update([promoted], update_fields=["status"])
        return promoted

    @tracked("query_spans")
    @healthcheck_before
    async def _query_spans(
        self, rollout_id: str, attempt_id: str | Literal["latest"] | None, query: SpanQuery
    ) -> PaginatedResult[Span]:
        """Spans of a rollout; the scope (rollout, attempt) is always ANDed, optional filters pooled."""
        filters = await self._span_scope(rollout_id, attempt_id, query)
        if filters is None:
            return PaginatedResult(items=[], limit=query.limit, offset=query.offset, total=0)
        return await self._query_spans_unit(rollout_id, filters, query.sort(), query.limit, query.offset)

    @tracked("query_spans_json")
    @healthcheck_before
    async def query_spans_json(
        self, rollout_id: str, attempt_id: str | Literal["latest"] | None = None, **filters: Any
    ) -> bytes:
        """:meth:`query_spans` (same keyword arguments) as the JSON bytes of its page (the backend may build them
        without span models)."""
        query = SpanQuery.of(**filters)
        scope = await self._span_scope(rollout_id, attempt_id, query)
        if scope is None:
            return paginated_json_from_items([], query.limit, query.offset, 0)
        return await self._query_spans_json_unit(rollout_id, scope, query.sort(), query.limit, query.offset)

    async def _span_scope(
        self, rollout_id: str, attempt_id: Optional[str], query: SpanQuery
    ) -> Optional[FilterOptions]:
        """The filter of a span query: the rollout (and attempt) scope ANDed with the query's pooled conditions;
        ``None`` when ``attempt_id="latest"`` and the rollout has no attempt."""
        if attempt_id == "latest":
            async with self._read("attempts") as c:
                latest = await self._unlocked_get_latest_attempt(c, rollout_id)
            if latest is None:
                return None
            attempt_id = latest.attempt_id
        must: Dict[str, Any] = {"rollout_id": {"exact": rollout_id}}
        if attempt_id is not None:
            must["attempt_id"] = {"exact": attempt_id}
        conditions = query.conditions()
        filters: FilterOptions = {"_must": must, **conditions}
        if conditions:
            filters["_aggregate"] = query.filter_logic
        return filters

    async def _query_spans_unit(
        self, rollout_id: str, filters: FilterOptions, sort: Optional[SortOptions], limit: int, offset: int
    ) -> PaginatedResult[Span]:
        async with self._read("spans") as c:
            return await c.spans.query(filter=filters, sort=sort, limit=limit, offset=offset)

    async def _query_spans_json_unit(
        self, rollout_id: str, filters: FilterOptions, sort: Optional[SortOptions], limit: int, offset: int
    ) -> bytes:
        """The page of :meth:`_query_spans_unit` as JSON bytes (backends may override to skip the models)."""
        return paginated_json(await self._query_spans_unit(rollout_id, filters, sort, limit, offset))
