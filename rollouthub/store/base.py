"""The ``LightningStore`` contract, the ``UNSET`` sentinel, capabilities and statistics."""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union, cast

from pydantic_core import to_json
from typing_extensions import TypedDict

from rollouthub.types import (
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    EnqueueRolloutRequest,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    Span,
    TaskInput,
    Worker,
    WorkerStatus,
)
from rollouthub.types.queries import AttemptQuery, ResourcesQuery, RolloutQuery, SpanQuery, WorkerQuery
from rollouthub.types.updates import AttemptUpdate, RolloutUpdate

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "ABANDON_CHECK_SECONDS",
    "LIGHTNING_STORE_METHODS",
    "UNSET",
    "provided_fields",
    "check_assign_flags",
    "paginated_json",
    "paginated_json_from_items",
    "sleep_unless_abandoned",
    "Unset",
    "LightningStore",
    "LightningStoreCapabilities",
    "LightningStoreStatistics",
    "SpansEvictedError",
    "is_queuing",
    "is_running",
    "is_finished",
]


LIGHTNING_STORE_METHODS: Tuple[str, ...] = (
    "statistics",
    "start_rollout",
    "enqueue_rollout",
    "enqueue_many_rollouts",
    "dequeue_rollout",
    "dequeue_many_rollouts",
    "dequeue_rollout_or_wait",
    "start_attempt",
    "query_rollouts",
    "query_attempts",
    "get_rollout_by_id",
    "get_latest_attempt",
    "query_resources",
    "add_resources",
    "update_resources",
    "get_resources_by_id",
    "get_latest_resources",
    "add_span",
    "add_many_spans",
    "add_otel_span",
    "get_next_span_sequence_id",
    "get_many_span_sequence_ids",
    "add_many_spans_assigning_ids",
    "wait_for_rollouts",
    "query_spans",
    "query_spans_json",
    "update_rollout",
    "update_attempt",
    "query_workers",
    "get_worker_by_id",
    "update_worker",
)
"""Names of the async methods of the store contract (the wrappers delegate exactly these)."""

_logger = logging.getLogger(__name__)

ABANDON_CHECK_SECONDS = 0.1
"""How often a waiting ``dequeue_rollout_or_wait`` asks its ``abandoned`` callback whether to give up."""


class SpansEvictedError(RuntimeError):
    """The spans of a rollout were evicted to keep the in-memory store within its memory bound.

    Raised by ``query_spans`` (and ``query_spans_json``) of an evicted rollout, forever; a ``RuntimeError`` with the
    reference message ``"Spans for rollout <id> have been evicted"``. The server answers it with **410 Gone**, and
    ``LightningStoreClient`` raises it again (as ``LightningStoreEvictedError``, also a ``SpansEvictedError``) without
    retrying.
    """

    def __init__(self, rollout_id: str) -> None:
        super().__init__(f"Spans for rollout {rollout_id} have been evicted")
        self.rollout_id = rollout_id


def check_assign_flags(spans: Sequence[Any], assign: Sequence[bool]) -> None:
    """``ValueError`` unless ``add_many_spans_assigning_ids`` got exactly one flag per span."""
    if len(assign) != len(spans):
        raise ValueError(f"assign has {len(assign)} flags for {len(spans)} spans")


async def sleep_unless_abandoned(seconds: float, abandoned: Optional[Callable[[], bool]]) -> bool:
    """Sleep ``seconds`` (in :data:`ABANDON_CHECK_SECONDS` slices when ``abandoned`` is given); True when
    ``abandoned()`` ended the sleep early."""
    if abandoned is None:
        if seconds > 0:
            await asyncio.sleep(seconds)
        return False
    deadline = time.monotonic() + seconds
    while not abandoned():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(ABANDON_CHECK_SECONDS, remaining))
    return True


def paginated_json(result: Any) -> bytes:
    """The JSON bytes of a query result as the REST API sends it: ``{"items": [...], "limit", "offset", "total"}``.

    A plain sequence (from a store that does not return a :class:`~rollouthub.types.PaginatedResult`) is wrapped as
    one complete page, with a warning.
    """
    if isinstance(result, PaginatedResult):
        payload = {"items": list(result.items), "limit": result.limit, "offset": result.offset, "total": result.total}
    else:
        _logger.warning("Store returned a %s instead of a PaginatedResult; wrapping it", type(result).__name__)
        items = list(result)
        payload = {"items": items, "limit": -1, "offset": 0, "total": len(items)}
    return to_json(payload)


