"""The base of ``CollectionBasedLightningStore``: the collections, units, statistics, metrics decorators and helpers
shared by the mixins of :mod:`rollouthub.store.collection_based` (one per concern)."""

from __future__ import annotations

import functools
import logging
import math
import time
from contextlib import AbstractAsyncContextManager
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Dict,
    Generic,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    cast,
)

from rollouthub.types import (
    Attempt,
    AttemptedRollout,
    FilterOptions,
    ResourcesUpdate,
    Rollout,
    SortOptions,
)
from rollouthub.utils.id import generate_id
from rollouthub.utils.metrics import MetricsBackend

from ..base import (
    LIGHTNING_STORE_METHODS,
    LightningStore,
    LightningStoreCapabilities,
    LightningStoreStatistics,
)
from ..collection.base import (
    AtomicLabels,
    LightningCollections,
    _current_private_method,
    _current_public_method,
)
from ..utils import (
    LATENCY_BUCKETS,
)
from ..waiters import QueueWaiters, RolloutWaiters

logger = logging.getLogger(__name__)

T_collections = TypeVar("T_collections", bound=LightningCollections)
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
R = TypeVar("R")

COLLECTION_STORE_PUBLIC_METHODS: frozenset[str] = frozenset(LIGHTNING_STORE_METHODS) | {"_scan_for_unhealthy_rollouts"}
"""Method names recorded as the ``store_pubmeth`` metric label."""

UpdatedRollouts = List[Tuple[Rollout, Sequence[str]]]
_ALL_ROLLOUT_FIELDS: Tuple[str, ...] = tuple(Rollout.model_fields)
_WAIT_SLICE_SECONDS = 10.0


def tracked(name: str) -> Callable[[F], F]:
    """Record the method in the call-stack context and, with a tracker, emit ``agl.store.*`` metrics.

    Private methods (``_name``) get a plain wrapper returning the coroutine, so that without a tracker they cost no
    extra coroutine frame (they run several times per store call); public methods stay coroutine functions.
    """
    is_public = name in COLLECTION_STORE_PUBLIC_METHODS

    def decorator(func: F) -> F:
        async def measured(self: StoreCore[Any], *args: Any, **kwargs: Any) -> Any:
            tracker = self._tracker
            if tracker is None:
                return await func(self, *args, **kwargs)
            pub_token = (
                _current_public_method.set(name) if is_public and _current_public_method.get() == "unknown" else None
            )
            priv_token = _current_private_method.set(name)
            start = time.perf_counter()
            status = "OK"
            try:
                return await func(self, *args, **kwargs)
            except BaseException as exc:
                status = type(exc).__name__
                raise
            finally:
                labels = {"method": name, "store_pubmeth": _current_public_method.get(), "status": status}
                _current_private_method.reset(priv_token)
                if pub_token is not None:
                    _current_public_method.reset(pub_token)
                await tracker.inc_counter("agl.store.total", labels=labels)
                await tracker.observe_histogram("agl.store.latency", time.perf_counter() - start, labels=labels)

        if not name.startswith("_"):
            return cast(F, functools.wraps(func)(measured))

        @functools.wraps(func)
        def wrapper(self: StoreCore[Any], *args: Any, **kwargs: Any) -> Any:
            if self._tracker is None:
                return func(self, *args, **kwargs)
            return measured(self, *args, **kwargs)

        return cast(F, wrapper)

    return decorator


def healthcheck_before(func: F) -> F:
    """Run the (debounced) watchdog scan before the decorated store method."""

    @functools.wraps(func)
    async def wrapper(self: StoreCore[Any], *args: Any, **kwargs: Any) -> Any:
        # Most calls fall within the debounce: they skip the scan without entering its coroutines (with a tracker,
        # the scan is entered every time, as its metrics count it).
        if self._tracker is not None or not self._scan_debounced():
            await self._scan_for_unhealthy_rollouts()
        return await func(self, *args, **kwargs)

    return cast(F, wrapper)


def _new_rollout_id() -> str:
    return "ro-" + generate_id(12)


def _new_attempt_id() -> str:
    return "at-" + generate_id(8)


def _new_resources_id() -> str:
    return "rs-" + generate_id(12)


_validate_attempted_rollout = AttemptedRollout.__pydantic_validator__.validate_python


def _attach(rollout: Rollout, attempt: Attempt) -> AttemptedRollout:
    """Combine a validated rollout and attempt (validating the already valid values is cheaper than pydantic's
    ``model_construct``; the attempt instance is kept as is)."""
    values = {name: getattr(rollout, name) for name in _ALL_ROLLOUT_FIELDS}
    values["attempt"] = attempt
    return _validate_attempted_rollout(values)  # type: ignore[no-any-return]


def _by_rollout(rollout_id: str) -> FilterOptions:
    return {"_must": {"rollout_id": {"exact": rollout_id}}}


def _by_attempt(rollout_id: str, attempt_id: str) -> FilterOptions:
    return {"_must": {"rollout_id": {"exact": rollout_id}, "attempt_id": {"exact": attempt_id}}}


_LATEST_FIRST: SortOptions = {"name": "sequence_id", "order": "desc"}


