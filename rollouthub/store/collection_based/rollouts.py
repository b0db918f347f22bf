"""Rollouts and the queue: creating and enqueueing rollouts, claiming them (one unit pops the queue and creates
the attempt), starting attempts outside the queue, reading rollouts and attempts, updating rollouts.
"""

from __future__ import annotations

import logging
import time
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from rollouthub.types import (
    Attempt,
    AttemptedRollout,
    EnqueueRolloutRequest,
    FilterOptions,
    PaginatedResult,
    Rollout,
    RolloutConfig,
    RolloutStatus,
)
from rollouthub.types.queries import AttemptQuery, RolloutQuery
from rollouthub.types.updates import RolloutUpdate

from ..collection.base import (
    LightningCollections,
    PoppedRollout,
)
from ..utils import (
    ROLLOUT_QUEUING_STATUSES,
    rollout_status_sets_end_time,
)
from .core import (
    _ALL_ROLLOUT_FIELDS,
    _LATEST_FIRST,
    StoreCore,
    T_collections,
    _attach,
    _by_rollout,
    _new_attempt_id,
    _new_rollout_id,
    healthcheck_before,
    tracked,
)

logger = logging.getLogger(__name__)


class RolloutsMixin(StoreCore[T_collections]):
    """Rollout creation, the queue, rollout/attempt reads and rollout updates."""

    # ----------------------------------------------------------------------------------------------------------
    # Rollout creation and the queue
    # ----------------------------------------------------------------------------------------------------------

    def _build_rollout(
        self, request: EnqueueRolloutRequest, resources_id: Optional[str], status: RolloutStatus, now: float
    ) -> Rollout:
        """The new rollout of ``request`` (with the resolved ``resources_id``), a copy of its config and metadata."""
        return Rollout(
            rollout_id=_new_rollout_id(),
            input=request.input,
            start_time=now,
            mode=request.mode,
            resources_id=resources_id,
            status=status,
            config=request.config.model_copy(deep=True) if request.config is not None else RolloutConfig(),
            metadata=dict(request.metadata) if request.metadata is not None else {},
        )

    async def _unlocked_resolve_resources_id(
        self, c: LightningCollections, resources_id: Optional[str]
    ) -> Optional[str]:
        """Inside a unit: ``resources_id``, or (``None``) the id of the latest resources snapshot."""
        if resources_id is not None:
            return resources_id
        latest = await self._unlocked_get_latest_resources(c)
        return latest.resources_id if latest is not None else None

    @tracked("start_rollout")
    @healthcheck_before
    async def _start_rollout(self, request: EnqueueRolloutRequest, worker_id: str | None) -> AttemptedRollout:
        """Create a rollout with its first attempt (status ``preparing``), bypassing the queue."""
        now = time.time()

        async def persist(c: LightningCollections) -> Tuple[Rollout, Attempt]:
            resolved = await self._unlocked_resolve_resources_id(c, request.resources_id)
            rollout = self._build_rollout(request, resolved, "preparing", now)
            attempt = Attempt(
                rollout_id=rollout.rollout_id,
                attempt_id=_new_attempt_id(),
                sequence_id=1,
                start_time=now,
                status="preparing",
                worker_id=worker_id,
            )
            await c.attempts.insert([attempt])
            await c.rollouts.insert([rollout])
            await self._unlocked_sync_workers_with_attempts(c, [attempt])
            return rollout, attempt

        rollout, attempt = await self._commit(persist, "resources", "rollouts", "attempts", "workers")
        await self._post_update_rollout([(rollout, _ALL_ROLLOUT_FIELDS)])
        return _attach(rollout, attempt)

    @tracked("enqueue_rollout")
    @healthcheck_before
    async def _enqueue_rollout(self, request: EnqueueRolloutRequest) -> Rollout:
        """Create a ``queuing`` rollout at the tail of the queue."""
        return (await self._enqueue_requests([request]))[0]

    @tracked("enqueue_many_rollouts")
    @healthcheck_before
    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> Sequence[Rollout]:
        """Enqueue several rollouts in one unit, in input order."""
        if not rollouts:
            return []
        requests = [
            r if isinstance(r, EnqueueRolloutRequest) else EnqueueRolloutRequest.model_validate(r) for r in rollouts
        ]
        return await self._enqueue_requests(requests)

    async def _enqueue_requests(self, requests: Sequence[EnqueueRolloutRequest]) -> List[Rollout]:
        """Enqueue ``requests`` in one unit (a request without ``resources_id`` gets the latest snapshot's)."""
        now = time.time()

        def build(latest_id: Optional[str]) -> List[Rollout]:
            return [
                self._build_rollout(
                    request, request.resources_id if request.resources_id is not None else latest_id, "queuing", now
                )
                for request in requests
            ]

        return await self._enqueue_many_rollouts(build, any(r.resources_id is None for r in requests))

    @tracked("_enqueue_many_rollouts")
    async def _enqueue_many_rollouts(
        self, build: Callable[[Optional[str]], List[Rollout]], needs_latest: bool
    ) -> List[Rollout]:
        """One unit: read the latest resources id (when ``needs_latest``), ``build(latest id)`` the rollouts, insert
        and queue them."""

        async def persist(c: LightningCollections) -> List[Rollout]:
            latest_id = await self._unlocked_resolve_resources_id(c, None) if needs_latest else None
            rollouts = build(latest_id)
            await c.rollouts.insert(rollouts)
            await c.rollout_queue.enqueue([r.rollout_id for r in rollouts])
            return rollouts

        rollouts: List[Rollout] = await self._commit(persist, "resources", "rollouts", "rollout_queue")
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
                c: LightningCollections, want: int = want, nothing_yet: bool = nothing_yet
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
        self, c: LightningCollections, popped: Sequence[PoppedRollout], worker_id: Optional[str]
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
            await c.rollouts.write_update(updated, update_fields=["status"])
        return [_attach(r, a) for r, a in zip(updated, attempts, strict=False)]

    @tracked("start_attempt")
    @healthcheck_before
    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> AttemptedRollout:
        """Create a new attempt outside the queue (ignores ``max_attempts``)."""

        async def create(c: LightningCollections) -> AttemptedRollout:
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
            await c.rollouts.write_update([updated], update_fields=["status"])
            await self._unlocked_sync_workers_with_attempts(c, [attempt])
            return _attach(updated, attempt)

        result: AttemptedRollout = await self._commit(create, "rollouts", "attempts", "workers")
        await self._post_update_rollout([(result, ("status",))])
        return result

    # ----------------------------------------------------------------------------------------------------------
    # Rollout and attempt queries
    # ----------------------------------------------------------------------------------------------------------

    @tracked("_unlocked_query_rollouts_by_rollout_ids")
    async def _unlocked_query_rollouts_by_rollout_ids(
        self, c: LightningCollections, rollout_ids: Sequence[str]
    ) -> Dict[str, Rollout]:
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
    async def _unlocked_get_latest_attempt(self, c: LightningCollections, rollout_id: str) -> Optional[Attempt]:
        """Inside a unit: the attempt with the highest sequence id."""
        return await c.attempts.get(filter=_by_rollout(rollout_id), sort=_LATEST_FIRST)

    @tracked("_unlocked_many_rollouts_to_attempted_rollouts")
    async def _unlocked_many_rollouts_to_attempted_rollouts(
        self, c: LightningCollections, rollouts: Sequence[Rollout]
    ) -> List[Union[Rollout, AttemptedRollout]]:
        """Inside a unit: attach each rollout's latest attempt (backends may override with one query)."""
        out: List[Union[Rollout, AttemptedRollout]] = []
        for rollout in rollouts:
            latest = await self._unlocked_get_latest_attempt(c, rollout.rollout_id)
            out.append(_attach(rollout, latest) if latest is not None else rollout)
        return out

    @tracked("query_rollouts")
    @healthcheck_before
    async def _query_rollouts(self, query: RolloutQuery) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
        """Query rollouts with filters, sorting and pagination."""
        filters: FilterOptions = {}
        if query.status_in is not None:
            filters["status"] = {"within": list(query.status_in)}
        id_ops: Dict[str, Any] = {}
        if query.rollout_id_in is not None:
            id_ops["within"] = list(query.rollout_id_in)
        if query.rollout_id_contains is not None:
            id_ops["contains"] = query.rollout_id_contains
        if id_ops:
            filters["rollout_id"] = id_ops
        if filters:
            filters["_aggregate"] = query.filter_logic
        async with self._read("rollouts", "attempts") as c:
            page = await c.rollouts.query(
                filter=filters or None, sort=query.sort(), limit=query.limit, offset=query.offset
            )
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
    async def _query_attempts(self, rollout_id: str, query: AttemptQuery) -> PaginatedResult[Attempt]:
        """Attempts of a rollout (empty when unknown)."""
        async with self._read("attempts") as c:
            return await c.attempts.query(
                filter=_by_rollout(rollout_id), sort=query.sort(), limit=query.limit, offset=query.offset
            )

    @tracked("get_latest_attempt")
    @healthcheck_before
    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        """The newest attempt of a rollout, or ``None``."""
        async with self._read("attempts") as c:
            return await self._unlocked_get_latest_attempt(c, rollout_id)

    # ----------------------------------------------------------------------------------------------------------
    # Updates and status propagation
    # ----------------------------------------------------------------------------------------------------------

    @tracked("update_rollout")
    @healthcheck_before
    async def _update_rollout(self, rollout_id: str, updates: RolloutUpdate) -> Rollout:
        """Replace the provided fields (no transition guard); terminal statuses stamp ``end_time``."""

        async def apply(c: LightningCollections) -> Rollout:
            existing = await c.rollouts.get(filter={"rollout_id": {"exact": rollout_id}})
            if existing is None:
                raise ValueError(f"Item does not exist with primary key(s): rollout_id='{rollout_id}'")
            return await self._unlocked_update_rollout_only(c, existing, dict(updates))

        updated: Rollout = await self._commit(apply, "rollouts", "rollout_queue")
        await self._post_update_rollout([(updated, tuple(updates) + (("end_time",) if "status" in updates else ()))])
        return updated

    @tracked("_unlocked_update_rollout_only")
    async def _unlocked_update_rollout_only(
        self, c: LightningCollections, rollout: Rollout, updates: Dict[str, Any]
    ) -> Rollout:
        """Inside a unit: validate and write rollout fields; re-enqueue on a change into a queuing status."""
        if "status" in updates and rollout_status_sets_end_time(updates["status"]):
            updates["end_time"] = time.time()
        if not updates:
            return rollout
        new_rollout = Rollout.model_validate({**rollout.__dict__, **updates})
        await c.rollouts.write_update([new_rollout], update_fields=list(updates))
        if "status" in updates and new_rollout.status in ROLLOUT_QUEUING_STATUSES:
            if not await c.rollout_queue.has(new_rollout.rollout_id):
                await c.rollout_queue.enqueue([new_rollout.rollout_id])
        return new_rollout