def paginated_json_from_items(items: Sequence[str], limit: int, offset: int, total: int) -> bytes:
    """:func:`paginated_json` of a page whose items are already JSON texts."""
    return b'{"items":[%s],"limit":%d,"offset":%d,"total":%d}' % (",".join(items).encode(), limit, offset, total)


class _UnsetType:
    """Type of the :data:`UNSET` sentinel: "argument not provided" (distinct from ``None``)."""

    __slots__ = ()
    _instance: Optional[_UnsetType] = None

    def __new__(cls) -> _UnsetType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "UNSET"


UNSET = _UnsetType()
"""The single "not provided" sentinel."""

Unset = _UnsetType
"""Alias of the sentinel's class: use ``isinstance(x, Unset)``."""


def provided_fields(**fields: Any) -> Dict[str, Any]:
    """The keyword arguments that were provided, i.e. are not :data:`UNSET` (``None`` counts as provided)."""
    return {name: value for name, value in fields.items() if not isinstance(value, _UnsetType)}


class LightningStoreCapabilities(TypedDict, total=False):
    """What a store supports; a missing key means ``False``."""

    thread_safe: bool
    async_safe: bool
    zero_copy: bool
    otlp_traces: bool


class LightningStoreStatistics(TypedDict, total=False):
    """Sizes and health figures of a store."""

    name: str
    total_rollouts: int
    total_attempts: int
    total_spans: int
    total_resources: int
    total_workers: int
    uptime: float
    total_span_bytes: int
    eviction_threshold_bytes: int
    safe_threshold_bytes: int
    memory_capacity_bytes: int
    memory_limit_bytes: int  # rollouthub extension: the in-memory store's ``memory_limit``, when one is set


def is_queuing(rollout: Rollout) -> bool:
    """True when the rollout waits in the queue (``queuing`` or ``requeuing``)."""
    return rollout.status in ("queuing", "requeuing")


def is_running(rollout: Rollout) -> bool:
    """True when the rollout is claimed and being worked on (``preparing`` or ``running``)."""
    return rollout.status in ("preparing", "running")


def is_finished(rollout: Rollout) -> bool:
    """True when the rollout reached a terminal status (``failed``, ``succeeded``, ``cancelled``)."""
    return rollout.status in ("failed", "succeeded", "cancelled")


