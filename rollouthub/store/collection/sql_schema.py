"""Schema of the SQL backend: URL handling, tables derived from the models, row codecs and versioned migrations.

Every model field is a real column. Scalar fields (``str``/``Literal`` -> text, ``int`` -> BIGINT, ``float`` ->
DOUBLE) are typed columns, indexed where the business logic filters or sorts on them; nested payloads (inputs,
configs, metadata, span attributes/events/links/contexts/resources, named resources, heartbeat stats) are JSON
(JSONB on PostgreSQL). Unknown (extra) span fields are kept in an ``extra`` JSON column.

The schema is versioned by the one-row table ``rollouthub_schema``; :data:`MIGRATIONS` lists forward migrations
(``from_version -> callable``). See ``docs/sql-backend.md``.
"""

from __future__ import annotations

import functools
import math
import time
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, List, Literal, Optional, Sequence, Tuple, Type

import sqlalchemy as sa
from pydantic import BaseModel
from pydantic_core import from_json, to_json
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from rollouthub.types import Attempt, ResourcesUpdate, Rollout, Span, Worker

from .sql_dialect import SqlDialect, json_dumps

__all__ = [
    "SCHEMA_VERSION",
    "SCHEMA_TABLE",
    "MIGRATIONS",
    "SchemaVersionError",
    "TableSpec",
    "SqlSchema",
    "normalize_database_url",
    "describe_url",
    "json_dumps",
]

SCHEMA_VERSION = 2
"""Version of the schema written by this code (2: no secondary indexes on attempts and spans, see ``MIGRATIONS``)."""

SCHEMA_TABLE = "rollouthub_schema"

Dialect = Literal["sqlite", "postgresql"]
Kind = Literal["str", "int", "float", "json"]


class SchemaVersionError(RuntimeError):
    """The database was written by an incompatible version of rollouthub."""


def normalize_database_url(url: str) -> Tuple[URL, Dialect]:
    """Rewrite ``sqlite:///``/``postgresql://`` URLs to their async drivers; return the URL and the dialect."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    driver = parsed.get_driver_name()
    if backend == "sqlite":
        if driver not in ("pysqlite", "aiosqlite"):
            raise ValueError(f"Unsupported SQLite driver {driver!r} in {describe_url(parsed)}; use sqlite+aiosqlite")
        database = parsed.database or ""
        if database in ("", ":memory:") or database.startswith("file::memory:") or "mode=memory" in str(parsed):
            raise ValueError(
                "In-memory SQLite databases are not supported by SqlLightningStore (every connection would see a "
                "different database); use a file path such as sqlite:///./rollouthub.db, or InMemoryLightningStore"
            )
        return parsed.set(drivername="sqlite+aiosqlite"), "sqlite"
    if backend in ("postgresql", "postgres"):
        if driver not in ("asyncpg", "psycopg2", "psycopg", "") and driver != backend:
            raise ValueError(f"Unsupported PostgreSQL driver {driver!r} in {describe_url(parsed)}; use asyncpg")
        try:
            import asyncpg  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "PostgreSQL support needs the asyncpg driver: pip install 'rollouthub[postgres]'"
            ) from exc
        return parsed.set(drivername="postgresql+asyncpg"), "postgresql"
    raise ValueError(f"Unsupported database URL {describe_url(parsed)}: use sqlite:///<path> or postgresql://...")


def describe_url(url: URL | str) -> str:
    """The URL with its password hidden (for messages and logs)."""
    parsed = make_url(url) if isinstance(url, str) else url
    return parsed.render_as_string(hide_password=True)


def _field_kind(annotation: Any) -> Kind:
    """Map a model field annotation to a column kind."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _field_kind(args[0])
        return "json"
    if origin is Literal:
        values = typing.get_args(annotation)
        return "str" if all(isinstance(v, str) for v in values) else "json"
    if annotation is str:
        return "str"
    if annotation is int:
        return "int"
    if annotation is float:
        return "float"
    return "json"


