"""``SqlKeyValue``: the key-value primitive of the SQL backend (span sequence-id counters and the like)."""

from __future__ import annotations

import json
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Optional,
)

import sqlalchemy as sa

from .base import (
    KeyValue,
    ensure_numeric,
    tracked,
)
from .sql_engine import Unit
from .sql_filters import bp
from .sql_primitives import SqlPrimitive, fetch_scalar
from .sql_schema import json_dumps

if TYPE_CHECKING:
    from .sql import SqlLightningCollections


class SqlKeyValue(SqlPrimitive, KeyValue[str, Any]):
    """A dictionary in table ``span_sequence_ids(key, num, value)``: integers live in ``num`` so that ``inc`` and
    ``chmax`` are one ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``; other values are JSON in ``value``."""

    def __init__(self, backend: SqlLightningCollections, unit: Optional[Unit] = None) -> None:
        super().__init__(tracker=backend.tracker)
        self._backend = backend
        self._unit = unit
        self._table = backend.schema.kv
        self._table_name = "span_sequence_ids"

    @property
    def collection_name(self) -> str:
        return "span_sequence_ids"

    def _decode(self, row: Any) -> Any:
        if row[0] is not None:
            return int(row[0])
        if row[1] is None:
            return None
        return json.loads(row[1])

    @staticmethod
    def _encode(key: Any, value: Any) -> Dict[str, Any]:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"k": str(key), "n": value, "v": None}
        return {"k": str(key), "n": None, "v": json_dumps(value)}

    def _where_key(self) -> Any:
        return self._table.c.key == bp("k")

    def _set_stmt(self) -> Any:
        t = self._table

        def build() -> Any:
            ins = self._backend.sql_dialect.insert(t).values(key=bp("k"), num=bp("n"), value=bp("v"))
            return ins.on_conflict_do_update(
                index_elements=["key"], set_={"num": ins.excluded.num, "value": ins.excluded.value}
            )

        return self._stmt(("kv_set",), build)

    @tracked("has")
    async def has(self, key: str) -> bool:
        """Whether ``key`` is present."""
        stmt = self._stmt(("kv_has",), lambda: sa.select(sa.exists().where(self._where_key())))
        return bool(await self._run(False, lambda u: fetch_scalar(u, stmt, {"k": str(key)})))

    @tracked("get")
    async def get(self, key: str, default: Optional[Any] = None) -> Optional[Any]:
        """Value of ``key`` or ``default``."""
        t = self._table
        stmt = self._stmt(("kv_get",), lambda: sa.select(t.c.num, t.c.value).where(self._where_key()))
        rows = await self._run(False, lambda u: u.fetch(stmt, {"k": str(key)}))
        return default if not rows else self._decode(rows[0])

    @tracked("set")
    async def set(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key`` (upsert)."""
        stmt = self._set_stmt()
        await self._run(True, lambda u: u.execute(stmt, self._encode(key, value)))

    async def _numeric_update(self, key: str, amount: Any, op: str) -> Any:
        ensure_numeric(amount, description="amount" if op == "inc" else "value")
        t = self._table
        if isinstance(amount, int):
            deferring = self._deferring()
            if op == "inc" and deferring is not None and deferring.optimistic:
                value = await self._optimistic_inc(deferring, str(key), amount)
                if value is not None:
                    return value

            def build() -> Any:
                ins = self._backend.sql_dialect.insert(t).values(key=bp("k"), num=bp("n"), value=None)
                if op == "inc":
                    new = t.c.num + ins.excluded.num
                else:
                    new = self._backend.sql_dialect.larger_of(t.c.num, ins.excluded.num)
                return ins.on_conflict_do_update(
                    index_elements=["key"], set_={"num": new}, where=t.c.num.is_not(None)
                ).returning(t.c.num)

            fast = self._stmt(("kv_numeric_update", op), build)
            rows = await self._run(True, lambda u: u.fetch(fast, {"k": str(key), "n": amount}))
            if rows:
                return int(rows[0][0])
        select = self._stmt(("kv_get",), lambda: sa.select(t.c.num, t.c.value).where(self._where_key()))
        select_locked = self._stmt(
            ("kv_get_locked",), lambda: sa.select(t.c.num, t.c.value).where(self._where_key()).with_for_update()
        )
        set_stmt = self._set_stmt()

        async def slow(unit: Unit) -> Any:
            rows = await unit.fetch(select_locked if unit.for_update else select, {"k": str(key)})
            if not rows:
                new_value = amount
            else:
                current = ensure_numeric(self._decode(rows[0]), description="existing value")
                new_value = current + amount if op == "inc" else max(current, amount)
            await unit.execute(set_stmt, self._encode(key, new_value))
            return new_value

        if self._unit is not None:
            return await slow(self._unit)
        async with self._backend._unit_scope(write=True, snapshot=False, commit=True) as own:
            return await slow(own)

    async def _optimistic_inc(self, unit: Unit, key: str, amount: int) -> Optional[int]:
        """``inc`` in an optimistic unit: read the counter with its version, defer the write of ``value + amount``
        guarded by that version (a concurrent bump re-runs the unit); a missing counter is created by the deferred
        writes (a concurrent creation re-runs the unit). A non-integer value needs a transaction: the unit starts it
        and ``None`` says to take the transactional path."""
        batch = unit.batch
        assert batch is not None
        await batch.before_statement(unit, (self._table_name,), False)
        t = self._table
        stmt = self._stmt(
            ("kv_get_versioned",),
            lambda: sa.select(t.c.num, self._backend.sql_dialect.row_version(self._table_name)).where(
                self._where_key()
            ),
        )
        rows = await unit.fetch(stmt, {"k": key})
        if not rows:
            await batch.set_counter(unit, key, amount, None)
            return amount
        if rows[0][0] is None:
            await unit.start_transaction()
            return None
        value = int(rows[0][0]) + amount
        await batch.set_counter(unit, key, value, rows[0][1])
        return value

    @tracked("inc")
    async def inc(self, key: str, amount: Any) -> Any:
        """Add ``amount`` atomically (missing key -> ``amount``); returns the new value."""
        return await self._numeric_update(key, amount, "inc")

    @tracked("chmax")
    async def chmax(self, key: str, value: Any) -> Any:
        """Store ``max(existing, value)`` atomically (missing key -> ``value``); returns the stored value."""
        return await self._numeric_update(key, value, "chmax")

    @tracked("raise_to")
    async def raise_to(self, key: str, value: Any) -> None:
        """SQLite, integer ``value``: one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE num < value`` (the write lock is
        held by the unit anyway, and a false condition writes nothing). PostgreSQL and other values: read first, then
        :meth:`chmax` only when needed (a conditional upsert would still lock the row there)."""
        ensure_numeric(value, description="value")
        if self._backend.sql_dialect.conditional_upsert_locks_row or not isinstance(value, int):
            deferring = self._deferring()
            if deferring is None or not isinstance(value, int):
                await super().raise_to(key, value)
                return
            current = await self.get(key)  # read (no lock): only raise when needed; a non-number fails here
            if current is None or ensure_numeric(current, description="existing value") < value:
                deferring.batch.raise_to(str(key), value)  # type: ignore[union-attr]
            return
        t = self._table

        def build() -> Any:
            ins = self._backend.sql_dialect.insert(t).values(key=bp("k"), num=bp("n"), value=None)
            # A stored non-integer (num IS NULL) is selected too, and left unchanged: RETURNING then says so.
            return ins.on_conflict_do_update(
                index_elements=["key"],
                set_={"num": sa.case((t.c.num.is_(None), None), else_=ins.excluded.num)},
                where=sa.or_(t.c.num.is_(None), t.c.num < ins.excluded.num),
            ).returning(t.c.num)

        stmt = self._stmt(("kv_raise_to",), build)
        rows = await self._run(True, lambda u: u.fetch(stmt, {"k": str(key), "n": value}))
        if rows and rows[0][0] is None:
            ensure_numeric(await self.get(key), description="existing value")

    @tracked("pop")
    async def pop(self, key: str, default: Optional[Any] = None) -> Optional[Any]:
        """Remove ``key`` and return its value, or ``default``."""
        t = self._table
        stmt = self._stmt(("kv_pop",), lambda: sa.delete(t).where(self._where_key()).returning(t.c.num, t.c.value))
        rows = await self._run(True, lambda u: u.fetch(stmt, {"k": str(key)}))
        return default if not rows else self._decode(rows[0])

    @tracked("size")
    async def size(self) -> int:
        """Number of keys."""
        stmt = self._stmt(("kv_size",), lambda: sa.select(sa.func.count()).select_from(self._table))
        return int(await self._run(False, lambda u: fetch_scalar(u, stmt, {})))
