"""``CollectionBasedLightningStore``: all store business logic, written once over the collections layer.

Backends (memory, SQL, MongoDB) only provide primitives and ``atomic()`` (see :mod:`.collection.base`); every rule
of store.md sections 3-4 lives here, with the status transitions themselves as pure functions in :mod:`.utils`.

Improvements over the reference that keep its behaviour visible to callers:

* a dequeue pops the queue and creates the attempt in ONE unit, and a status change into ``queuing``/``requeuing``
  re-enqueues inside the same unit that writes it, so a crash can never lose a queued rollout;
* ``wait_for_rollouts`` is event-driven (wakes up as soon as a rollout finishes) instead of polling;
* ``add_many_spans`` returns exactly the spans that were newly stored;
* ``query_spans(filter_logic="or")`` without optional filters returns every span of the scope.

This module is longer than 800 lines because it is the single home of the store's business logic; splitting it
would scatter the rules that must be read together.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
import warnings
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Generic,
    List,
    Literal,
    NamedTuple,
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
    AttemptStatus,
    EnqueueRolloutRequest,
    FilterOptions,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    SortOptions,
    Span,
    TaskInput,
    Worker,
    WorkerStatus,
)
from rollouthub.utils.id import generate_id
from rollouthub.utils.metrics import MetricsBackend

from .base import (
    ABANDON_CHECK_SECONDS,
    LIGHTNING_STORE_METHODS,
    UNSET,
    LightningStore,
    LightningStoreCapabilities,
    LightningStoreStatistics,
    Unset,
    check_assign_flags,
    is_finished,
    paginated_json,
    paginated_json_from_items,
    provided_fields,
)
from .collection.base import (
    DuplicatedPrimaryKeyError,
    LightningCollections,
    PoppedRollout,
    _current_private_method,
    _current_public_method,
    get_current_store_methods,
)
from .domains import MAX_SEQUENCE_ID
from .utils import (
    LATENCY_BUCKETS,
    ROLLOUT_QUEUING_STATUSES,
    ROLLOUT_RUNNING_STATUSES,
    attempt_status_sets_end_time,
    derive_rollout_status,
    heartbeat_attempt_status,
    heartbeat_promotes_rollout,
    rollout_status_sets_end_time,
    scan_unhealthy_rollouts,
    worker_fields_for_attempt,
    worker_fields_for_empty_dequeue,
)
from .waiters import QueueWaiters, RolloutWaiters

__all__ = [
    "CollectionBasedLightningStore",
    "tracked",
    "healthcheck_before",
    "get_current_store_methods",
    "COLLECTION_STORE_PUBLIC_METHODS",
    "COLLECTION_STORE_ALL_METHODS",
]

logger = logging.getLogger(__name__)

T_collections = TypeVar("T_collections", bound=LightningCollections)
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

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
        async def measured(self: CollectionBasedLightningStore[Any], *args: Any, **kwargs: Any) -> Any:
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
        def wrapper(self: CollectionBasedLightningStore[Any], *args: Any, **kwargs: Any) -> Any:
            if self._tracker is None:
                return func(self, *args, **kwargs)
            return measured(self, *args, **kwargs)

        return cast(F, wrapper)

    return decorator


def healthcheck_before(func: F) -> F:
    """Run the (debounced) watchdog scan before the decorated store method."""

    @functools.wraps(func)
    async def wrapper(self: CollectionBasedLightningStore[Any], *args: Any, **kwargs: Any) -> Any:
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


class _SpanQuery(NamedTuple):
    """The optional part of a span query: pooled ``exact``/``contains`` conditions, sort and page."""

    conditions: Dict[str, Dict[str, Any]]
    filter_logic: str
    sort: Optional[SortOptions]
    limit: int
    offset: int

    @staticmethod
    def build(
        *,
        trace_id: str | None = None,
        trace_id_contains: str | None = None,
        span_id: str | None = None,
        span_id_contains: str | None = None,
        parent_id: str | None = None,
        parent_id_contains: str | None = None,
        name: str | None = None,
        name_contains: str | None = None,
        filter_logic: Literal["and", "or"] = "and",
        limit: int = -1,
        offset: int = 0,
        sort_by: str | None = "sequence_id",
        sort_order: Literal["asc", "desc"] = "asc",
    ) -> _SpanQuery:
        """From the keyword arguments (and defaults) of ``query_spans``."""
        conditions: Dict[str, Dict[str, Any]] = {}
        for field, exact, contains in (
            ("trace_id", trace_id, trace_id_contains),
            ("span_id", span_id, span_id_contains),
            ("parent_id", parent_id, parent_id_contains),
            ("name", name, name_contains),
        ):
            ops: Dict[str, Any] = {}
            if exact is not None:
                ops["exact"] = exact
            if contains is not None:
                ops["contains"] = contains
            if ops:
                conditions[field] = ops
        sort: Optional[SortOptions] = {"name": sort_by, "order": sort_order} if sort_by else None
        return _SpanQuery(conditions, filter_logic, sort, limit, offset)


class CollectionBasedLightningStore(LightningStore, Generic[T_collections]):
    """The reference business logic over a :class:`LightningCollections` bundle."""

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
        self._waiters = RolloutWaiters()
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

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        """The generic layer promises nothing by itself (concrete stores override)."""
        return LightningStoreCapabilities()

    def _read(self, *labels: Any) -> Any:
        """A read unit over the given labels."""
        return self.collections.atomic(mode="r", snapshot=self._read_snapshot, labels=list(labels))

    async def _commit(self, callback: Callable[[Any], Awaitable[Any]], *labels: Any) -> Any:
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

    # ----------------------------------------------------------------------------------------------------------
    # Rollout creation and the queue
    # ----------------------------------------------------------------------------------------------------------

    def _build_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode],
        resources_id: Optional[str],
        config: Optional[RolloutConfig],
        metadata: Optional[Dict[str, Any]],
        status: RolloutStatus,
        now: float,
    ) -> Rollout:
        return Rollout(
            rollout_id=_new_rollout_id(),
            input=input,
            start_time=now,
            mode=mode,
            resources_id=resources_id,
            status=status,
            config=config.model_copy(deep=True) if config is not None else RolloutConfig(),
            metadata=dict(metadata) if metadata is not None else {},
        )

    async def _resolve_resources_id(self, resources_id: Optional[str]) -> Optional[str]:
        if resources_id is not None:
            return resources_id
        latest = await self._get_latest_resources()
        return latest.resources_id if latest is not None else None

    @tracked("start_rollout")
    @healthcheck_before
    async def start_rollout(
        self,
        input: TaskInput,
        mode: RolloutMode | None = None,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: Dict[str, Any] | None = None,
        worker_id: str | None = None,
    ) -> AttemptedRollout:
        """Create a rollout with its first attempt (status ``preparing``), bypassing the queue."""
        resources_id = await self._resolve_resources_id(resources_id)
        now = time.time()
        rollout = self._build_rollout(input, mode, resources_id, config, metadata, "preparing", now)
        attempt = Attempt(
            rollout_id=rollout.rollout_id,
            attempt_id=_new_attempt_id(),
            sequence_id=1,
            start_time=now,
            status="preparing",
            worker_id=worker_id,
        )

        async def persist(c: Any) -> None:
            await c.attempts.insert([attempt])
            await c.rollouts.insert([rollout])
            await self._unlocked_sync_workers_with_attempts(c, [attempt])

        await self._commit(persist, "rollouts", "attempts", "workers")
        await self._post_update_rollout([(rollout, _ALL_ROLLOUT_FIELDS)])
        return _attach(rollout, attempt)

    @tracked("enqueue_rollout")
    @healthcheck_before
    async def enqueue_rollout(
        self,
        input: TaskInput,
        mode: RolloutMode | None = None,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: Dict[str, Any] | None = None,
    ) -> Rollout:
        """Create a ``queuing`` rollout at the tail of the queue."""
        resources_id = await self._resolve_resources_id(resources_id)
        rollout = self._build_rollout(input, mode, resources_id, config, metadata, "queuing", time.time())
        return (await self._enqueue_many_rollouts([rollout]))[0]

    @tracked("enqueue_many_rollouts")
    @healthcheck_before
    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> Sequence[Rollout]:
        """Enqueue several rollouts in one unit, in input order."""
        if not rollouts:
            return []
        requests = [
            r if isinstance(r, EnqueueRolloutRequest) else EnqueueRolloutRequest.model_validate(r) for r in rollouts
        ]
        latest = await self._get_latest_resources()
        latest_id = latest.resources_id if latest is not None else None
        now = time.time()
        built = [
            self._build_rollout(
                request.input,
                request.mode,
                request.resources_id if request.resources_id is not None else latest_id,
                request.config,
                request.metadata,
                "queuing",
                now,
            )
            for request in requests
        ]
        return await self._enqueue_many_rollouts(built)

    @tracked("_enqueue_many_rollouts")
    async def _enqueue_many_rollouts(self, rollouts: List[Rollout]) -> List[Rollout]:
        async def persist(c: Any) -> None:
            await c.rollouts.insert(rollouts)
            await c.rollout_queue.enqueue([r.rollout_id for r in rollouts])

        await self._commit(persist, "rollouts", "rollout_queue")
        await self._post_update_rollout([(r, _ALL_ROLLOUT_FIELDS) for r in rollouts], skip_enqueue=True)
        return rollouts

    @tracked("dequeue_rollout")
    @healthcheck_before
    async def dequeue_rollout(self, worker_id: str | None = None) -> AttemptedRollout | None:
        """Claim the next queued rollout, or ``None`` (never blocks)."""
        claimed = await self._dequeue(1, worker_id)
        return claimed[0] if claimed else None

    @tracked("dequeue_many_rollouts")
    @healthcheck_before
    async def dequeue_many_rollouts(
        self, *, limit: int = 1, worker_id: str | None = None
    ) -> Sequence[AttemptedRollout]:
        """Claim up to ``limit`` rollouts in FIFO order."""
        return await self._dequeue(limit, worker_id)

    async def _dequeue(self, limit: int, worker_id: Optional[str]) -> List[AttemptedRollout]:
        """Pop-and-claim units until ``limit`` rollouts are claimed or the queue is empty.

        The worker is synced inside the unit that claims (with its last claimed attempt), or marked idle inside
        the unit that finds the queue empty when nothing was claimed at all.
        """
        if limit <= 0:
            if worker_id is not None:
                await self._dequeue_mark_worker_idle(worker_id)
            return []
        claimed: List[AttemptedRollout] = []
        while len(claimed) < limit:
            want = limit - len(claimed)
            nothing_yet = not claimed
            generation = self._queue_generation

            async def pop_and_claim(
                c: Any, want: int = want, nothing_yet: bool = nothing_yet
            ) -> Tuple[bool, List[AttemptedRollout]]:
                popped = await c.dequeue_rollouts(want)
                if not popped:
                    if worker_id is not None and nothing_yet:
                        await self._unlocked_dequeue_mark_worker_idle(c, worker_id)
                    return False, []
                batch = await self._post_dequeue_rollouts(c, popped, worker_id)
                if batch:
                    await self._unlocked_sync_workers_with_attempts(c, [batch[-1].attempt], dequeue=True)
                return True, batch

            popped, batch = await self._commit(pop_and_claim, "rollout_queue", "rollouts", "attempts", "workers")
            if not popped:
                self._note_queue_empty(generation)
                break
            if batch:
                await self._post_update_rollout([(r, ("status",)) for r in batch])
                claimed.extend(batch)
        return claimed

    @tracked("_post_dequeue_rollouts")
    async def _post_dequeue_rollouts(
        self, c: Any, popped: Sequence[PoppedRollout], worker_id: Optional[str]
    ) -> List[AttemptedRollout]:
        """Inside a unit: create attempts for the popped rollouts that are still queuing."""
        now = time.time()
        attempts: List[Attempt] = []
        updated: List[Rollout] = []
        for rollout_id, rollout, count in popped:
            if rollout is None or rollout.status not in ROLLOUT_QUEUING_STATUSES:
                logger.warning(
                    "Dropping dequeued rollout %s: %s",
                    rollout_id,
                    "it no longer exists" if rollout is None else f"its status is {rollout.status}",
                )
                continue
            attempts.append(
                Attempt(
                    rollout_id=rollout_id,
                    attempt_id=_new_attempt_id(),
                    sequence_id=count + 1,
                    start_time=now,
                    status="preparing",
                    worker_id=worker_id,
                )
            )
            updated.append(rollout.model_copy(update={"status": "preparing"}))
        if attempts:
            await c.attempts.insert(attempts)
            await c.rollouts.update(updated, update_fields=["status"])
        return [_attach(r, a) for r, a in zip(updated, attempts, strict=False)]

    @tracked("dequeue_rollout_or_wait")
    async def dequeue_rollout_or_wait(
        self,
        worker_id: str | None = None,
        *,
        timeout: float,
        abandoned: Optional[Callable[[], bool]] = None,
    ) -> AttemptedRollout | None:
        """Claim the next queued rollout, waiting up to ``timeout`` seconds for one when the queue is empty.

        Event-driven: a rollout queued (or re-queued) in this process wakes one waiting caller, the one waiting
        longest; stores shared by several processes also look at the queue every :meth:`_queue_poll_interval`
        seconds. Each claim attempt is a :meth:`dequeue_rollout`, so an empty one marks the worker idle as usual.
        """
        return await self._wait_and_claim(lambda: self.dequeue_rollout(worker_id=worker_id), timeout, abandoned)

    async def _wait_and_claim(
        self,
        attempt: Callable[[], Awaitable[Optional[AttemptedRollout]]],
        timeout: float,
        abandoned: Optional[Callable[[], bool]],
        *,
        poll_abandoned: bool = True,
    ) -> Optional[AttemptedRollout]:
        """The loop behind :meth:`dequeue_rollout_or_wait`, with the claim attempt as a parameter (the threaded
        wrapper passes an attempt made under its lock); ``poll_abandoned=False`` asks ``abandoned`` only before
        claims (see :func:`~rollouthub.store.base.dequeue_or_wait_with`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        waiter = self._queue_waiters.register()  # before the first attempt: an enqueue right after it wakes us
        claimed: Optional[AttemptedRollout] = None
        claimed_after_wake = False
        attempted = False
        try:
            if abandoned is not None and abandoned():
                return None
            # When the queue is known to be empty (seen empty, nothing queued since), the first claim attempt -- a
            # write unit that only marks the worker idle -- is put off until the wait ends empty-handed: a claim
            # during the wait stamps the worker anyway.
            if not self._queue_known_empty():
                claimed = await attempt()
                attempted = True
            while claimed is None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                slice_seconds = remaining
                poll = self._queue_poll_interval()
                if poll is not None:
                    slice_seconds = min(slice_seconds, poll)
                if abandoned is not None and poll_abandoned:
                    slice_seconds = min(slice_seconds, ABANDON_CHECK_SECONDS)
                woken = await waiter.wait(slice_seconds)
                if abandoned is not None and abandoned():
                    break
                waiter.take_stale()
                if not self._queue_waiters.is_notified(waiter):
                    # A poll slice, or a wake-up whose notification was already used: claim only if something is
                    # queued (cheap read). A plain abandon-check slice needs no look at all.
                    if (not woken and poll is None) or not await self._queue_has_items():
                        continue
                claimed = await attempt()
                attempted = claimed_after_wake = True
                if claimed is None:
                    self._queue_waiters.rearm(waiter)
            if claimed is None and not attempted and not (abandoned is not None and abandoned()):
                # The put-off attempt: the empty dequeue's bookkeeping (worker idle, ``last_dequeue_time``), or a
                # rollout queued meanwhile by another process.
                claimed = await attempt()
                claimed_after_wake = claimed is not None
            return claimed
        finally:
            # A wake-up this caller did not use (it timed out, gave up, or claimed before it looked) goes to the next.
            self._queue_waiters.unregister(waiter, pass_on=not (claimed is not None and claimed_after_wake))

    def _queue_poll_interval(self) -> Optional[float]:
        """How often waiting dequeues look at the queue themselves (``None``: only rollouts queued in this process
        wake them; stores shared by several processes return a period)."""
        return None

    async def _queue_has_items(self) -> bool:
        """Whether the rollout queue holds anything (a read unit; used by the waiting dequeue's polls).

        An empty answer is shared by every waiter of this store (they would all read the same thing) until a rollout
        is queued in this process -- and for at most half a poll period when other processes may queue rollouts too
        (:meth:`_queue_known_empty`)."""
        if self._queue_known_empty():
            return False
        generation = self._queue_generation
        async with self._read("rollout_queue") as c:
            has_items = bool(await c.rollout_queue.peek(1))
        if not has_items:
            self._note_queue_empty(generation)
        return has_items

    def _note_queue_empty(self, generation: int) -> None:
        """A look at the queue that began in ``generation`` found it empty."""
        self._queue_empty_generation = generation
        self._queue_seen_empty_at = time.monotonic()

    def _queue_known_empty(self) -> bool:
        """Whether the queue was seen empty and nothing was queued in this process since -- for at most half a poll
        period when other processes may queue rollouts too (:meth:`_queue_poll_interval`)."""
        if self._queue_empty_generation != self._queue_generation:
            return False
        poll = self._queue_poll_interval()
        return poll is None or time.monotonic() - self._queue_seen_empty_at < poll / 2

    @tracked("start_attempt")
    @healthcheck_before
    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> AttemptedRollout:
        """Create a new attempt outside the queue (ignores ``max_attempts``)."""

        async def create(c: Any) -> AttemptedRollout:
            rollout = await c.rollouts.get(filter={"rollout_id": {"exact": rollout_id}})
            if rollout is None:
                raise ValueError(f"Rollout {rollout_id} not found")
            count = (await c.attempts.query(filter=_by_rollout(rollout_id), limit=0)).total
            attempt = Attempt(
                rollout_id=rollout_id,
                attempt_id=_new_attempt_id(),
                sequence_id=count + 1,
                start_time=time.time(),
                status="preparing",
                worker_id=worker_id,
            )
            await c.attempts.insert([attempt])
            updated = rollout.model_copy(update={"status": "preparing"})
            await c.rollouts.update([updated], update_fields=["status"])
            await self._unlocked_sync_workers_with_attempts(c, [attempt])
            return _attach(updated, attempt)

        result: AttemptedRollout = await self._commit(create, "rollouts", "attempts", "workers")
        await self._post_update_rollout([(result, ("status",))])
        return result

    # ----------------------------------------------------------------------------------------------------------
    # Rollout and attempt queries
    # ----------------------------------------------------------------------------------------------------------

    @tracked("_unlocked_query_rollouts_by_rollout_ids")
    async def _unlocked_query_rollouts_by_rollout_ids(self, c: Any, rollout_ids: Sequence[str]) -> Dict[str, Rollout]:
        """Inside a unit: rollouts by id (one exact-key lookup each for small lists)."""
        unique = list(dict.fromkeys(rollout_ids))
        if len(unique) <= 8:
            found: Dict[str, Rollout] = {}
            for rollout_id in unique:
                rollout = await c.rollouts.get(filter={"rollout_id": {"exact": rollout_id}})
                if rollout is not None:
                    found[rollout_id] = rollout
            return found
        result = await c.rollouts.query(filter={"rollout_id": {"within": unique}})
        return {r.rollout_id: r for r in result.items}

    @tracked("_unlocked_get_latest_attempt")
    async def _unlocked_get_latest_attempt(self, c: Any, rollout_id: str) -> Optional[Attempt]:
        """Inside a unit: the attempt with the highest sequence id."""
        return await c.attempts.get(filter=_by_rollout(rollout_id), sort=_LATEST_FIRST)

    @tracked("_unlocked_many_rollouts_to_attempted_rollouts")
    async def _unlocked_many_rollouts_to_attempted_rollouts(
        self, c: Any, rollouts: Sequence[Rollout]
    ) -> List[Union[Rollout, AttemptedRollout]]:
        """Inside a unit: attach each rollout's latest attempt (backends may override with one query)."""
        out: List[Union[Rollout, AttemptedRollout]] = []
        for rollout in rollouts:
            latest = await self._unlocked_get_latest_attempt(c, rollout.rollout_id)
            out.append(_attach(rollout, latest) if latest is not None else rollout)
        return out

    @tracked("query_rollouts")
    @healthcheck_before
    async def query_rollouts(
        self,
        *,
        status_in: Sequence[RolloutStatus] | None = None,
        rollout_id_in: Sequence[str] | None = None,
        rollout_id_contains: str | None = None,
        filter_logic: Literal["and", "or"] = "and",
        sort_by: str | None = None,
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
        status: Sequence[RolloutStatus] | None = None,
        rollout_ids: Sequence[str] | None = None,
    ) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
        """Query rollouts with filters, sorting and pagination."""
        if status is not None and status_in is None:
            warnings.warn("status is deprecated, use status_in instead", DeprecationWarning, stacklevel=3)
            status_in = status
        if rollout_ids is not None and rollout_id_in is None:
            warnings.warn("rollout_ids is deprecated, use rollout_id_in instead", DeprecationWarning, stacklevel=3)
            rollout_id_in = rollout_ids
        filters: FilterOptions = {}
        if status_in is not None:
            filters["status"] = {"within": list(status_in)}
        id_ops: Dict[str, Any] = {}
        if rollout_id_in is not None:
            id_ops["within"] = list(rollout_id_in)
        if rollout_id_contains is not None:
            id_ops["contains"] = rollout_id_contains
        if id_ops:
            filters["rollout_id"] = id_ops
        if filters:
            filters["_aggregate"] = filter_logic
        sort: Optional[SortOptions] = {"name": sort_by, "order": sort_order} if sort_by else None
        async with self._read("rollouts", "attempts") as c:
            page = await c.rollouts.query(filter=filters or None, sort=sort, limit=limit, offset=offset)
            items = await self._unlocked_many_rollouts_to_attempted_rollouts(c, page.items)
        return PaginatedResult(items=items, limit=page.limit, offset=page.offset, total=page.total)

    @tracked("get_rollout_by_id")
    @healthcheck_before
    async def get_rollout_by_id(self, rollout_id: str) -> Union[Rollout, AttemptedRollout, None]:
        """The rollout with its latest attempt attached, or ``None``."""
        async with self._read("rollouts", "attempts") as c:
            rollout = await c.rollouts.get(filter={"rollout_id": {"exact": rollout_id}})
            if rollout is None:
                return None
            return (await self._unlocked_many_rollouts_to_attempted_rollouts(c, [rollout]))[0]

    @tracked("query_attempts")
    @healthcheck_before
    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: str | None = "sequence_id",
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Attempt]:
        """Attempts of a rollout (empty when unknown)."""
        sort: Optional[SortOptions] = {"name": sort_by, "order": sort_order} if sort_by else None
        async with self._read("attempts") as c:
            return await c.attempts.query(filter=_by_rollout(rollout_id), sort=sort, limit=limit, offset=offset)

    @tracked("get_latest_attempt")
    @healthcheck_before
    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        """The newest attempt of a rollout, or ``None``."""
        async with self._read("attempts") as c:
            return await self._unlocked_get_latest_attempt(c, rollout_id)

    # ----------------------------------------------------------------------------------------------------------
    # Resources
    # ----------------------------------------------------------------------------------------------------------

    @tracked("_get_latest_resources")
    async def _get_latest_resources(self) -> Optional[ResourcesUpdate]:
        """Generic rule: the snapshot with the greatest ``update_time``."""
        async with self._read("resources") as c:
            return await c.resources.get(sort={"name": "update_time", "order": "desc"})

    @tracked("query_resources")
    async def query_resources(
        self,
        *,
        resources_id: str | None = None,
        resources_id_contains: str | None = None,
        sort_by: str | None = None,
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[ResourcesUpdate]:
        """Query resource snapshots (filters are ANDed)."""
        ops: Dict[str, Any] = {}
        if resources_id is not None:
            ops["exact"] = resources_id
        if resources_id_contains is not None:
            ops["contains"] = resources_id_contains
        filters: Optional[FilterOptions] = {"resources_id": ops} if ops else None
        sort: Optional[SortOptions] = {"name": sort_by, "order": sort_order} if sort_by else None
        async with self._read("resources") as c:
            return await c.resources.query(filter=filters, sort=sort, limit=limit, offset=offset)

    @tracked("add_resources")
    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        """Store a new snapshot with a fresh ``rs-`` id."""
        now = time.time()
        update = ResourcesUpdate(
            resources_id=_new_resources_id(), create_time=now, update_time=now, version=1, resources=resources
        )
        async with self.collections.atomic(mode="w", labels=["resources"]) as c:
            await c.resources.insert([update])
        return update

    @tracked("update_resources")
    @healthcheck_before
    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        """Upsert a snapshot by id."""

        async def upsert(c: Any) -> ResourcesUpdate:
            now = time.time()
            existing = await c.resources.get(filter={"resources_id": {"exact": resources_id}})
            if existing is None:
                update = ResourcesUpdate(
                    resources_id=resources_id, create_time=now, update_time=now, version=1, resources=resources
                )
                await c.resources.insert([update])
                return update
            update = ResourcesUpdate(
                resources_id=resources_id,
                create_time=existing.create_time,
                update_time=now,
                version=existing.version + 1,
                resources=resources,
            )
            await c.resources.update([update])
            return update

        return cast(ResourcesUpdate, await self._commit(upsert, "resources"))

    @tracked("get_resources_by_id")
    async def get_resources_by_id(self, resources_id: str) -> ResourcesUpdate | None:
        """One snapshot, or ``None``."""
        async with self._read("resources") as c:
            return await c.resources.get(filter={"resources_id": {"exact": resources_id}})

    @tracked("get_latest_resources")
    async def get_latest_resources(self) -> ResourcesUpdate | None:
        """The latest snapshot, or ``None``."""
        return await self._get_latest_resources()

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

    async def _unlocked_issue_sequence_ids(self, c: Any, counts: Dict[str, int]) -> Dict[str, int]:
        """Inside a unit: bump each rollout's counter by its count; returns the first new id per rollout."""
        first: Dict[str, int] = {}
        for rollout_id, count in counts.items():
            end = int(await c.span_sequence_ids.inc(rollout_id, count))
            first[rollout_id] = end - count + 1
        return first

    @tracked("_sync_span_sequence_id")
    async def _unlocked_sync_span_sequence_id(self, c: Any, rollout_id: str, sequence_id: int) -> None:
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

    @tracked("add_otel_span")
    async def add_otel_span(
        self,
        rollout_id: str,
        attempt_id: str,
        readable_span: Any,
        sequence_id: int | None = None,
    ) -> Span | None:
        """Convert an OpenTelemetry SDK span and insert it (allocating a sequence id when none is given)."""
        if sequence_id is None:
            sequence_id = (await self._issue_many_span_sequence_ids([(rollout_id, attempt_id)]))[0]
        span = Span.from_opentelemetry(
            readable_span, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id
        )
        inserted = await self._add_many_spans_helper(rollout_id, attempt_id, [span])
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

        async def assign_ids(c: Any) -> None:
            next_id = (await self._unlocked_issue_sequence_ids(c, {rollout_id: n_assign}))[rollout_id]
            for span, flag in zip(spans, assign or (), strict=True):
                if flag:
                    span.sequence_id = next_id
                    next_id += 1

        async def insert_and_beat(c: Any) -> Optional[Rollout]:
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
        self, c: Any, rollout_id: str, attempt_id: str
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

        async def beat(c: Any) -> Optional[Rollout]:
            return await self._unlocked_on_attempt_heartbeat(c, rollout_id, attempt_id)

        return cast(Optional[Rollout], await self._commit(beat, "rollouts", "attempts"))

    async def _unlocked_on_attempt_heartbeat(
        self,
        c: Any,
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
        await c.attempts.update([updated], update_fields=["last_heartbeat_time", "status"])
        if not heartbeat_promotes_rollout(rollout.status):
            return None
        if latest is None:
            latest = await self._unlocked_get_latest_attempt(c, rollout_id)
        if latest is None or latest.attempt_id != attempt_id:
            return None
        promoted = rollout.model_copy(update={"status": "running"})
        await c.rollouts.update([promoted], update_fields=["status"])
        return promoted

    @tracked("query_spans")
    @healthcheck_before
    async def query_spans(
        self,
        rollout_id: str,
        attempt_id: str | Literal["latest"] | None = None,
        *,
        trace_id: str | None = None,
        trace_id_contains: str | None = None,
        span_id: str | None = None,
        span_id_contains: str | None = None,
        parent_id: str | None = None,
        parent_id_contains: str | None = None,
        name: str | None = None,
        name_contains: str | None = None,
        filter_logic: Literal["and", "or"] = "and",
        limit: int = -1,
        offset: int = 0,
        sort_by: str | None = "sequence_id",
        sort_order: Literal["asc", "desc"] = "asc",
    ) -> PaginatedResult[Span]:
        """Spans of a rollout; the scope (rollout, attempt) is always ANDed, optional filters pooled."""
        query = _SpanQuery.build(
            trace_id=trace_id,
            trace_id_contains=trace_id_contains,
            span_id=span_id,
            span_id_contains=span_id_contains,
            parent_id=parent_id,
            parent_id_contains=parent_id_contains,
            name=name,
            name_contains=name_contains,
            filter_logic=filter_logic,
            limit=limit,
            offset=offset,
            sort_by=sort_by,
            sort_order=sort_order,
        )
        filters = await self._span_scope(rollout_id, attempt_id, query)
        if filters is None:
            return PaginatedResult(items=[], limit=limit, offset=offset, total=0)
        return await self._query_spans_unit(rollout_id, filters, query.sort, limit, offset)

    @tracked("query_spans_json")
    @healthcheck_before
    async def query_spans_json(
        self, rollout_id: str, attempt_id: str | Literal["latest"] | None = None, **filters: Any
    ) -> bytes:
        """:meth:`query_spans` (same keyword arguments) as the JSON bytes of its page (the backend may build them
        without span models)."""
        query = _SpanQuery.build(**filters)
        scope = await self._span_scope(rollout_id, attempt_id, query)
        if scope is None:
            return paginated_json_from_items([], query.limit, query.offset, 0)
        return await self._query_spans_json_unit(rollout_id, scope, query.sort, query.limit, query.offset)

    async def _span_scope(
        self, rollout_id: str, attempt_id: Optional[str], query: _SpanQuery
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
        filters: FilterOptions = {"_must": must, **query.conditions}
        if query.conditions:
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

    # ----------------------------------------------------------------------------------------------------------
    # Updates and status propagation
    # ----------------------------------------------------------------------------------------------------------

    @tracked("update_rollout")
    @healthcheck_before
    async def update_rollout(
        self,
        rollout_id: str,
        input: TaskInput | Unset = UNSET,
        mode: RolloutMode | None | Unset = UNSET,
        resources_id: str | None | Unset = UNSET,
        status: RolloutStatus | Unset = UNSET,
        config: RolloutConfig | Unset = UNSET,
        metadata: Dict[str, Any] | None | Unset = UNSET,
    ) -> Rollout:
        """Replace the provided fields (no transition guard); terminal statuses stamp ``end_time``."""
        updates = provided_fields(
            input=input, mode=mode, resources_id=resources_id, status=status, config=config, metadata=metadata
        )

        async def apply(c: Any) -> Rollout:
            existing = await c.rollouts.get(filter={"rollout_id": {"exact": rollout_id}})
            if existing is None:
                raise ValueError(f"Item does not exist with primary key(s): rollout_id='{rollout_id}'")
            return await self._unlocked_update_rollout_only(c, existing, dict(updates))

        updated: Rollout = await self._commit(apply, "rollouts", "rollout_queue")
        await self._post_update_rollout([(updated, tuple(updates) + (("end_time",) if "status" in updates else ()))])
        return updated

    @tracked("_unlocked_update_rollout_only")
    async def _unlocked_update_rollout_only(self, c: Any, rollout: Rollout, updates: Dict[str, Any]) -> Rollout:
        """Inside a unit: validate and write rollout fields; re-enqueue on a change into a queuing status."""
        if "status" in updates and rollout_status_sets_end_time(updates["status"]):
            updates["end_time"] = time.time()
        if not updates:
            return rollout
        new_rollout = Rollout.model_validate({**rollout.__dict__, **updates})
        await c.rollouts.update([new_rollout], update_fields=list(updates))
        if "status" in updates and new_rollout.status in ROLLOUT_QUEUING_STATUSES:
            if not await c.rollout_queue.has(new_rollout.rollout_id):
                await c.rollout_queue.enqueue([new_rollout.rollout_id])
        return new_rollout

    @tracked("update_attempt")
    @healthcheck_before
    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str | Literal["latest"],
        status: AttemptStatus | Unset = UNSET,
        worker_id: str | Unset = UNSET,
        last_heartbeat_time: float | Unset = UNSET,
        metadata: Dict[str, Any] | None | Unset = UNSET,
    ) -> Attempt:
        """Update an attempt; the latest attempt's status propagates to the rollout (with retries)."""
        updates = provided_fields(
            status=status, worker_id=worker_id, last_heartbeat_time=last_heartbeat_time, metadata=metadata
        )

        sync_worker = bool(isinstance(worker_id, str) and worker_id) or not isinstance(status, Unset)

        async def apply(c: Any) -> Tuple[Attempt, Optional[Rollout]]:
            attempt, changed = await self._unlocked_update_attempt_and_rollout(c, rollout_id, attempt_id, updates)
            if sync_worker:
                await self._unlocked_sync_workers_with_attempts(c, [attempt])
            return attempt, changed

        attempt, changed = await self._commit(apply, "rollouts", "attempts", "rollout_queue", "workers")
        if changed is not None:
            await self._post_update_rollout([(changed, ("status", "end_time"))])
        return attempt

    @tracked("_unlocked_update_attempt_and_rollout")
    async def _unlocked_update_attempt_and_rollout(
        self, c: Any, rollout_id: str, attempt_id: str, updates: Dict[str, Any]
    ) -> Tuple[Attempt, Optional[Rollout]]:
        """Inside a unit: update one attempt; when it is the latest, propagate its status to the rollout."""
        rollout, latest, target = await c.get_rollout_and_attempts(
            rollout_id, None if attempt_id == "latest" else attempt_id
        )
        if rollout is None:
            raise ValueError(f"Rollout {rollout_id} not found")
        if latest is None:
            raise ValueError(f"No attempts found for rollout {rollout_id}")
        if attempt_id == "latest":
            target = latest
        elif target is None:
            raise ValueError(f"Attempt {attempt_id} not found for rollout {rollout_id}")
        updates = dict(updates)
        if "status" in updates and attempt_status_sets_end_time(updates["status"]):
            updates["end_time"] = time.time()
        attempt = target
        if updates:
            attempt = Attempt.model_validate({**target.__dict__, **updates})
            await c.attempts.update([attempt], update_fields=list(updates))
        if attempt.attempt_id != latest.attempt_id:
            return attempt, None
        new_status = derive_rollout_status(attempt.status, attempt.sequence_id, rollout.config)
        if new_status == rollout.status:
            return attempt, None
        return attempt, await self._unlocked_update_rollout_only(c, rollout, {"status": new_status})

    # ----------------------------------------------------------------------------------------------------------
    # Post-update hook, waiting
    # ----------------------------------------------------------------------------------------------------------

    @tracked("_post_update_rollout")
    async def _post_update_rollout(
        self, rollouts: Sequence[Tuple[Rollout, Sequence[str]]], skip_enqueue: bool = False
    ) -> None:
        """After a unit wrote rollout fields: metrics, waking waiters, backend hooks.

        (Re-enqueueing happens inside the writing unit -- see :meth:`_unlocked_update_rollout_only`.)
        """
        finished: Dict[str, Rollout] = {}
        queued = 0
        for rollout, fields in rollouts:
            if "status" in fields:
                if is_finished(rollout):
                    finished[rollout.rollout_id] = rollout
                elif rollout.status in ROLLOUT_QUEUING_STATUSES:
                    queued += 1
            if self._tracker is not None and "end_time" in fields and is_finished(rollout):
                labels = {"status": rollout.status, "mode": rollout.mode or "unknown"}
                await self._tracker.inc_counter("agl.rollouts.total", labels=labels)
                if rollout.end_time is not None:
                    await self._tracker.observe_histogram(
                        "agl.rollouts.duration", rollout.end_time - rollout.start_time, labels=labels
                    )
        await self._on_rollouts_updated(rollouts)
        if queued:
            self._queue_generation += 1
            self._queue_seen_empty_at = -math.inf
            self._queue_waiters.notify(queued)
        if finished:
            self._waiters.wake(finished)
            await self._on_rollouts_finished(list(finished))

    async def _on_rollouts_updated(self, rollouts: Sequence[Tuple[Rollout, Sequence[str]]]) -> None:
        """Backend hook: called after every unit that wrote rollouts (default: nothing)."""

    async def _on_rollouts_finished(self, rollout_ids: Sequence[str]) -> None:
        """Backend hook: rollouts reached a terminal status (e.g. notify other processes). Default: nothing."""

    def _wake_waiters(self) -> None:
        """Wake every ``wait_for_rollouts`` caller so it re-reads the store (for cross-process notifiers)."""
        self._waiters.wake_all()

    def _cross_process_poll_interval(self) -> Optional[float]:
        """How often waiters re-read when other processes may finish rollouts (``None``: in-process only)."""
        return None

    @tracked("wait_for_rollouts")
    @healthcheck_before
    async def wait_for_rollouts(self, *, rollout_ids: List[str], timeout: float | None = None) -> List[Rollout]:
        """Return the requested rollouts that are finished by the deadline, in input order (event-driven)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        remaining = set(rollout_ids)
        finished: Dict[str, Rollout] = {}
        waiter = self._waiters.register(remaining)
        read_store = True  # first pass, after a wake-up without a payload, after a slice without any wake-up
        try:
            while True:
                for rollout_id, rollout in waiter.take_delivered().items():
                    if rollout_id in remaining:
                        finished[rollout_id] = rollout
                        remaining.discard(rollout_id)
                if not remaining:
                    break
                if read_store or waiter.take_stale():
                    # A wake-up that only delivered rollouts finished in this process needs no re-read.
                    async with self._read("rollouts") as c:
                        current = await self._unlocked_query_rollouts_by_rollout_ids(c, list(remaining))
                    for rollout_id in list(remaining):
                        rollout = current.get(rollout_id)
                        if rollout is None:
                            remaining.discard(rollout_id)
                        elif is_finished(rollout):
                            finished[rollout_id] = rollout
                            remaining.discard(rollout_id)
                    if not remaining:
                        break
                if deadline is None:
                    slice_seconds: Optional[float] = _WAIT_SLICE_SECONDS
                else:
                    slice_seconds = deadline - loop.time()
                    if slice_seconds <= 0:
                        break
                poll = self._cross_process_poll_interval()
                if poll is not None:
                    slice_seconds = poll if slice_seconds is None else min(slice_seconds, poll)
                woken = await waiter.wait(slice_seconds)
                read_store = not woken
                if not woken and deadline is None:
                    await self._scan_for_unhealthy_rollouts()
        finally:
            self._waiters.unregister(waiter)
        return [finished[r] for r in rollout_ids if r in finished]

    @tracked("wait_for_rollout")
    async def wait_for_rollout(self, rollout_id: str, timeout: float | None = None) -> Rollout | None:
        """Wait for one rollout; returns it when finished by the deadline, else ``None``."""
        result = await self.wait_for_rollouts(rollout_ids=[rollout_id], timeout=timeout)
        return result[0] if result else None

    # ----------------------------------------------------------------------------------------------------------
    # Workers
    # ----------------------------------------------------------------------------------------------------------

    @tracked("query_workers")
    @healthcheck_before
    async def query_workers(
        self,
        *,
        status_in: Sequence[WorkerStatus] | None = None,
        worker_id_contains: str | None = None,
        filter_logic: Literal["and", "or"] = "and",
        sort_by: str | None = None,
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Worker]:
        """Query workers."""
        filters: FilterOptions = {}
        if status_in is not None:
            filters["status"] = {"within": list(status_in)}
        if worker_id_contains is not None:
            filters["worker_id"] = {"contains": worker_id_contains}
        if filters:
            filters["_aggregate"] = filter_logic
        sort: Optional[SortOptions] = {"name": sort_by, "order": sort_order} if sort_by else None
        async with self._read("workers") as c:
            return await c.workers.query(filter=filters or None, sort=sort, limit=limit, offset=offset)

    @tracked("get_worker_by_id")
    async def get_worker_by_id(self, worker_id: str) -> Worker | None:
        """One worker, or ``None``."""
        async with self._read("workers") as c:
            return await c.workers.get(filter={"worker_id": {"exact": worker_id}})

    @tracked("update_worker")
    async def update_worker(self, worker_id: str, heartbeat_stats: Dict[str, Any] | Unset = UNSET) -> Worker:
        """Heartbeat: upsert the worker with ``last_heartbeat_time`` (and stats when given)."""
        fields: Dict[str, Any] = {"last_heartbeat_time": time.time()}
        if not isinstance(heartbeat_stats, Unset):
            fields["heartbeat_stats"] = dict(heartbeat_stats)  # type: ignore[arg-type]
        return await self._update_or_insert_worker(worker_id, fields)

    @tracked("_update_or_insert_worker")
    async def _update_or_insert_worker(self, worker_id: str, fields: Dict[str, Any]) -> Worker:
        async with self.collections.atomic(mode="rw", labels=["workers"]) as c:
            stored = await c.workers.upsert([Worker(worker_id=worker_id, **fields)], update_fields=list(fields))
        return cast(Worker, stored[0])

    @tracked("_unlocked_sync_worker_with_attempt")
    async def _unlocked_sync_workers_with_attempts(
        self, c: Any, attempts: Sequence[Attempt], dequeue: bool = False
    ) -> None:
        """Inside a unit: derive each attempt's worker status (busy/idle/unknown) and write only those fields."""
        now = time.time()
        for attempt in attempts:
            if not attempt.worker_id:
                continue
            values = worker_fields_for_attempt(attempt, now, dequeue)
            await c.workers.upsert([Worker(worker_id=attempt.worker_id, **values)], update_fields=list(values))

    @tracked("_sync_workers_with_attempts")
    async def _sync_workers_with_attempts(self, attempts: Sequence[Attempt], dequeue: bool = False) -> None:
        """Sync the workers of these attempts in a unit of their own (used by the watchdog)."""
        if not any(attempt.worker_id for attempt in attempts):
            return
        async with self.collections.atomic(mode="w", labels=["workers"]) as c:
            await self._unlocked_sync_workers_with_attempts(c, attempts, dequeue)

    async def _unlocked_dequeue_mark_worker_idle(self, c: Any, worker_id: str) -> None:
        """Inside a unit: the empty-dequeue rule of the worker status machine."""
        existing = await c.workers.get(filter={"worker_id": {"exact": worker_id}})
        values = worker_fields_for_empty_dequeue(existing, time.time())
        await c.workers.upsert([Worker(worker_id=worker_id, **values)], update_fields=list(values))

    @tracked("_dequeue_mark_worker_idle")
    async def _dequeue_mark_worker_idle(self, worker_id: str) -> None:
        async with self.collections.atomic(mode="rw", labels=["workers"]) as c:
            await self._unlocked_dequeue_mark_worker_idle(c, worker_id)

    # ----------------------------------------------------------------------------------------------------------
    # Watchdog
    # ----------------------------------------------------------------------------------------------------------

    @tracked("_scan_for_unhealthy_rollouts")
    async def _scan_for_unhealthy_rollouts(self) -> None:
        """Detect timed-out / unresponsive attempts (re-entrancy guarded and debounced)."""
        if self._scan_in_progress:
            return
        if not await self._should_scan_for_unhealthy_rollouts():
            return
        self._scan_in_progress = True
        try:
            await self._find_and_update_unhealthy_rollouts()
        finally:
            self._scan_in_progress = False

    @tracked("_should_scan_for_unhealthy_rollouts")
    async def _should_scan_for_unhealthy_rollouts(self) -> bool:
        """Debounce: at most one scan per ``scan_debounce_seconds`` per store instance."""
        debounce = self._scan_debounce_seconds
        if debounce <= 0:
            return True
        if time.time() - self._last_scan_entrance_time < debounce:
            return False
        async with self.collections.atomic(mode="rw", labels=["generic"]):
            now = time.time()
            if now - self._last_scan_entrance_time < debounce:
                return False
            self._last_scan_entrance_time = now
            return True

    @tracked("_unlocked_get_running_rollouts")
    async def _unlocked_get_running_rollouts(self, c: Any) -> List[AttemptedRollout]:
        """Inside a unit: ``preparing``/``running`` rollouts with their latest attempts."""
        page = await c.rollouts.query(filter={"status": {"within": list(ROLLOUT_RUNNING_STATUSES)}})
        out: List[AttemptedRollout] = []
        for item in await self._unlocked_many_rollouts_to_attempted_rollouts(c, page.items):
            if isinstance(item, AttemptedRollout):
                out.append(item)
            else:
                logger.warning("Running rollout %s has no attempt; skipping health check", item.rollout_id)
        return out

    @tracked("_find_and_update_unhealthy_rollouts")
    async def _find_and_update_unhealthy_rollouts(self) -> None:
        async with self._read("rollouts", "attempts") as c:
            candidates = await scan_unhealthy_rollouts(await self._unlocked_get_running_rollouts(c))
        if not candidates:
            return

        async def apply(c: Any) -> Tuple[List[Rollout], List[Attempt]]:
            changed: List[Rollout] = []
            attempts: List[Attempt] = []
            rollouts = await self._unlocked_query_rollouts_by_rollout_ids(c, [rid for rid, _ in candidates])
            fresh = await self._unlocked_many_rollouts_to_attempted_rollouts(
                c, [r for r in rollouts.values() if r.status in ROLLOUT_RUNNING_STATUSES]
            )
            confirmed = await scan_unhealthy_rollouts([r for r in fresh if isinstance(r, AttemptedRollout)])
            for (rollout_id, attempt_id), new_status in confirmed.items():
                attempt, rollout = await self._unlocked_update_attempt_and_rollout(
                    c, rollout_id, attempt_id, {"status": new_status}
                )
                attempts.append(attempt)
                if rollout is not None:
                    changed.append(rollout)
            return changed, attempts

        changed, attempts = await self._commit(apply, "rollouts", "attempts", "rollout_queue")
        if changed:
            await self._post_update_rollout([(r, ("status", "end_time")) for r in changed])
        with_workers = [a for a in attempts if a.worker_id]
        if with_workers:
            await self._sync_workers_with_attempts(with_workers)


COLLECTION_STORE_ALL_METHODS: frozenset[str] = frozenset(
    name for name in dir(CollectionBasedLightningStore) if not name.startswith("__")
)
"""Every attribute name of the class (the ``store_privmeth`` label domain)."""