_EMPTY_JSON: Dict[type, str] = {list: "[]", dict: "{}", str: '""'}
"""JSON text of empty containers (what ``to_json`` would produce, without the call)."""


@dataclass
class TableSpec:
    """How one model is stored: table, column kinds, primary keys and the insertion-order column."""

    name: str
    model: Type[BaseModel]
    primary_keys: Tuple[str, ...]
    table: sa.Table
    fields: Tuple[str, ...]
    kinds: Dict[str, Kind]
    has_extra: bool
    order_col: Any = None
    columns: List[Any] = field(default_factory=list)
    decode_json: bool = True  # JSON columns come back as text from both drivers
    _json_layout: Optional[List[Tuple[str, str]]] = field(default=None, init=False, repr=False)
    set_names: Dict[Optional[Tuple[str, ...]], Tuple[str, ...]] = field(default_factory=dict, init=False, repr=False)
    """The columns written for an update's field list (``None``: all fields), see ``SqlCollection._set_names``."""

    @functools.cached_property
    def pk_positions(self) -> Tuple[int, ...]:
        """Positions of the primary-key fields in a row selected with :attr:`columns`."""
        return tuple(self.fields.index(k) for k in self.primary_keys)

    @functools.cached_property
    def pk_bind_names(self) -> Tuple[str, ...]:
        """Names of the bound parameters of the primary-key condition (``k_<field>``)."""
        return tuple(f"k_{k}" for k in self.primary_keys)

    def to_row(self, item: BaseModel, names: Optional[Sequence[str]] = None) -> Dict[str, Any]:
        """Driver-ready column values of ``item`` (JSON columns as JSON text, ``extra`` for unknown fields);
        only the columns ``names`` when given (e.g. the fields of a partial update)."""
        out: Dict[str, Any] = {}
        kinds = self.kinds
        values = item.__dict__
        for name in self.fields if names is None else names:
            if name == "extra":
                continue
            value = values[name]
            kind = kinds[name]
            if kind == "json":
                if value is None:
                    value = "null"
                elif not value and type(value) in _EMPTY_JSON:
                    value = _EMPTY_JSON[type(value)]  # e.g. a span's empty events/links
                else:
                    value = to_json(value).decode()
            elif kind == "float" and value is not None:
                value = float(value)
            out[name] = value
        if self.has_extra and (names is None or "extra" in names):
            extra = item.__pydantic_extra__
            out["extra"] = to_json(extra).decode() if extra else None
        return out

    def from_row(self, row: Sequence[Any]) -> BaseModel:
        """Build a model from a row selected with :attr:`columns` (same order)."""
        data: Dict[str, Any] = {}
        kinds = self.kinds
        decode = self.decode_json
        for name, value in zip(self.fields, row, strict=False):
            if decode and value is not None and kinds[name] == "json":
                value = from_json(value)
            data[name] = value
        if self.has_extra:
            extra = row[len(self.fields)]
            if extra:
                data.update(from_json(extra) if decode else extra)
        return self.model.__pydantic_validator__.validate_python(data)  # type: ignore[no-any-return]

    def row_json(self, row: Sequence[Any]) -> Optional[str]:
        """The JSON text of the model stored in ``row`` (selected with :attr:`columns`), equal to
        ``to_json(from_row(row))``, spliced from the stored JSON texts without building the model.

        ``None`` when a JSON column holds ``Infinity``/``NaN`` constants (the model serializes those as ``null``; the
        caller then takes the model path).
        """
        layout = self._json_layout
        if layout is None:
            layout = self._json_layout = [(f'"{name}":', self.kinds[name]) for name in self.fields]
        parts: List[str] = []
        append = parts.append
        for (prefix, kind), value in zip(layout, row, strict=False):
            if value is None:
                append(prefix + "null")
            elif kind == "json":
                if "Infinity" in value or "NaN" in value:
                    return None
                append(prefix + value)
            elif kind == "float":
                append(prefix + (to_json(value).decode() if math.isfinite(value) else "null"))
            elif kind == "int":
                append(prefix + str(int(value)))
            else:
                append(prefix + to_json(value).decode())
        if self.has_extra:
            extra = row[len(layout)]
            if extra:
                if "Infinity" in extra or "NaN" in extra:
                    return None
                inner = extra.strip()[1:-1].strip()
                if inner:
                    append(inner)
        return "{" + ",".join(parts) + "}"

    @property
    def column_names(self) -> List[str]:
        """Stored column names in select order (fields, then ``extra``)."""
        return [*self.fields, *(["extra"] if self.has_extra else [])]

    def column(self, name: str) -> Optional[sa.Column[Any]]:
        """The column of model field ``name`` (``None`` when the model has no such field)."""
        if name not in self.kinds:
            return None
        return self.table.c[name]


