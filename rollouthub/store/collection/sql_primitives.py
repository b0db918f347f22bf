"""``SqlCollection``: the table primitive of the SQL backend, and the unit plumbing every SQL primitive shares
(``SqlQueue`` lives in :mod:`.sql_queue`, ``SqlKeyValue`` in :mod:`.sql_key_value`).

A primitive is either bound to a unit of work (it was reached through the collections object yielded by
``atomic()``/``execute()``) or unbound (reached through :class:`~.sql.SqlLightningCollections` directly), in which
case every operation runs in a unit of its own. Statements are compiled once per shape (see :mod:`.sql_engine`).

Each write primitive keeps its deferred path (PostgreSQL commit units, :mod:`.sql_batch`) next to the immediate path
it replaces.
"""

from __future__ import annotations

import asyncio
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
)

import sqlalchemy as sa
from pydantic import BaseModel
from pydantic_core import to_json

from rollouthub.types import FilterOptions, PaginatedResult, SortOptions

from .base import (
    Collection,
    DuplicatedPrimaryKeyError,
    NormalizedFilter,
    normalize_filter_options,
    primary_key_of_filter,
    resolve_sort,
    tracked,
)
from .sql_engine import ACTIVE_UNIT, BulkInsert, Unit
from .sql_filters import FALSE, Binder, bp, compile_where
from .sql_schema import TableSpec

if TYPE_CHECKING:
    from .sql import SqlLightningCollections

__all__ = ["SqlCollection"]

T = TypeVar("T", bound=BaseModel)
R = TypeVar("R")

_SCALAR_TYPES: Dict[Optional[str], type] = {"str": str, "int": int, "float": float}


class RowItems(Sequence[R]):
    """The items of ``RETURNING`` rows, converted to models on first access: callers that ignore what an update or
    upsert returns (most of the business logic) never pay for the conversion."""

    __slots__ = ("_rows", "_convert", "_items")

    def __init__(self, rows: List[Any], convert: Callable[[Any], R]) -> None:
        self._rows = rows
        self._convert = convert
        self._items: Optional[List[R]] = None

    def _materialize(self) -> List[R]:
        items = self._items
        if items is None:
            items = self._items = [self._convert(row) for row in self._rows]
            self._rows = []
        return items

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        return self._materialize()[index]

    def __iter__(self) -> Iterator[R]:
        return iter(self._materialize())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RowItems):
            other = other._materialize()
        return self._materialize() == other if isinstance(other, list) else NotImplemented

    def __repr__(self) -> str:
        return repr(self._materialize())


class SqlPrimitive:
    """Shared plumbing: run in the bound unit, or in a unit of its own; defer writes in units that batch them."""

    _backend: SqlLightningCollections
    _unit: Optional[Unit]
    _table_name: str

    async def _run(self, write: bool, fn: Callable[[Unit], Awaitable[R]]) -> R:
        unit = self._unit
        if unit is not None:
            if unit.batch is not None:
                await unit.batch.before_statement(unit, (self._table_name,), write)
            return await fn(unit)
        async with self._backend._unit_scope(write=write, snapshot=False, commit=False) as own:
            if own.batch is not None:
                await own.batch.before_statement(own, (self._table_name,), write)
            return await fn(own)

    def _deferring(self) -> Optional[Unit]:
        """The unit this primitive's writes go to when it defers them (PostgreSQL commit units, see
        :mod:`.sql_batch`): the bound unit, or the task's active write unit that an unbound primitive joins."""
        unit = self._unit
        if unit is None:
            unit = ACTIVE_UNIT.get()
            if unit is None or unit.backend is not self._backend or not unit.write:
                return None
            if unit.task is not asyncio.current_task():
                return None
        return unit if unit.batch is not None else None

    def _stmt(self, key: Any, build: Callable[[], Any]) -> Any:
        return self._backend.stmts.get(key, build)


async def fetch_scalar(unit: Unit, stmt: Any, values: Dict[str, Any]) -> Any:
    """The first column of the first row a statement answers (``None`` when none), in ``unit``."""
    rows = await unit.fetch(stmt, values)
    return rows[0][0] if rows else None


async def fetch_column(unit: Unit, stmt: Any, values: Dict[str, Any]) -> List[Any]:
    """The first column of every row a statement answers, in ``unit``."""
    return [r[0] for r in await unit.fetch(stmt, values)]


