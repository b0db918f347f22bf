"""Workers: heartbeats, worker status kept in step with their attempts, queries."""

from __future__ import annotations

import logging
import time
from typing import (
    Any,
    Dict,
    Sequence,
    cast,
)

from rollouthub.types import (
    Attempt,
    FilterOptions,
    PaginatedResult,
    Worker,
)
from rollouthub.types.queries import WorkerQuery

from ..base import (
    UNSET,
    Unset,
)
from ..collection.base import LightningCollections
from ..utils import (
    worker_fields_for_attempt,
    worker_fields_for_empty_dequeue,
)
from .core import (
    StoreCore,
    T_collections,
    healthcheck_before,
    tracked,
)

logger = logging.getLogger(__name__)


class WorkersMixin(StoreCore[T_collections]):
    """Workers."""

    # ----------------------------------------------------------------------------------------------------------
    # Workers
    # ----------------------------------------------------------------------------------------------------------

    @tracked("query_workers")
    @healthcheck_before
    async def _query_workers(self, query: WorkerQuery) -> PaginatedResult[Worker]:
        """Query workers."""
        filters: FilterOptions = {}
        if query.status_in is not None:
            filters["status"] = {"within": list(query.status_in)}
        if query.worker_id_contains is not None:
            filters["worker_id"] = {"contains": query.worker_id_contains}
        if filters:
            filters["_aggregate"] = query.filter_logic
        async with self._read("workers") as c:
            return await c.workers.query(
                filter=filters or None, sort=query.sort(), limit=query.limit, offset=query.offset
            )

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
        self, c: LightningCollections, attempts: Sequence[Attempt], dequeue: bool = False
    ) -> None:
        """Inside a unit: derive each attempt's worker status (busy/idle/unknown) and write only those fields."""
        now = time.time()
        for attempt in attempts:
            if not attempt.worker_id:
                continue
            values = worker_fields_for_attempt(attempt, now, dequeue)
            await c.workers.write_upsert([Worker(worker_id=attempt.worker_id, **values)], update_fields=list(values))

    @tracked("_sync_workers_with_attempts")
    async def _sync_workers_with_attempts(self, attempts: Sequence[Attempt], dequeue: bool = False) -> None:
        """Sync the workers of these attempts in a unit of their own (used by the watchdog)."""
        if not any(attempt.worker_id for attempt in attempts):
            return
        async with self.collections.atomic(mode="w", labels=["workers"]) as c:
            await self._unlocked_sync_workers_with_attempts(c, attempts, dequeue)

    async def _unlocked_dequeue_mark_worker_idle(self, c: LightningCollections, worker_id: str) -> None:
        """Inside a unit: the empty-dequeue rule of the worker status machine."""
        existing = await c.workers.get(filter={"worker_id": {"exact": worker_id}})
        values = worker_fields_for_empty_dequeue(existing, time.time())
        await c.workers.write_upsert([Worker(worker_id=worker_id, **values)], update_fields=list(values))

    @tracked("_dequeue_mark_worker_idle")
    async def _dequeue_mark_worker_idle(self, worker_id: str) -> None:
        async with self.collections.atomic(mode="rw", labels=["workers"]) as c:
            await self._unlocked_dequeue_mark_worker_idle(c, worker_id)
