"""``InMemoryLightningStore``: the collection-based store over in-memory primitives, with span eviction (store.md 7)."""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from pydantic import BaseModel

from rollouthub.types import AttemptedRollout, PaginatedResult, ResourcesUpdate, Rollout, SortOptions, Span
from rollouthub.utils.metrics import MetricsBackend

from .base import UNSET, LightningStoreCapabilities, LightningStoreStatistics, SpansEvictedError, Unset
from .collection.memory import InMemoryLightningCollections
from .collection_based import CollectionBasedLightningStore, tracked
from .utils import ROLLOUT_RUNNING_STATUSES

__all__ = ["InMemoryLightningStore", "estimate_model_size"]

logger = logging.getLogger(__name__)

_FALLBACK_MEMORY_BYTES = 8 * 1024**3


def _detect_total_memory_bytes() -> int:
    """Total system memory (psutil), or 8 GiB with an error log when psutil is unavailable."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # pragma: no cover - psutil is a core dependency
        logger.error("Could not detect the total memory (psutil unavailable); assuming 8 GiB")
        return _FALLBACK_MEMORY_BYTES


_LEAF_TYPES = frozenset({str, int, float, bool, type(None), bytes})


def estimate_model_size(value: Any) -> int:
    """Recursive ``sys.getsizeof`` estimate (models: ``__dict__`` values; mappings: values only; sequences: items)."""
    getsizeof = sys.getsizeof
    # Iterative walk with a fast path for the common leaves (this runs for every stored span).
    total = 0
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        total += getsizeof(item)
        kind = type(item)
        if kind in _LEAF_TYPES:
            continue
        if isinstance(item, BaseModel):
            extend(item.__dict__.values())
        elif isinstance(item, dict):
            extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            extend(item)
    return total


def _resolve_eviction_threshold(value: Union[float, int, None], capacity: int) -> int:
    if value is None:
        resolved = int(capacity * 0.7)
    elif isinstance(value, float):
        if not 0 < value <= 1:
            raise ValueError("eviction_memory_threshold ratio must be greater than 0 and at most 1")
        resolved = int(capacity * value)
    else:
        if value < 0:
            raise ValueError("eviction_memory_threshold must be non-negative")
        resolved = int(value)
    if resolved < 1:
        raise ValueError("eviction_memory_threshold must be at least 1 bytes")
    return resolved


def _resolve_safe_threshold(value: Union[float, int, None], eviction: int, capacity: int) -> int:
    if value is None:
        resolved = max(int(eviction * 0.8), 0)
    elif isinstance(value, float):
        if not 0 <= value <= 1:
            raise ValueError("safe_memory_threshold ratio must be between 0 and 1 inclusive")
        resolved = int(capacity * value)
    else:
        if value < 0:
            raise ValueError("safe_memory_threshold must be non-negative")
        resolved = int(value)
    if not 0 <= resolved < eviction:
        raise ValueError("safe_memory_threshold must be smaller than eviction_memory_threshold")
    return resolved


class InMemoryLightningStore(CollectionBasedLightningStore[InMemoryLightningCollections]):
    """A fast store held in process memory; spans are evicted oldest-rollout-first above a memory budget."""

    def __init__(
        self,
        *,
        thread_safe: bool = False,
        eviction_memory_threshold: float | int | None = None,
        safe_memory_threshold: float | int | None = None,
        span_size_estimator: Callable[[Span], int] | None = None,
        tracker: MetricsBackend | None = None,
        scan_debounce_seconds: float = 10.0,
    ) -> None:
        super().__init__(
            InMemoryLightningCollections(lock_type="thread" if thread_safe else "asyncio", tracker=tracker),
            read_snapshot=False,
            tracker=tracker,
            scan_debounce_seconds=scan_debounce_seconds,
        )
        self._thread_safe = thread_safe
        capacity = _detect_total_memory_bytes()
        if capacity <= 0:
            raise ValueError("Detected memory capacity must be positive")
        self._memory_capacity_bytes = capacity
        self._eviction_threshold_bytes = _resolve_eviction_threshold(eviction_memory_threshold, capacity)
        self._safe_threshold_bytes = _resolve_safe_threshold(
            safe_memory_threshold, self._eviction_threshold_bytes, capacity
        )
        self._span_size_estimator = span_size_estimator
        self._latest_resources_id: Union[str, None, Unset] = UNSET
        self._total_span_bytes = 0
        self._span_bytes_by_rollout: Dict[str, int] = {}
        self._evicted_rollout_ids: Set[str] = set()
        self._start_time_by_rollout: Dict[str, float] = {}
        self._running_rollout_ids: Set[str] = set()
        self._index_lock = threading.Lock()

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        """Thread safety follows the constructor flag; always async-safe; not shared across processes."""
        return LightningStoreCapabilities(
            thread_safe=self._thread_safe, async_safe=True, zero_copy=False, otlp_traces=False
        )

    async def statistics(self) -> LightningStoreStatistics:
        """Generic statistics plus the memory figures."""
        stats = await super().statistics()
        stats["total_span_bytes"] = self._total_span_bytes
        stats["eviction_threshold_bytes"] = self._eviction_threshold_bytes
        stats["safe_threshold_bytes"] = self._safe_threshold_bytes
        stats["memory_capacity_bytes"] = self._memory_capacity_bytes
        return stats

    # -- resources: cache the latest id ---------------------------------------------------------------------
    @tracked("add_resources_inmemory")
    async def add_resources(self, resources: Any) -> ResourcesUpdate:
        """Add a snapshot and remember it as the latest."""
        update = await super().add_resources(resources)
        self._latest_resources_id = update.resources_id
        return update

    @tracked("update_resources_inmemory")
    async def update_resources(self, resources_id: str, resources: Any) -> ResourcesUpdate:
        """Upsert a snapshot and remember it as the latest."""
        update = await super().update_resources(resources_id, resources)
        self._latest_resources_id = update.resources_id
        return update

    @tracked("_get_latest_resources_inmemory")
    async def _get_latest_resources(self) -> Optional[ResourcesUpdate]:
        cached = self._latest_resources_id
        if isinstance(cached, Unset):
            return await super()._get_latest_resources()
        if cached is None:
            return None
        async with self._read("resources") as c:
            return await c.resources.get(filter={"resources_id": {"exact": cached}})

    # -- indexes maintained by the post-update hook ---------------------------------------------------------
    @tracked("_post_update_rollout_inmemory")
    async def _on_rollouts_updated(self, rollouts: Sequence[Tuple[Rollout, Sequence[str]]]) -> None:
        with self._index_lock:
            for rollout, _ in rollouts:
                self._start_time_by_rollout.setdefault(rollout.rollout_id, rollout.start_time)
                if rollout.status in ROLLOUT_RUNNING_STATUSES:
                    self._running_rollout_ids.add(rollout.rollout_id)
                else:
                    self._running_rollout_ids.discard(rollout.rollout_id)

    async def _unlocked_get_running_rollouts(self, c: Any) -> List[AttemptedRollout]:
        """Watchdog candidates from the running-rollouts index instead of a scan of every rollout."""
        with self._index_lock:
            candidate_ids = list(self._running_rollout_ids)
        rollouts = await self._unlocked_query_rollouts_by_rollout_ids(c, candidate_ids)
        running = [r for r in rollouts.values() if r.status in ROLLOUT_RUNNING_STATUSES]
        attached = await self._unlocked_many_rollouts_to_attempted_rollouts(c, running)
        return [r for r in attached if isinstance(r, AttemptedRollout)]

    # -- spans: accounting and eviction ---------------------------------------------------------------------
    async def _post_add_spans(self, spans: Sequence[Span], rollout_id: str, attempt_id: str) -> None:
        await super()._post_add_spans(spans, rollout_id, attempt_id)
        await self._account_span_size(spans, rollout_id)
        await self._maybe_evict_spans()

    def _span_size(self, span: Span) -> int:
        if self._span_size_estimator is not None:
            return max(int(self._span_size_estimator(span)), 0)
        return estimate_model_size(span)

    @tracked("_account_span_size")
    async def _account_span_size(self, spans: Sequence[Span], rollout_id: str) -> None:
        added = sum(self._span_size(span) for span in spans)
        async with self.collections.atomic(mode="rw", labels=["rollouts", "spans"]):
            self._span_bytes_by_rollout[rollout_id] = self._span_bytes_by_rollout.get(rollout_id, 0) + added
            self._total_span_bytes += added

    @tracked("_maybe_evict_spans")
    async def _maybe_evict_spans(self) -> None:
        if self._total_span_bytes <= self._eviction_threshold_bytes:
            return
        async with self.collections.atomic(mode="rw", labels=["rollouts", "spans"]):
            if self._total_span_bytes <= self._eviction_threshold_bytes:
                return
            with self._index_lock:
                order: List[Tuple[float, str]] = sorted(
                    (start, rid) for rid, start in self._start_time_by_rollout.items()
                )
            for _, rollout_id in order:
                if self._total_span_bytes <= self._safe_threshold_bytes:
                    break
                await self._evict_spans_for_rollout(rollout_id)

    @tracked("_evict_spans_for_rollout")
    async def _evict_spans_for_rollout(self, rollout_id: str) -> None:
        """Inside the eviction unit: drop one rollout's spans and mark it evicted when it had any."""
        freed = self._span_bytes_by_rollout.pop(rollout_id, 0)
        self.collections.spans.evict_subtree([rollout_id])
        self._total_span_bytes -= freed
        if freed > 0:
            self._evicted_rollout_ids.add(rollout_id)

    @tracked("query_spans_inmemory")
    async def _query_spans_unit(
        self, rollout_id: str, filters: Any, sort: Optional[SortOptions], limit: int, offset: int
    ) -> PaginatedResult[Span]:
        if rollout_id in self._evicted_rollout_ids:
            raise SpansEvictedError(rollout_id)
        return await super()._query_spans_unit(rollout_id, filters, sort, limit, offset)
