"""PostgreSQL's named SQL operations (see :class:`~.sql_dialect.SqlDialect` for what each one is).

JSON lives in JSONB columns; text columns compare bytewise (collation ``C``); rows keep their insertion order in an
identity column ``_order``; connections are asyncpg's, with the session settings the URL and the backend ask for.

The fast path is PostgreSQL's alone: the statements of its compound reads (:mod:`.sql_compound`) are the plain
functions at the end of this module; its write statement (:mod:`.sql_batch`) is assembled from fragments of each
deferred write and guard, built with :data:`PG_ARRAY`, :func:`quote` and :data:`LATEST_RESOURCES_ORDER` from here.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL

from .sql_dialect import ParamBinder, SqlDialect, UrlOptions, json_dumps

__all__ = [
    "LATEST_RESOURCES_ORDER",
    "PG_ARRAY",
    "PG_SCHEMA_LOCK_KEY",
    "PostgresDialect",
    "claim_rollouts_sql",
    "dequeue_rollouts_sql",
    "latest_resources_sql",
    "quote",
    "rollout_and_attempts_sql",
    "select_list",
]

PG_ARRAY = {"str": "text[]", "int": "int8[]", "float": "float8[]", "json": "jsonb[]"}
"""The array type of each column kind (parameters of ``unnest``)."""

PG_SCHEMA_LOCK_KEY = 0x726F6C6C  # "roll": advisory lock serialising schema creation across processes

_URL_OPTIONS = ("application_name", "schema", "pool_size", "max_overflow")


LATEST_RESOURCES_ORDER = "ORDER BY update_time DESC NULLS FIRST, _order LIMIT 1"
"""The order of ``resources.get(sort=update_time desc)`` (see :mod:`.sql_filters`), as the compound read and the
cache guard of the fast path use it."""


def quote(name: str) -> str:
    """A quoted identifier."""
    return f'"{name}"'


def select_list(columns: Sequence[str], alias: str = "") -> str:
    """``columns`` quoted and comma-separated, each prefixed with ``alias.`` when given."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + quote(c) for c in columns)


