"""Resources: the snapshots of named resources and the latest one."""

from __future__ import annotations

import logging
import time
from typing import (
    Any,
    Dict,
    Optional,
    cast,
)

from rollouthub.types import (
    FilterOptions,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
)
from rollouthub.types.queries import ResourcesQuery

from ..collection.base import LightningCollections
from .core import (
    StoreCore,
    T_collections,
    _new_resources_id,
    healthcheck_before,
    tracked,
)

logger = logging.getLogger(__name__)


class ResourcesMixin(StoreCore[T_collections]):
    """Resource snapshots."""

    # ----------------------------------------------------------------------------------------------------------
    # Resources
    # ----------------------------------------------------------------------------------------------------------

    @tracked("_get_latest_resources")
    async def _get_latest_resources(self) -> Optional[ResourcesUpdate]:
        """Generic rule: the snapshot with the greatest ``update_time``."""
        async with self._read("resources") as c:
            return await c.resources.get(sort={"name": "update_time", "order": "desc"})

    async def _unlocked_get_latest_resources(self, c: LightningCollections) -> Optional[ResourcesUpdate]:
        """Inside a unit: the latest snapshot (a backend may answer from a cache it validates when the unit
        writes: :meth:`~rollouthub.store.collection.base.LightningCollections.latest_resources`)."""
        return cast(Optional[ResourcesUpdate], await c.latest_resources())

    @tracked("query_resources")
    async def _query_resources(self, query: ResourcesQuery) -> PaginatedResult[ResourcesUpdate]:
        """Query resource snapshots (filters are ANDed)."""
        ops: Dict[str, Any] = {}
        if query.resources_id is not None:
            ops["exact"] = query.resources_id
        if query.resources_id_contains is not None:
            ops["contains"] = query.resources_id_contains
        filters: Optional[FilterOptions] = {"resources_id": ops} if ops else None
        async with self._read("resources") as c:
            return await c.resources.query(filter=filters, sort=query.sort(), limit=query.limit, offset=query.offset)

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

        async def upsert(c: LightningCollections) -> ResourcesUpdate:
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