_MODELS: Tuple[Tuple[str, Type[BaseModel], Tuple[str, ...], Tuple[Tuple[str, ...], ...]], ...] = (
    ("rollouts", Rollout, ("rollout_id",), (("status",), ("start_time",))),
    # Every query of attempts and spans names the rollout (and usually the attempt): the primary-key index serves it
    # (the few rows of one rollout are sorted in memory), so no secondary index is maintained on the hot write path.
    ("attempts", Attempt, ("rollout_id", "attempt_id"), ()),
    ("spans", Span, ("rollout_id", "attempt_id", "span_id"), ()),
    ("resources", ResourcesUpdate, ("resources_id",), (("update_time",),)),
    ("workers", Worker, ("worker_id",), (("status",),)),
)


class SqlSchema:
    """All tables of one database, built for a dialect."""

    def __init__(self, sql_dialect: SqlDialect) -> None:
        self.sql_dialect = sql_dialect
        """The dialect the column types, the extra columns and the insertion order come from."""
        self.dialect = sql_dialect.name
        self.metadata = sa.MetaData()
        text_type: Any = sql_dialect.text_type()
        json_type: Any = sql_dialect.json_type()
        self.json_type = json_type
        self.specs: Dict[str, TableSpec] = {}
        for name, model, pks, indexes in _MODELS:
            kinds: Dict[str, Kind] = {}
            cols: List[sa.Column[Any]] = []
            for fname, finfo in model.model_fields.items():
                kind = _field_kind(finfo.annotation)
                kinds[fname] = kind
                col_type: Any = {"str": text_type, "int": sa.BigInteger(), "float": sa.Double(), "json": json_type}[
                    kind
                ]
                nullable = fname not in pks
                cols.append(sa.Column(fname, col_type, primary_key=fname in pks, nullable=nullable))
            has_extra = bool(model.model_config.get("extra") == "allow")
            if has_extra:
                cols.append(sa.Column("extra", json_type, nullable=True))
            cols.extend(sql_dialect.extra_columns())
            table = sa.Table(name, self.metadata, *cols)
            for idx_cols in indexes:
                sa.Index(f"ix_{name}_{'_'.join(idx_cols)}", *[table.c[c] for c in idx_cols])
            order_col = sql_dialect.insertion_order(table)
            spec = TableSpec(
                name=name,
                model=model,
                primary_keys=pks,
                table=table,
                fields=tuple(kinds),
                kinds=kinds,
                has_extra=has_extra,
                order_col=order_col,
            )
            spec.columns = [table.c[f] for f in spec.fields] + ([table.c["extra"]] if has_extra else [])
            self.specs[name] = spec
        self.queue = sa.Table(
            "rollout_queue",
            self.metadata,
            sa.Column(
                "seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
            ),
            sa.Column("value", text_type, nullable=False),
            sa.Index("ix_rollout_queue_value", "value"),
        )
        self.kv = sa.Table(
            "span_sequence_ids",
            self.metadata,
            sa.Column("key", text_type, primary_key=True),
            sa.Column("num", sa.BigInteger(), nullable=True),
            sa.Column("value", json_type, nullable=True),
        )
        self.text_type = text_type
        self.version_table = sa.Table(
            SCHEMA_TABLE,
            self.metadata,
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
            sa.Column("version", sa.Integer(), nullable=False),
            sa.Column("updated_at", sa.Double(), nullable=False),
        )


