"""``SqlQueue``: the rollout queue of the SQL backend (a table of ``seq``-ordered values), as a storage primitive."""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    List,
    Optional,
    Sequence,
    Type,
)

import sqlalchemy as sa

from .base import (
    Queue,
    tracked,
)
from .sql_engine import Unit
from .sql_filters import bp
from .sql_primitives import SqlPrimitive, fetch_column, fetch_scalar

if TYPE_CHECKING:
    from .sql import SqlLightningCollections


class SqlQueue(SqlPrimitive, Queue[str]):
    """A FIFO of strings: table ``rollout_queue(seq autoincrement, value)``; pops with the dialect's
    queue-claim statement (``SqlDialect.queue_pop``: PostgreSQL ``FOR UPDATE SKIP LOCKED``)."""

    def __init__(self, backend: SqlLightningCollections, unit: Optional[Unit] = None) -> None:
        super().__init__(tracker=backend.tracker)
        self._backend = backend
        self._unit = unit
        self._table = backend.schema.queue
        self._table_name = "rollout_queue"

    @property
    def collection_name(self) -> str:
        return "rollout_queue"

    def item_type(self) -> Type[str]:
        """Queued values are strings (rollout ids)."""
        return str

    @staticmethod
    def _check(item: Any) -> None:
        if not isinstance(item, str):
            raise TypeError(f"Expected str, got {type(item).__name__}")

    @tracked("has")
    async def has(self, item: str) -> bool:
        """Membership among not-yet-dequeued values (indexed)."""
        self._check(item)
        t = self._table
        stmt = self._stmt(("queue_has_value",), lambda: sa.select(sa.exists().where(t.c.value == bp("v"))))
        return bool(await self._run(False, lambda u: fetch_scalar(u, stmt, {"v": item})))

    @tracked("enqueue")
    async def enqueue(self, items: Sequence[str]) -> Sequence[str]:
        """Append values in order (one bulk insert)."""
        for item in items:
            self._check(item)
        if not items:
            return []
        values = list(items)
        deferring = self._deferring()
        if deferring is not None:
            deferring.batch.enqueue(values)  # type: ignore[union-attr]
            return values
        await self._run(True, lambda unit: unit.enqueue(self._insert_value, values))
        return values

    def _insert_value(self) -> Any:
        """The ``INSERT`` of one value (bound as ``v``), compiled once (:meth:`~.sql_engine.Unit.enqueue`)."""
        return self._stmt(("queue_insert",), lambda: sa.insert(self._table).values(value=bp("v")))

    @tracked("dequeue")
    async def dequeue(self, limit: int = 1) -> Sequence[str]:
        """Pop up to ``limit`` values from the head."""
        if limit <= 0:
            return []
        t = self._table
        dialect = self._backend.sql_dialect
        stmt = self._stmt(("queue_pop",), lambda: dialect.queue_pop(t, bp("lim", type_=sa.Integer())))

        async def run(unit: Unit) -> List[str]:
            return [value for _, value in sorted(tuple(r) for r in await unit.fetch(stmt, {"lim": limit}))]

        return await self._run(True, run)

    @tracked("peek")
    async def peek(self, limit: int = 1) -> Sequence[str]:
        """The first ``limit`` values without removing them."""
        if limit <= 0:
            return []
        t = self._table
        stmt = self._stmt(
            ("queue_peek",), lambda: sa.select(t.c.value).order_by(t.c.seq).limit(bp("lim", type_=sa.Integer()))
        )
        return await self._run(False, lambda u: fetch_column(u, stmt, {"lim": limit}))

    @tracked("size")
    async def size(self) -> int:
        """Number of queued values."""
        stmt = self._stmt(("queue_size",), lambda: sa.select(sa.func.count()).select_from(self._table))
        return int(await self._run(False, lambda u: fetch_scalar(u, stmt, {})))