class PostgresDialect(SqlDialect):
    """PostgreSQL (a server, through asyncpg)."""

    name = "postgresql"
    has_fast_path = True
    conditional_upsert_locks_row = True

    def text_type(self) -> Any:
        """``VARCHAR COLLATE "C"`` (bytewise order, as Python compares strings)."""
        return sa.String(collation="C")

    def json_type(self) -> Any:
        """``JSONB`` (a JSON ``null`` stays a JSON value, not SQL ``NULL``)."""
        return postgresql.JSONB(none_as_null=False)

    def extra_columns(self) -> List[sa.Column[Any]]:
        """The identity column ``_order`` (insertion order)."""
        return [sa.Column("_order", sa.BigInteger(), sa.Identity(), nullable=False)]

    def insertion_order(self, table: sa.Table) -> Any:
        """The ``_order`` column."""
        return table.c["_order"]

    def schema_lock_statements(self) -> List[str]:
        """Take the transaction-scoped advisory lock :data:`PG_SCHEMA_LOCK_KEY` (concurrent first opens wait)."""
        return [f"SELECT pg_advisory_xact_lock({PG_SCHEMA_LOCK_KEY})"]

    def open_schema_work(self, schema: Optional[str]) -> List[str]:
        """With a ``schema``: create it when missing, under the schema lock in the same transaction (concurrent first
        opens must not race)."""
        if not schema:
            return []
        return [*self.schema_lock_statements(), f'CREATE SCHEMA IF NOT EXISTS "{schema}"']

    def insert(self, table: sa.Table) -> Any:
        """PostgreSQL's ``INSERT`` construct."""
        return postgresql.insert(table)

    def larger_of(self, left: Any, right: Any) -> Any:
        """``greatest(a, b)``."""
        return sa.func.greatest(left, right)

    def text_contains(self, haystack: Any, needle: Any) -> Any:
        """``strpos(haystack, needle) > 0``."""
        return sa.func.strpos(haystack, needle) > 0

    def json_param_type(self) -> Any:
        """``JSONB``."""
        return postgresql.JSONB()

    def json_contains(self, b: ParamBinder, column: Any, expected: Any, category: str) -> Any:
        """``@>`` on an array, ``?`` on an object's keys, ``strpos`` in a JSON string (``#>> '{}'``)."""
        arr = b.p(json_dumps(expected), postgresql.JSONB())
        key = b.p(expected, sa.Text()) if category == "str" else None
        sub = b.p(expected, sa.Text()) if category == "str" else None
        if b.dry:
            return None
        typ = sa.func.jsonb_typeof(column)
        conds = [sa.and_(typ == "array", column.op("@>")(sa.func.jsonb_build_array(arr)))]
        if category == "str":
            conds.append(sa.and_(typ == "object", column.op("?")(key)))
            text = column.op("#>>")(sa.literal_column("'{}'"))
            conds.append(sa.and_(typ == "string", self.text_contains(text, sub)))
        return sa.or_(*conds)

    def json_key_present(self, column: Any, key: str) -> Any:
        """``column ->> 'key' IS NOT NULL``."""
        return column.op("->>")(sa.literal_column(f"'{key}'")).is_not(None)

    def lock_claimed_rows(self, select: Any) -> Any:
        """``FOR UPDATE SKIP LOCKED``: concurrent claims take different entries."""
        return select.with_for_update(skip_locked=True)

    def row_version(self, table_name: str) -> Any:
        """``xmin`` as text (changes with every write of the row)."""
        return sa.literal_column(f'"{table_name}".xmin::text')

    def insert_skipping_conflicts(
        self, table_name: str, columns: Sequence[str], kinds: Mapping[str, str], primary_keys: Sequence[str]
    ) -> str:
        """``INSERT ... SELECT * FROM unnest($1::type[], ...) ON CONFLICT DO NOTHING RETURNING <keys>``."""
        arrays = ", ".join(f"${i + 1}::{PG_ARRAY[kinds.get(c, 'json')]}" for i, c in enumerate(columns))
        return (
            f'INSERT INTO "{table_name}" ({select_list(columns)}) SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING '
            f"RETURNING {select_list(primary_keys)}"
        )

    def enqueue_many(self) -> str:
        """``INSERT ... SELECT v FROM unnest($1::text[]) WITH ORDINALITY ... ORDER BY i`` (keeps the order)."""
        return (
            "INSERT INTO rollout_queue (value) SELECT v FROM unnest($1::text[]) WITH ORDINALITY AS u(v, i) ORDER BY i"
        )

    def notify(self) -> str:
        """``pg_notify($1, $2)``."""
        return "SELECT pg_notify($1, $2)"

    def take_url_options(self, url: URL, schema: Optional[str], pool_size: int, max_overflow: int) -> UrlOptions:
        """``?application_name=`` (default ``rollouthub``, so that ``pg_stat_activity`` tells the store's
        connections apart), ``?schema=`` (unless ``schema`` is given; becomes the ``search_path``), ``?pool_size=``
        and ``?max_overflow=``."""
        query = url.query
        settings = {"application_name": str(query.get("application_name") or "rollouthub")}
        if schema is None and query.get("schema"):
            schema = str(query["schema"])
        for name in ("pool_size", "max_overflow"):
            if name in query:
                try:
                    value = int(str(query[name]))
                except ValueError:
                    raise ValueError(f"{name} in the database URL must be an integer, got {query[name]!r}") from None
                if value < (1 if name == "pool_size" else 0):
                    raise ValueError(f"{name} in the database URL is out of range: {value}")
                if name == "pool_size":
                    pool_size = value
                else:
                    max_overflow = value
        url = url.difference_update_query(list(_URL_OPTIONS))
        if schema:
            settings["search_path"] = schema
        return url, settings, schema, pool_size, max_overflow

    def engine_connect_args(self, busy_timeout: float, server_settings: Mapping[str, str]) -> Dict[str, Any]:
        """The session settings."""
        return {"server_settings": dict(server_settings)}

    def driver_factory(
        self, url: URL, busy_timeout: float, synchronous: str, inline: bool, server_settings: Mapping[str, str]
    ) -> Callable[[], Awaitable[Any]]:
        """asyncpg connections with the session settings."""
        import asyncpg

        dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        settings = dict(server_settings)

        async def connect() -> Any:
            return await asyncpg.connect(dsn, server_settings=settings)

        return connect