def _pk_repr(spec: TableSpec, values: Sequence[Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in zip(spec.primary_keys, values, strict=False))


class SqlCollection(SqlPrimitive, Collection[T]):
    """A collection stored in one table; filters, sorts and pagination compile to SQL."""

    def __init__(self, backend: SqlLightningCollections, spec: TableSpec, unit: Optional[Unit] = None) -> None:
        super().__init__(tracker=backend.tracker)
        self._backend = backend
        self._spec = spec
        self._unit = unit
        self._table_name = spec.name

    @property
    def collection_name(self) -> str:
        return self._spec.name

    def primary_keys(self) -> Sequence[str]:
        """Primary-key field names, in order."""
        return self._spec.primary_keys

    def item_type(self) -> Type[T]:
        """The model class of the items."""
        return self._spec.model  # type: ignore[return-value]

    def _check_items(self, items: Sequence[T]) -> None:
        model = self._spec.model
        for item in items:
            if not isinstance(item, model):
                raise TypeError(f"Expected {model.__name__}, got {type(item).__name__}")

    def _wrote(self, items: Sequence[Any]) -> None:
        """Before a write: drop what the backend's caches know of the rows written (PostgreSQL, see
        :mod:`.sql_batch`; optimistic units would otherwise use it once more, fail their guard and run again)."""
        name = self._spec.name
        if name == "resources":
            self._backend.latest_resources_cache = None
        elif name in ("rollouts", "attempts"):
            cache = self._backend.rollout_cache
            if cache:
                for item in items:
                    cache.pop(item.rollout_id, None)

    def _pk_values(self, item: BaseModel) -> Tuple[Any, ...]:
        values = item.__dict__  # pydantic stores declared fields here
        return tuple([values[k] for k in self._spec.primary_keys])

    def _pk_where(self) -> Any:
        t = self._spec.table
        return sa.and_(*[t.c[k] == bp(f"k_{k}") for k in self._spec.primary_keys])

    def _pk_binds(self, key: Sequence[Any]) -> Dict[str, Any]:
        return dict(zip(self._spec.pk_bind_names, key, strict=False))

    # --- reads -------------------------------------------------------------------------------------------------

    def _exact_signature(self, filter: FilterOptions) -> Optional[Tuple[Tuple[Any, ...], List[Any]]]:
        """``(signature, values)`` of a filter made only of ``exact`` conditions on scalar columns with values of
        the column's own type (``str``/``int``/``float``), else ``None``. Such filters compile to one condition
        and one parameter per value, in traversal order, so their compiled form depends on the signature only."""
        kinds = self._spec.kinds
        parts: List[Any] = []
        values: List[Any] = []

        def add(field_name: str, ops: Any) -> bool:
            if type(ops) is not dict or len(ops) != 1 or "exact" not in ops:
                return False
            value = ops["exact"]
            kind = kinds.get(field_name)
            if _SCALAR_TYPES.get(kind) is not type(value):  # type: ignore[arg-type]
                return False
            parts.append(field_name)
            values.append(value)
            return True

        must = filter.get("_must")
        if must is not None:
            if type(must) is not dict:
                return None
            for field_name, ops in must.items():
                if not add(field_name, ops):
                    return None
        parts.append("|")
        for field_name, ops in filter.items():
            if field_name != "_must" and field_name != "_aggregate" and not add(field_name, ops):
                return None
        parts.append(filter.get("_aggregate", "and"))
        return tuple(parts), values

    def _filter(self, filter: Optional[FilterOptions]) -> Tuple[Any, Tuple[Any, ...], Dict[str, Any], Any]:
        """``(where marker, shape, values, normalized)``: where marker is ``None`` (all), ``FALSE`` or a clause.

        Filters of exact scalar conditions (most of the business logic's reads) are compiled once per signature:
        later calls only collect their values (see :meth:`_exact_signature`)."""
        signature = self._exact_signature(filter) if filter else None
        cache = self._backend.filter_shapes
        if signature is not None:
            hit = cache.get((self._spec.name, signature[0]))
            if hit is not None:
                return hit[0], hit[1], {f"p{i}": v for i, v in enumerate(signature[1])}, hit[2]
        nf = normalize_filter_options(filter)
        if nf.is_empty:
            return None, (), {}, nf
        b = Binder(self._backend.sql_dialect, dry=True)
        marker = compile_where(self._spec, nf, b)
        if signature is not None and b.values == {f"p{i}": v for i, v in enumerate(signature[1])}:
            if len(cache) > 4096:
                cache.clear()
            cache[(self._spec.name, signature[0])] = (marker, tuple(b.shape), nf)
        return marker, tuple(b.shape), b.values, nf

    def _where_clause(self, nf: NormalizedFilter) -> Any:
        clause = compile_where(self._spec, nf, Binder(self._backend.sql_dialect, dry=False))
        return None if clause is None else (sa.false() if clause is FALSE else clause)

    def _order_by(self, sort: Optional[SortOptions]) -> Tuple[Optional[Tuple[str, str]], Callable[[], List[Any]]]:
        resolved = resolve_sort(self._spec.model, sort)

        def build() -> List[Any]:
            order_col = self._spec.order_col
            if resolved is None:
                return [order_col]
            name, order = resolved
            col = self._spec.table.c[name]
            if name.endswith("_time"):
                expr = col.asc().nulls_last() if order == "asc" else col.desc().nulls_first()
            else:
                expr = col.asc().nulls_first() if order == "asc" else col.desc().nulls_last()
            return [expr, order_col]

        return resolved, build

    def _columns(self, versioned: bool) -> List[Any]:
        """The selected columns; ``versioned`` adds the row version (``xmin``) last (optimistic units)."""
        if not versioned:
            return self._spec.columns
        return [*self._spec.columns, self._backend.sql_dialect.row_version(self._spec.name)]

    def _select(self, unit: Unit, marker: Any, shape: Any, nf: Any, sort: Any, limit: str, offset: bool) -> Any:
        """``limit``: ``""`` (none), ``"param"`` (the ``lim`` parameter) or ``"one"`` (``LIMIT 1`` literally, for
        ``get``: PostgreSQL keeps one generic plan for a statement whose ``LIMIT`` is no parameter, instead of
        planning it at each execution)."""
        sort_key, order_build = sort
        for_update = unit.for_update
        versioned = unit.optimistic
        key = ("query", self._spec.name, shape, sort_key, limit, offset, for_update, versioned)

        def build() -> Any:
            stmt = sa.select(*self._columns(versioned))
            if marker is not None:
                stmt = stmt.where(self._where_clause(nf))
            stmt = stmt.order_by(*order_build())
            if limit == "one":
                stmt = stmt.limit(sa.literal_column("1", sa.Integer()))
            elif limit:
                stmt = stmt.limit(bp("lim", type_=sa.Integer()))
            if offset:
                stmt = stmt.offset(bp("off", type_=sa.Integer()))
            return stmt.with_for_update() if for_update else stmt

        return self._stmt(key, build)

    def _count_stmt(self, marker: Any, shape: Any, nf: Any) -> Any:
        def build() -> Any:
            stmt = sa.select(sa.func.count()).select_from(self._spec.table)
            return stmt if marker is None else stmt.where(self._where_clause(nf))

        return self._stmt(("count", self._spec.name, shape), build)

    @tracked("size")
    async def size(self) -> int:
        """Number of rows (``SELECT COUNT(*)``)."""
        stmt = self._count_stmt(None, (), None)
        return int(await self._run(False, lambda u: fetch_scalar(u, stmt, {})))

    @tracked("query")
    async def query(
        self,
        filter: Optional[FilterOptions] = None,
        sort: Optional[SortOptions] = None,
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[T]:
        """Filter, sort and paginate in SQL; ``total`` is counted only when the page does not reveal it."""
        items, total = await self._query_rows(filter, sort, limit, offset, self._spec.from_row)
        return PaginatedResult(items=items, limit=limit, offset=max(offset, 0), total=total)

    @tracked("query_json")
    async def query_json(
        self,
        filter: Optional[FilterOptions] = None,
        sort: Optional[SortOptions] = None,
        limit: int = -1,
        offset: int = 0,
    ) -> Tuple[List[str], int]:
        """:meth:`query` as ``(JSON text of each item, total)``, built from the stored columns (no models)."""
        spec = self._spec

        def convert(row: Any) -> str:
            text = spec.row_json(row)
            return text if text is not None else to_json(spec.from_row(row)).decode()

        return await self._query_rows(filter, sort, limit, offset, convert)

    async def _query_rows(
        self,
        filter: Optional[FilterOptions],
        sort: Optional[SortOptions],
        limit: int,
        offset: int,
        convert: Callable[[Any], Any],
    ) -> Tuple[List[Any], int]:
        marker, shape, values, nf = self._filter(filter)
        order = self._order_by(sort)
        offset = max(offset, 0)
        if marker is FALSE:
            return [], 0

        async def run(unit: Unit) -> Tuple[List[Any], int]:
            items: List[Any] = []
            if limit != 0:
                stmt = self._select(unit, marker, shape, nf, order, "param" if limit > 0 else "", offset > 0)
                rows = await unit.fetch(stmt, {**values, "lim": limit, "off": offset})
                if unit.optimistic:
                    unit.batch.guard_rows(self._spec, rows)  # type: ignore[union-attr]
                items = [convert(r) for r in rows]
                if (limit < 0 or len(items) < limit) and (items or offset == 0):
                    return items, offset + len(items)
            return items, int(await fetch_scalar(unit, self._count_stmt(marker, shape, nf), values))

        return await self._run(False, run)

    @tracked("get")
    async def get(self, filter: Optional[FilterOptions] = None, sort: Optional[SortOptions] = None) -> Optional[T]:
        """First match (``LIMIT 1``), or ``None``."""
        if sort is None:
            key = primary_key_of_filter(filter, self._spec.primary_keys)
            if key is not None:
                return await self._get_by_key(key)
        marker, shape, values, nf = self._filter(filter)
        order = self._order_by(sort)
        if marker is FALSE:
            return None

        async def run(unit: Unit) -> Optional[T]:
            stmt = self._select(unit, marker, shape, nf, order, "one", False)
            rows = await unit.fetch(stmt, values)
            if unit.optimistic:
                unit.batch.guard_rows(self._spec, rows)  # type: ignore[union-attr]
            return self._spec.from_row(rows[0]) if rows else None  # type: ignore[return-value]

        return await self._run(False, run)

    async def _get_by_key(self, key: Tuple[str, ...]) -> Optional[T]:
        """The row with primary key ``key`` (one cached statement; no filter normalisation or compilation)."""
        if self._unit is not None:
            return await self._fetch_by_key(self._unit, key)
        async with self._backend._unit_scope(write=False, snapshot=False, commit=False) as own:
            return await self._fetch_by_key(own, key)

    async def _fetch_by_key(self, unit: Unit, key: Tuple[str, ...]) -> Optional[T]:
        spec = self._spec
        batch = unit.batch
        if batch is not None:
            await batch.before_statement(unit, (spec.name,), False)
        for_update = unit.for_update
        versioned = unit.optimistic
        stmt = self._backend.stmts.get(
            ("get_by_key", spec.name, for_update, versioned), lambda: self._pk_select(for_update, versioned)
        )
        rows = await unit.fetch(stmt, self._pk_binds(key))
        if versioned:
            batch.guard_rows(spec, rows)  # type: ignore[union-attr]
        return spec.from_row(rows[0]) if rows else None  # type: ignore[return-value]

    def _pk_select(self, for_update: bool, versioned: bool) -> Any:
        stmt = sa.select(*self._columns(versioned)).where(self._pk_where()).limit(1)
        return stmt.with_for_update() if for_update else stmt

    async def query_json_present(self, status_in: Sequence[str], json_field: str, keys: Sequence[str]) -> List[T]:
        """Items whose ``status`` is in ``status_in`` and whose JSON ``json_field`` has a non-null value under any
        of ``keys`` (e.g. running rollouts with a timeout configured), in insertion order."""
        spec = self._spec
        t = spec.table
        statuses = list(status_in)
        for_update = self._unit is not None and self._unit.for_update

        def build() -> Any:
            col = t.c[json_field]
            present = [self._backend.sql_dialect.json_key_present(col, k) for k in keys]
            where = sa.and_(t.c.status.in_([bp(f"s{i}") for i in range(len(statuses))]), sa.or_(*present))
            stmt = sa.select(*spec.columns).where(where).order_by(spec.order_col)
            return stmt.with_for_update() if for_update else stmt

        stmt = self._stmt(("json_key_present", spec.name, len(statuses), json_field, tuple(keys), for_update), build)
        values = {f"s{i}": v for i, v in enumerate(statuses)}
        rows = await self._run(False, lambda u: u.fetch(stmt, values))
        return [spec.from_row(r) for r in rows]  # type: ignore[misc]

    # --- writes ------------------------------------------------------------------------------------------------

    @tracked("insert")
    async def insert(self, items: Sequence[T]) -> None:
        """Bulk insert; an existing or repeated primary key raises :class:`DuplicatedPrimaryKeyError` and the
        call has no effect at all."""
        self._check_items(items)
        self._wrote(items)
        if not items:
            return
        keys = [self._pk_values(i) for i in items]
        seen: set[Tuple[Any, ...]] = set()
        for key in keys:
            if key in seen:
                raise DuplicatedPrimaryKeyError(f"Duplicated primary key in payload: {_pk_repr(self._spec, key)}")
            seen.add(key)
        spec = self._spec
        rows = [spec.to_row(i) for i in items]
        deferring = self._deferring()
        if deferring is not None and await deferring.batch.insert(deferring, spec, keys, rows):  # type: ignore[union-attr]
            return
        bulk = BulkInsert(spec, keys, rows, self._insert_row_stmt, self._key_exists_stmt, self._delete_row_stmt)
        dup = await self._run(True, lambda unit: unit.insert_all_or_none(bulk))
        if dup is not None:
            raise DuplicatedPrimaryKeyError(f"Duplicated primary key: {_pk_repr(spec, dup)} already exists")

    def _insert_row_stmt(self) -> Any:
        """The ``INSERT`` of one row, bound by column name (the embedded database's bulk insert)."""
        spec = self._spec
        return self._stmt(
            ("insert", spec.name), lambda: sa.insert(spec.table).values({c: bp(c) for c in spec.column_names})
        )

    def _key_exists_stmt(self) -> Any:
        """Whether a row of the key bound by :meth:`_pk_where` exists."""
        return self._stmt(("key_exists", self._spec.name), lambda: sa.select(sa.literal(1)).where(self._pk_where()))

    def _delete_row_stmt(self) -> Any:
        """The ``DELETE`` of the row of the key bound by :meth:`_pk_where`."""
        spec = self._spec
        return self._stmt(("delete", spec.name), lambda: sa.delete(spec.table).where(self._pk_where()))

    def _missing(self, key: Sequence[Any]) -> ValueError:
        return ValueError(f"Item does not exist with primary key(s): {_pk_repr(self._spec, key)}")

    def _set_names(self, update_fields: Optional[Sequence[str]]) -> Tuple[str, ...]:
        """The columns an update or upsert writes: ``update_fields`` (checked, without the primary keys, each once)
        or all but the primary keys. Remembered per table and field list (a handful of lists recur)."""
        spec = self._spec
        key = None if update_fields is None else tuple(update_fields)
        names = spec.set_names.get(key)
        if names is not None:
            return names
        if key is None:
            names = tuple(c for c in spec.column_names if c not in spec.primary_keys)
        else:
            for name in key:
                if name not in spec.kinds:
                    raise ValueError(f"Field '{name}' does not exist on {spec.model.__name__}")
            names = tuple(dict.fromkeys(n for n in key if n not in spec.primary_keys))
        if len(spec.set_names) < 256:
            spec.set_names[key] = names
        return names

    @tracked("update")
    async def update(self, items: Sequence[T], update_fields: Optional[Sequence[str]] = None) -> Sequence[T]:
        """``UPDATE`` by primary key (all fields, or only ``update_fields``); returns the stored items (read back
        with ``RETURNING`` when only some fields are written)."""
        return await self._update(items, update_fields, update_fields is not None)

    @tracked("write_update")
    async def write_update(self, items: Sequence[T], update_fields: Optional[Sequence[str]] = None) -> None:
        """:meth:`update` without reading the stored items back (deferred in PostgreSQL fast-path units)."""
        await self._update(items, update_fields, False)

    async def _update(self, items: Sequence[T], update_fields: Optional[Sequence[str]], returning: bool) -> Sequence[T]:
        self._check_items(items)
        self._wrote(items)
        spec = self._spec
        names = self._set_names(update_fields)
        t = spec.table

        def build() -> Any:
            sets = {n: bp(f"v_{n}") for n in names} or {spec.primary_keys[0]: t.c[spec.primary_keys[0]]}
            stmt = sa.update(t).where(self._pk_where()).values(sets)
            return stmt.returning(*spec.columns) if returning else stmt

        deferring = None if returning else self._deferring()
        if deferring is not None:
            keys = [self._pk_values(item) for item in items]
            rows = [spec.to_row(item, names) for item in items]
            if await deferring.batch.update(deferring, spec, names, keys, rows):  # type: ignore[union-attr]
                return list(items)
        stmt = self._stmt(("update", spec.name, names, returning), build)

        async def run(unit: Unit) -> Sequence[T]:
            if returning:
                rows: List[Any] = []
                for item in items:
                    key = self._pk_values(item)
                    row = spec.to_row(item, names)
                    found = await unit.fetch(stmt, {**self._pk_binds(key), **{"v_" + n: row[n] for n in names}})
                    if not found:
                        raise self._missing(key)
                    rows.append(found[0])
                return RowItems(rows, spec.from_row)  # type: ignore[arg-type]
            for item in items:
                key = self._pk_values(item)
                row = spec.to_row(item, names)
                if await unit.execute(stmt, {**self._pk_binds(key), **{"v_" + n: row[n] for n in names}}) == 0:
                    raise self._missing(key)
            return list(items)

        return await self._run(True, run)

    @tracked("upsert")
    async def upsert(self, items: Sequence[T], update_fields: Optional[Sequence[str]] = None) -> Sequence[T]:
        """``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``; ``update_fields=[]`` is get-or-insert. Returns the
        stored items (read back when only some fields are written)."""
        return await self._upsert(items, update_fields, update_fields is not None)

    @tracked("write_upsert")
    async def write_upsert(self, items: Sequence[T], update_fields: Optional[Sequence[str]] = None) -> None:
        """:meth:`upsert` without reading the stored items back (deferred in PostgreSQL fast-path units)."""
        await self._upsert(items, update_fields, False)

    async def _upsert(self, items: Sequence[T], update_fields: Optional[Sequence[str]], returning: bool) -> Sequence[T]:
        self._check_items(items)
        self._wrote(items)
        spec = self._spec
        names = self._set_names(update_fields)
        t = spec.table

        def build() -> Any:
            ins = self._backend.sql_dialect.insert(t).values({c: bp(c) for c in spec.column_names})
            first = spec.primary_keys[0]
            sets = {n: ins.excluded[n] for n in names} or {first: t.c[first]}
            stmt = ins.on_conflict_do_update(index_elements=list(spec.primary_keys), set_=sets)
            return stmt.returning(*spec.columns) if returning else stmt

        deferring = None if returning else self._deferring()
        if deferring is not None:
            keys = [self._pk_values(item) for item in items]
            rows = [spec.to_row(item) for item in items]
            if await deferring.batch.upsert(deferring, spec, names, keys, rows):  # type: ignore[union-attr]
                return list(items)
        stmt = self._stmt(("upsert", spec.name, names, returning), build)

        async def run(unit: Unit) -> Sequence[T]:
            if returning:
                return RowItems([(await unit.fetch(stmt, spec.to_row(item)))[0] for item in items], spec.from_row)  # type: ignore[arg-type]
            for item in items:
                await unit.execute(stmt, spec.to_row(item))
            return list(items)

        return await self._run(True, run)

    @tracked("delete")
    async def delete(self, items: Sequence[T]) -> None:
        """``DELETE`` by primary key; a missing key raises ``ValueError``."""
        self._check_items(items)
        self._wrote(items)
        deferring = self._deferring()
        if deferring is not None and await deferring.batch.delete(  # type: ignore[union-attr]
            deferring, self._spec, [self._pk_values(item) for item in items]
        ):
            return
        stmt = self._stmt(("delete", self._spec.name), lambda: sa.delete(self._spec.table).where(self._pk_where()))

        async def run(unit: Unit) -> None:
            for item in items:
                key = self._pk_values(item)
                if await unit.execute(stmt, self._pk_binds(key)) == 0:
                    raise self._missing(key)

        await self._run(True, run)