class LightningStore:
    """Abstract store: the rollout queue, attempts, spans, resources and workers. Every data method is async."""

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        """Capabilities of this store (all ``False`` for the abstract base)."""
        return LightningStoreCapabilities(thread_safe=False, async_safe=False, zero_copy=False, otlp_traces=False)

    async def statistics(self) -> LightningStoreStatistics:
        """Return store statistics (the base reports only the class name)."""
        return LightningStoreStatistics(name=type(self).__name__)

    def otlp_traces_endpoint(self) -> str:
        """URL of the store's OTLP/HTTP traces endpoint (ends in ``/v1/traces``)."""
        raise NotImplementedError()

    async def start_rollout(
        self,
        input: TaskInput,
        mode: RolloutMode | None = None,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: Dict[str, Any] | None = None,
        worker_id: str | None = None,
    ) -> AttemptedRollout:
        """Create a rollout with its first attempt, bypassing the queue: the arguments as one
        :class:`~rollouthub.types.EnqueueRolloutRequest` (taken as given, checked where the store checks them),
        answered by :meth:`_start_rollout`, which a store implements."""
        request = EnqueueRolloutRequest.model_construct(
            input=input, mode=mode, resources_id=resources_id, config=config, metadata=metadata
        )
        return await self._start_rollout(request, worker_id)

    async def _start_rollout(self, request: EnqueueRolloutRequest, worker_id: str | None) -> AttemptedRollout:
        """Answer :meth:`start_rollout` (its arguments as ``request``; ``worker_id`` for the first attempt)."""
        raise NotImplementedError()

    async def enqueue_rollout(
        self,
        input: TaskInput,
        mode: RolloutMode | None = None,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: Dict[str, Any] | None = None,
    ) -> Rollout:
        """Create a rollout and append it to the queue: the arguments as one
        :class:`~rollouthub.types.EnqueueRolloutRequest` (taken as given), answered by :meth:`_enqueue_rollout`."""
        request = EnqueueRolloutRequest.model_construct(
            input=input, mode=mode, resources_id=resources_id, config=config, metadata=metadata
        )
        return await self._enqueue_rollout(request)

    async def _enqueue_rollout(self, request: EnqueueRolloutRequest) -> Rollout:
        """Answer :meth:`enqueue_rollout` (its arguments as ``request``)."""
        raise NotImplementedError()

    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> Sequence[Rollout]:
        """Enqueue several rollouts in one unit, preserving order."""
        raise NotImplementedError()

    async def dequeue_rollout(self, worker_id: str | None = None) -> AttemptedRollout | None:
        """Claim the next queued rollout (never blocks); ``None`` when the queue is empty."""
        raise NotImplementedError()

    async def dequeue_many_rollouts(
        self, *, limit: int = 1, worker_id: str | None = None
    ) -> Sequence[AttemptedRollout]:
        """Claim up to ``limit`` queued rollouts in FIFO order."""
        raise NotImplementedError()

    async def dequeue_rollout_or_wait(
        self,
        worker_id: str | None = None,
        *,
        timeout: float,
        abandoned: Optional[Callable[[], bool]] = None,
    ) -> AttemptedRollout | None:
        """Claim the next queued rollout like :meth:`dequeue_rollout`; when the queue is empty, wait up to ``timeout``
        seconds for one to be queued and claim it then. Returns ``None`` when nothing was claimed by the deadline, or
        earlier once ``abandoned()`` returns True (it is asked every :data:`ABANDON_CHECK_SECONDS` while waiting and
        right before every claim that follows a wait).

        A rollouthub extension of the contract: runners long-poll with it (one call per ``poll_interval``) instead of
        sleeping between dequeues, so a queued rollout is picked up at once and an idle runner costs the store one
        call per interval. Every claim attempt is a :meth:`dequeue_rollout` (same worker bookkeeping).

        This default -- for stores that cannot be woken by an enqueue -- is the poll of the reference runner: one
        :meth:`dequeue_rollout`, then, when it found nothing, a sleep of ``timeout`` seconds (cut short by
        ``abandoned``). Collection-based stores and the HTTP client wait event-driven instead.
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
        """The one "dequeue or wait" loop of a store, with each claim attempt made by ``attempt`` (wrappers that
        serialize calls -- the server, the threaded store -- pass an attempt that takes their lock, so that only the
        attempts, not the wait, hold it). This default makes one attempt and, when it found nothing, sleeps
        ``timeout``; stores that can be woken by an enqueue (collection-based ones) override it.

        ``poll_abandoned=False``: ``abandoned`` is asked only before each claim that follows a wait, not every
        :data:`ABANDON_CHECK_SECONDS` (the server, for which a held request ending early saves nothing, uses it so
        that idle runners' requests cost no periodic wake-ups)."""
        if abandoned is not None and abandoned():
            return None
        claimed = await attempt()
        if claimed is None:
            await sleep_unless_abandoned(timeout, abandoned if poll_abandoned else None)
        return claimed

    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> AttemptedRollout:
        """Create a new attempt for a rollout outside the queue (ignores ``max_attempts``)."""
        raise NotImplementedError()

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
        """Query rollouts; those with attempts come back as ``AttemptedRollout`` with their latest attempt.

        ``status``/``rollout_ids`` are deprecated aliases of ``status_in``/``rollout_id_in``. Builds the
        :class:`~rollouthub.types.queries.RolloutQuery` of the arguments and answers it with :meth:`_query_rollouts`.
        """
        if status is not None and status_in is None:
            warnings.warn("status is deprecated, use status_in instead", DeprecationWarning, stacklevel=2)
            status_in = status
        if rollout_ids is not None and rollout_id_in is None:
            warnings.warn("rollout_ids is deprecated, use rollout_id_in instead", DeprecationWarning, stacklevel=2)
            rollout_id_in = rollout_ids
        query = RolloutQuery.of(
            status_in=status_in,
            rollout_id_in=rollout_id_in,
            rollout_id_contains=rollout_id_contains,
            filter_logic=filter_logic,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        )
        return await self._query_rollouts(query)

    async def _query_rollouts(self, query: RolloutQuery) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
        """Answer a rollout query (see :meth:`query_rollouts`)."""
        raise NotImplementedError()

    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: str | None = "sequence_id",
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Attempt]:
        """Attempts of a rollout (empty for an unknown rollout), answered by :meth:`_query_attempts`."""
        query = AttemptQuery.of(sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)
        return await self._query_attempts(rollout_id, query)

    async def _query_attempts(self, rollout_id: str, query: AttemptQuery) -> PaginatedResult[Attempt]:
        """Answer an attempt query (see :meth:`query_attempts`)."""
        raise NotImplementedError()

    async def get_rollout_by_id(self, rollout_id: str) -> Union[Rollout, AttemptedRollout, None]:
        """The rollout (with its latest attempt when it has one), or ``None``."""
        raise NotImplementedError()

    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        """The attempt with the highest ``sequence_id``, or ``None``."""
        raise NotImplementedError()

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
        """Query resource snapshots, answered by :meth:`_query_resources`."""
        query = ResourcesQuery.of(
            resources_id=resources_id,
            resources_id_contains=resources_id_contains,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        )
        return await self._query_resources(query)

    async def _query_resources(self, query: ResourcesQuery) -> PaginatedResult[ResourcesUpdate]:
        """Answer a resources query (see :meth:`query_resources`)."""
        raise NotImplementedError()

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        """Store a new resources snapshot with a fresh id; it becomes the latest."""
        raise NotImplementedError()

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        """Upsert a resources snapshot by id (version +1 when it exists); it becomes the latest."""
        raise NotImplementedError()

    async def get_resources_by_id(self, resources_id: str) -> ResourcesUpdate | None:
        """One snapshot by id, or ``None``."""
        raise NotImplementedError()

    async def get_latest_resources(self) -> ResourcesUpdate | None:
        """The most recently added or updated snapshot, or ``None``."""
        raise NotImplementedError()

    async def add_span(self, span: Span) -> Span | None:
        """Insert a span (``None`` for a duplicate); the first span of an attempt marks it running."""
        raise NotImplementedError()

    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        """Insert several spans; returns exactly the newly stored ones."""
        raise NotImplementedError()

    async def add_otel_span(
        self,
        rollout_id: str,
        attempt_id: str,
        readable_span: ReadableSpan,
        sequence_id: int | None = None,
    ) -> Span | None:
        """Convert an OpenTelemetry SDK span with ``Span.from_opentelemetry`` (allocating a sequence id with
        :meth:`get_next_span_sequence_id` when none is given) and store it with :meth:`add_span`; ``None`` when the
        store already had it."""
        if sequence_id is None:
            sequence_id = await self.get_next_span_sequence_id(rollout_id, attempt_id)
        span = Span.from_opentelemetry(
            readable_span, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id
        )
        return await self.add_span(span)

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        """Allocate the next span sequence id of a rollout (one counter per rollout)."""
        raise NotImplementedError()

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[Tuple[str, str]]) -> Sequence[int]:
        """Allocate one sequence id per (rollout_id, attempt_id) pair, in input order."""
        raise NotImplementedError()

    async def add_many_spans_assigning_ids(self, spans: Sequence[Span], assign: Sequence[bool]) -> Sequence[Span]:
        """Insert several spans, first giving each span whose ``assign`` flag is set a fresh sequence id (consecutive
        per rollout, in input order; set in place, replacing the placeholder the span carries). Returns exactly the
        newly stored spans. This is how the server ingests an OTLP export whose spans carry no sequence ids.

        A rollouthub extension of the contract. This default allocates with :meth:`get_many_span_sequence_ids` and then
        calls :meth:`add_many_spans`; collection-based stores allocate inside the unit that inserts the spans (one
        transaction instead of two, and no ids are consumed when the insert is rejected).
        """
        check_assign_flags(spans, assign)
        pairs = [(span.rollout_id, span.attempt_id) for span, flag in zip(spans, assign, strict=True) if flag]
        if not pairs:
            return await self.add_many_spans(spans)
        issued = iter(await self.get_many_span_sequence_ids(pairs))
        for span, flag in zip(spans, assign, strict=True):
            if flag:
                span.sequence_id = next(issued)
        return await self.add_many_spans(spans)

    async def wait_for_rollouts(self, *, rollout_ids: List[str], timeout: float | None = None) -> List[Rollout]:
        """Wait until the given rollouts finish or the timeout passes; returns the finished ones in input order."""
        raise NotImplementedError()

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
        """Query the spans of a rollout (optionally one attempt, or ``"latest"``).

        Builds the :class:`~rollouthub.types.queries.SpanQuery` of the keyword arguments and answers it with
        :meth:`_query_spans`, which a store implements (a store may also override this method as a whole).
        """
        query = SpanQuery.of(
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
        return await self._query_spans(rollout_id, attempt_id, query)

    async def _query_spans(
        self, rollout_id: str, attempt_id: str | Literal["latest"] | None, query: SpanQuery
    ) -> PaginatedResult[Span]:
        """Answer a span query (see :meth:`query_spans`)."""
        raise NotImplementedError()

    async def query_spans_json(
        self, rollout_id: str, attempt_id: str | Literal["latest"] | None = None, **filters: Any
    ) -> bytes:
        """:meth:`query_spans` (same keyword arguments), answered as the JSON bytes of its page
        (:func:`paginated_json`) -- what the server sends for ``POST /spans/search``.

        A rollouthub extension of the contract. This default serializes the result of :meth:`query_spans`; the SQL
        store builds the JSON from the stored columns without creating span models.
        """
        return paginated_json(await self.query_spans(rollout_id, attempt_id, **filters))

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
        """Replace the provided rollout fields; terminal statuses stamp ``end_time``. Passes the fields given (a
        :class:`~rollouthub.types.updates.RolloutUpdate`) to :meth:`_update_rollout`."""
        updates = provided_fields(
            input=input, mode=mode, resources_id=resources_id, status=status, config=config, metadata=metadata
        )
        return await self._update_rollout(rollout_id, cast(RolloutUpdate, updates))

    async def _update_rollout(self, rollout_id: str, updates: RolloutUpdate) -> Rollout:
        """Apply a rollout update (see :meth:`update_rollout`)."""
        raise NotImplementedError()

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str | Literal["latest"],
        status: AttemptStatus | Unset = UNSET,
        worker_id: str | Unset = UNSET,
        last_heartbeat_time: float | Unset = UNSET,
        metadata: Dict[str, Any] | None | Unset = UNSET,
    ) -> Attempt:
        """Update an attempt; updates of the latest attempt propagate to the rollout status. Passes the fields given
        (an :class:`~rollouthub.types.updates.AttemptUpdate`) to :meth:`_update_attempt`."""
        updates = provided_fields(
            status=status, worker_id=worker_id, last_heartbeat_time=last_heartbeat_time, metadata=metadata
        )
        return await self._update_attempt(rollout_id, attempt_id, cast(AttemptUpdate, updates))

    async def _update_attempt(
        self, rollout_id: str, attempt_id: str | Literal["latest"], updates: AttemptUpdate
    ) -> Attempt:
        """Apply an attempt update (see :meth:`update_attempt`)."""
        raise NotImplementedError()

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
        """Query workers: builds the :class:`~rollouthub.types.queries.WorkerQuery` of the keyword arguments and
        answers it with :meth:`_query_workers`, which a store implements."""
        query = WorkerQuery.of(
            status_in=status_in,
            worker_id_contains=worker_id_contains,
            filter_logic=filter_logic,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        )
        return await self._query_workers(query)

    async def _query_workers(self, query: WorkerQuery) -> PaginatedResult[Worker]:
        """Answer a worker query (see :meth:`query_workers`)."""
        raise NotImplementedError()

    async def get_worker_by_id(self, worker_id: str) -> Worker | None:
        """One worker by id, or ``None``."""
        raise NotImplementedError()

    async def update_worker(self, worker_id: str, heartbeat_stats: Dict[str, Any] | Unset = UNSET) -> Worker:
        """Record a worker heartbeat (creating the worker when new)."""
        raise NotImplementedError()