# --- the fast path's compound reads (:mod:`.sql_compound`) ------------------------------------------------------------
# ``one``: ``LIMIT 1`` as a literal (the usual claim): PostgreSQL then keeps one generic plan instead of planning each
# time; otherwise the limit is parameter ``$1``.


def dequeue_rollouts_sql(rollout_columns: Sequence[str], one: bool) -> str:
    """Pop the head of the queue (``FOR UPDATE SKIP LOCKED``), lock the rollouts and count their attempts: rows of
    ``(value, attempt count, rollout found, rollout columns..., seq)`` in queue order."""
    return (
        f"WITH p AS (DELETE FROM rollout_queue WHERE seq IN (SELECT seq FROM rollout_queue ORDER BY seq LIMIT "
        f"{'1' if one else '$1'} FOR UPDATE SKIP LOCKED) RETURNING seq, value), "
        f"r AS (SELECT {select_list(rollout_columns)} FROM rollouts WHERE rollout_id IN (SELECT value FROM p) FOR UPDATE) "
        "SELECT p.value, (SELECT count(*) FROM attempts a WHERE a.rollout_id = p.value), "
        f"r.rollout_id IS NOT NULL, {select_list(rollout_columns, 'r')}, p.seq FROM p LEFT JOIN r "
        "ON r.rollout_id = p.value ORDER BY p.seq"
    )


def claim_rollouts_sql(rollout_columns: Sequence[str], one: bool) -> str:
    """Read the head of the queue without locking: rows of ``(seq, value, attempt count, rollout found, rollout
    columns..., rollout version)`` in queue order."""
    return (
        f"WITH p AS (SELECT seq, value FROM rollout_queue ORDER BY seq LIMIT {'1' if one else '$1'}) "
        "SELECT p.seq, p.value, (SELECT count(*) FROM attempts a WHERE a.rollout_id = p.value), "
        f"r.rollout_id IS NOT NULL, {select_list(rollout_columns, 'r')}, r.xmin::text "
        "FROM p LEFT JOIN rollouts r ON r.rollout_id = p.value ORDER BY p.seq"
    )


def latest_resources_sql(resource_columns: Sequence[str]) -> str:
    """The latest resources snapshot with its version (no row: none)."""
    return f"SELECT {select_list(resource_columns)}, xmin::text FROM resources {LATEST_RESOURCES_ORDER}"


def rollout_and_attempts_sql(
    rollout_columns: Sequence[str], attempt_columns: Sequence[str], lock: bool, versioned: bool
) -> str:
    """Rollout ``$1``, its latest attempt and its attempt ``$2`` in one row: three found flags, then the columns of
    each (each followed by its version when ``versioned``); ``lock``: ``FOR UPDATE``."""
    lock_clause = " FOR UPDATE" if lock else ""
    version = ", xmin::text AS x" if versioned else ""
    rcols = select_list(rollout_columns)
    acols = select_list(attempt_columns)
    return (
        f"WITH r AS (SELECT {rcols}{version} FROM rollouts WHERE rollout_id = $1{lock_clause}), "
        f"l AS (SELECT {acols}{version} FROM attempts WHERE rollout_id = $1 "
        f"ORDER BY sequence_id DESC NULLS LAST, _order LIMIT 1{lock_clause}), "
        f"a AS (SELECT {acols}{version} FROM attempts WHERE rollout_id = $1 AND attempt_id = $2{lock_clause}) "
        "SELECT r.rollout_id IS NOT NULL, l.rollout_id IS NOT NULL, a.rollout_id IS NOT NULL, r.*, l.*, a.* "
        "FROM (SELECT 1) AS one LEFT JOIN r ON true LEFT JOIN l ON true LEFT JOIN a ON true"
    )
