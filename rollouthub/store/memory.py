"""``InMemoryLightningStore``: the collection-based store over in-memory primitives, with span eviction.

Two ways to bound the memory held by spans:

* the reference's ``eviction_memory_threshold`` (default 70 % of the machine's RAM), accounted with
  :func:`estimate_model_size` -- kept exactly as the reference computes it; that estimate counts roughly 60 % of what
  spans really occupy (no object dicts, ``fields_set`` sets or mapping keys);
* ``memory_limit`` (a rollouthub extension, what ``rollouthub store --memory-limit`` sets): a size (``"64MiB"``,
  ``"2G"``, bytes) or a share of the RAM (``"25%"``), accounted with :func:`estimate_memory_bytes`, which tracks the
  real footprint of a stored span within a few percent, so the process stays near the bound.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union, cast

from pydantic import BaseModel

from rollouthub.types import (
    AttemptedRollout,
    FilterOptions,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    SortOptions,
    Span,
)
from rollouthub.utils.metrics import MetricsBackend

from .base import UNSET, LightningStoreCapabilities, LightningStoreStatistics, SpansEvictedError, Unset
from .collection.base import LightningCollections
from .collection.memory import InMemoryLightningCollections
from .collection_based import CollectionBasedLightningStore, tracked
from .utils import ROLLOUT_RUNNING_STATUSES

__all__ = [
    "InMemoryLightningStore",
    "estimate_model_size",
    "estimate_memory_bytes",
    "parse_memory_limit",
    "default_memory_limit",
    "DEFAULT_MEMORY_LIMIT_CAP",
]

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


_ALLOCATION_OVERHEAD = 8
"""Average bytes the allocator adds to an object beyond ``sys.getsizeof`` (size classes are 8/16-byte aligned)."""


def estimate_memory_bytes(value: Any) -> int:
    """Real memory held by ``value`` (a stored span): like :func:`estimate_model_size`, plus what that estimate leaves
    out -- each model's ``__dict__`` and ``model_fields_set``, extra fields, mapping keys -- and the allocator's
    rounding. Within a few percent of the RSS a stored span costs (measured: 5.9/6.7/11.4 KB per span of 2/8/40
    attributes holding 2 KB of text against estimates of 6.3/7.1/11.7 KB; :func:`estimate_model_size` gives
    3.6/3.9/6.1 KB)."""
    getsizeof = sys.getsizeof
    overhead = _ALLOCATION_OVERHEAD
    total = 0
    stack = [value]
    pop, extend, append = stack.pop, stack.extend, stack.append
    while stack:
        item = pop()
        kind = type(item)
        if item is None or kind is bool:  # singletons
            continue
        total += getsizeof(item) + overhead
        if kind in _LEAF_TYPES:
            continue
        if isinstance(item, BaseModel):
            attributes = item.__dict__
            total += getsizeof(attributes) + getsizeof(item.model_fields_set) + 2 * overhead
            extend(attributes.values())
            extra = item.model_extra
            if extra:
                append(extra)
        elif isinstance(item, dict):
            extend(item.keys())
            extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            extend(item)
    return total


DEFAULT_MEMORY_LIMIT_CAP = 2 * 1024**3
"""``rollouthub store --backend memory`` bounds span memory to the smaller of this and a quarter of the RAM."""

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kib": 1024,
    "kb": 1000,
    "m": 1024**2,
    "mib": 1024**2,
    "mb": 1000**2,
    "g": 1024**3,
    "gib": 1024**3,
    "gb": 1000**3,
    "t": 1024**4,
    "tib": 1024**4,
    "tb": 1000**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*|%)\s*$")


def default_memory_limit(capacity: Optional[int] = None) -> int:
    """The default span-memory bound of ``rollouthub store``: ``min(2 GiB, 25 % of capacity)`` (``capacity``: the
    machine's RAM when ``None``)."""
    if capacity is None:
        capacity = _detect_total_memory_bytes()
    return max(1, min(DEFAULT_MEMORY_LIMIT_CAP, capacity // 4))


def parse_memory_limit(value: Union[str, int], capacity: Optional[int] = None) -> int:
    """Bytes of a memory limit: an int (bytes), or a string -- a size with an optional unit (``K``/``M``/``G``/``T`` and
    ``KiB``... are powers of 1024, ``KB``/``MB``/``GB``/``TB`` powers of 1000, case-insensitive) or a percentage of
    ``capacity`` (``"25%"``; the machine's RAM when ``None``). ``ValueError`` for anything else or a result below 1
    byte."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"memory limit must be a size like '64MiB' or '25%', got {value!r}")
    if isinstance(value, int):
        result = value
    else:
        match = _SIZE_RE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or (unit != "%" and unit not in _SIZE_UNITS):
            raise ValueError(
                f"invalid memory limit {value!r}: use a size like '64MiB', '2G', '512MB' or a share like '25%'"
            )
        number = float(match.group(1))
        if unit == "%":
            if not 0 < number <= 100:
                raise ValueError(f"invalid memory limit {value!r}: a percentage must be in (0, 100]")
            result = int((_detect_total_memory_bytes() if capacity is None else capacity) * number / 100)
        else:
            result = int(number * _SIZE_UNITS[unit])
    if result < 1:
        raise ValueError(f"memory limit must be at least 1 byte, got {value!r}")
    return result


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
    """A fast store held in process memory; spans are evicted oldest-rollout-first above a memory budget.

    Besides the reference's arguments, ``memory_limit`` (bytes, ``"64MiB"``, ``"25%"``...) bounds the *real* memory of
    the stored spans: it sets the eviction threshold (the safe threshold defaults to 80 % of it) and, unless a
    ``span_size_estimator`` is given, accounts spans with :func:`estimate_memory_bytes`. ``statistics()`` then also
    reports ``memory_limit_bytes``; ``total_span_bytes`` is the estimate.
    """

    def __init__(
        self,
        *,
        thread_safe: bool = False,
        eviction_memory_threshold: float | int | None = None,
        safe_memory_threshold: float | int | None = None,
        span_size_estimator: Callable[[Span], int] | None = None,
        tracker: MetricsBackend | None = None,
        scan_debounce_seconds: float = 10.0,
        memory_limit: int | str | None = None,
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
        self._memory_limit_bytes: Optional[int] = None
        if memory_limit is not None:
            if eviction_memory_threshold is not None:
                raise ValueError("memory_limit and eviction_memory_threshold both set the eviction bound; give one")
            self._memory_limit_bytes = eviction_memory_threshold = parse_memory_limit(memory_limit, capacity)
            if span_size_estimator is None:
                span_size_estimator = estimate_memory_bytes
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
    def memory_limit_bytes(self) -> Optional[int]:
        """The ``memory_limit`` in bytes (``None`` when the reference's ``eviction_memory_threshold`` is used)."""
        return self._memory_limit_bytes

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
        if self._memory_limit_bytes is not None:
            stats["memory_limit_bytes"] = self._memory_limit_bytes
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
        """The remembered latest snapshot, in a read unit of its own."""
        async with self._read("resources") as c:
            return await self._unlocked_get_latest_resources(c)

    async def _unlocked_get_latest_resources(self, c: LightningCollections) -> Optional[ResourcesUpdate]:
        """Inside a unit: the remembered latest snapshot (looked up by id; before any is remembered, by time)."""
        cached = self._latest_resources_id
        if isinstance(cached, Unset):
            return await super()._unlocked_get_latest_resources(c)
        if cached is None:
            return None
        return cast(Optional[ResourcesUpdate], await c.resources.get(filter={"resources_id": {"exact": cached}}))

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

    async def _unlocked_get_running_rollouts(self, c: LightningCollections) -> List[AttemptedRollout]:
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
            # Rollouts ordered by (start_time, rollout_id); only those holding spans (evicting the others is a no-op),
            # so that the rollouts evicted before do not make every later eviction slower.
            holding = self._span_bytes_by_rollout
            with self._index_lock:
                order: List[Tuple[float, str]] = sorted(
                    (start, rid) for rid, start in self._start_time_by_rollout.items() if rid in holding
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
        self, rollout_id: str, filters: FilterOptions, sort: Optional[SortOptions], limit: int, offset: int
    ) -> PaginatedResult[Span]:
        if rollout_id in self._evicted_rollout_ids:
            raise SpansEvictedError(rollout_id)
        return await super()._query_spans_unit(rollout_id, filters, sort, limit, offset)