Migration = Callable[[AsyncConnection, SqlSchema], Awaitable[None]]

_DROPPED_IN_V2 = (
    "ix_attempts_rollout_id_sequence_id",
    "ix_attempts_status",
    "ix_attempts_worker_id",
    "ix_spans_rollout_id_sequence_id",
)


async def _v1_to_v2(conn: AsyncConnection, schema: SqlSchema) -> None:
    """Drop the secondary indexes of attempts and spans: no query needs them (the primary key serves every lookup by
    rollout) and each one cost a page write per transaction on the hot path (a span batch, a claim, an update)."""
    for name in _DROPPED_IN_V2:
        await conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")


MIGRATIONS: Dict[int, Migration] = {1: _v1_to_v2}
"""Forward migrations: ``MIGRATIONS[v]`` upgrades a database from version ``v`` to ``v + 1`` (inside one
transaction). Version 1 was the first released schema; 2 dropped the secondary indexes of attempts and spans."""


async def ensure_schema(
    conn: AsyncConnection,
    schema: SqlSchema,
    where: str,
    *,
    target_version: Optional[int] = None,
    migrations: Optional[Dict[int, Migration]] = None,
) -> int:
    """Create or migrate the schema inside the caller's (write) transaction; returns the final version.

    ``where`` names the database in error messages. Raises :class:`SchemaVersionError` when the database is newer
    than ``target_version`` or cannot be migrated.
    """
    target = SCHEMA_VERSION if target_version is None else target_version
    steps = MIGRATIONS if migrations is None else migrations
    for statement in schema.sql_dialect.schema_lock_statements():
        await conn.exec_driver_sql(statement)
    existing = set(await conn.run_sync(lambda c: sa.inspect(c).get_table_names()))
    vt = schema.version_table
    if SCHEMA_TABLE not in existing:
        ours = {t for t in schema.metadata.tables if t != SCHEMA_TABLE}
        clash = sorted(existing & ours)
        if clash:
            raise SchemaVersionError(
                f"Database {where} has tables {clash} but no {SCHEMA_TABLE} table: it was not created by rollouthub "
                f"(or by a pre-release without schema versioning). Use another database or drop these tables."
            )
        await conn.run_sync(schema.metadata.create_all)
        await conn.execute(sa.insert(vt).values(id=1, version=target, updated_at=time.time()))
        return target
    version: Optional[int] = (await conn.execute(sa.select(vt.c.version).where(vt.c.id == 1))).scalar()
    if version is None:
        raise SchemaVersionError(f"Database {where} has an empty {SCHEMA_TABLE} table; cannot tell its schema version")
    if version > target:
        raise SchemaVersionError(
            f"Database {where} has schema version {version}, but this rollouthub supports schema version {target} "
            f"at most: upgrade rollouthub (or use another database)."
        )
    while version < target:
        step = steps.get(version)
        if step is None:
            raise SchemaVersionError(
                f"Database {where} has schema version {version} and no migration to version {version + 1} exists "
                f"(supported: {target})."
            )
        await step(conn, schema)
        version += 1
        await conn.execute(sa.update(vt).where(vt.c.id == 1).values(version=version, updated_at=time.time()))
    # Tables added after the first release are created by their migration; create_all is a no-op safety net.
    await conn.run_sync(lambda c: schema.metadata.create_all(c, checkfirst=True))
    return version