class StoreCore(LightningStore, Generic[T_collections]):
    """Collections, units and statistics; the mixins add the store methods (see ``CollectionBasedLightningStore``)."""

    def __init__(
        self,
        collections: T_collections,
        *,
        read_snapshot: bool = False,
        tracker: Optional[MetricsBackend] = None,
        scan_debounce_seconds: float = 10.0,
    ) -> None:
        self.collections = collections
        self._read_snapshot = read_snapshot
        self._tracker = tracker
        self._launch_time = time.time()
        self._scan_debounce_seconds = scan_debounce_seconds
        self._last_scan_entrance_time = (
            self._launch_time - scan_debounce_seconds if scan_debounce_seconds > 0 else self._launch_time
        )
        self._scan_in_progress = False
        self._rollout_waiters = RolloutWaiters()
        self._queue_waiters = QueueWaiters()
        self._queue_seen_empty_at = -math.inf  # monotonic time of the last look that found the queue empty
        self._queue_generation = 0  # bumped whenever rollouts are queued in this process
        self._queue_empty_generation = -1  # the generation in which the queue was last seen empty
        if tracker is not None:
            labels = ["method", "store_pubmeth", "status"]
            tracker.register_counter("agl.store.total", labels, group_level=1)
            tracker.register_histogram("agl.store.latency", labels, buckets=LATENCY_BUCKETS, group_level=1)
            tracker.register_counter("agl.rollouts.total", ["status", "mode"], group_level=1)
            tracker.register_histogram(
                "agl.rollouts.duration", ["status", "mode"], buckets=LATENCY_BUCKETS, group_level=1
            )

    # ----------------------------------------------------------------------------------------------------------
    # Capabilities, statistics, units
    # ----------------------------------------------------------------------------------------------------------

    def _scan_debounced(self) -> bool:
        """Whether the watchdog scanned less than ``scan_debounce_seconds`` ago (never with a debounce of 0)."""
        debounce = self._scan_debounce_seconds
        return debounce > 0 and time.time() - self._last_scan_entrance_time < debounce

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        """The generic layer promises nothing by itself (concrete stores override)."""
        return LightningStoreCapabilities()

    def _read(self, *labels: AtomicLabels) -> AbstractAsyncContextManager[LightningCollections]:
        """A read unit over the given labels."""
        return self.collections.atomic(mode="r", snapshot=self._read_snapshot, labels=list(labels))

    async def _commit(self, callback: Callable[[LightningCollections], Awaitable[R]], *labels: AtomicLabels) -> R:
        """A transactional read-write unit over the given labels."""
        return await self.collections.execute(
            callback, mode="rw", snapshot=self._read_snapshot, commit=True, labels=list(labels)
        )

    @tracked("statistics")
    async def statistics(self) -> LightningStoreStatistics:
        """Name, collection sizes and uptime."""
        async with self._read("rollouts", "attempts", "spans", "resources", "workers") as c:
            return LightningStoreStatistics(
                name=type(self).__name__,
                total_rollouts=await c.rollouts.size(),
                total_attempts=await c.attempts.size(),
                total_spans=await c.spans.size(),
                total_resources=await c.resources.size(),
                total_workers=await c.workers.size(),
                uptime=time.time() - self._launch_time,
            )

    async def close(self) -> None:
        """Release the backend's resources."""
        await self.collections.close()

    if TYPE_CHECKING:  # implemented by the mixins; declared here for the ones that call across concerns

        async def _post_update_rollout(
            self, rollouts: Sequence[Tuple[Rollout, Sequence[str]]], skip_enqueue: bool = False
        ) -> None: ...

        async def _scan_for_unhealthy_rollouts(self) -> None: ...

        async def _unlocked_update_rollout_only(
            self, c: LightningCollections, rollout: Rollout, updates: Dict[str, Any]
        ) -> Rollout: ...

        async def _unlocked_query_rollouts_by_rollout_ids(
            self, c: LightningCollections, rollout_ids: Sequence[str]
        ) -> Dict[str, Rollout]: ...

        async def _unlocked_get_latest_attempt(self, c: LightningCollections, rollout_id: str) -> Optional[Attempt]: ...

        async def _unlocked_many_rollouts_to_attempted_rollouts(
            self, c: LightningCollections, rollouts: Sequence[Rollout]
        ) -> List[Union[Rollout, AttemptedRollout]]: ...

        async def _get_latest_resources(self) -> Optional[ResourcesUpdate]: ...

        async def _unlocked_get_latest_resources(self, c: LightningCollections) -> Optional[ResourcesUpdate]: ...

        async def _sync_workers_with_attempts(self, attempts: Sequence[Attempt], dequeue: bool = False) -> None: ...

        async def _unlocked_sync_workers_with_attempts(
            self, c: LightningCollections, attempts: Sequence[Attempt], dequeue: bool = False
        ) -> None: ...

        async def _dequeue_mark_worker_idle(self, worker_id: str) -> None: ...

        async def _unlocked_dequeue_mark_worker_idle(self, c: LightningCollections, worker_id: str) -> None: ...

        def _note_queue_empty(self, generation: int) -> None: ...
