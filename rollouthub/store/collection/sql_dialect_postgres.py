"""PostgreSQL's named SQL operations (see :class:`~.sql_dialect.SqlDialect` for what each one is).

JSON lives in JSONB columns; text columns compare bytewise (collation ``C``); rows keep their insertion order in an
identity column ``_order``; connections are asyncpg's, with the session settings the URL and the backend ask for.

The fast path is PostgreSQL's alone, so its statements are the plain functions at the end of this module: those of
its compound reads (:mod:`.sql_compound`), and every piece of its write statement (:mod:`.sql_batch`), from the
guards of the rows a unit read to each deferred write (``deferred_..._sql``) and the whole statement
(:func:`write_statement_sql`). Its callers keep the data, the parameters and the control flow.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL

from .sql_dialect import ParamBinder, SqlDialect, UrlOptions, json_dumps
from .sql_schema import TableSpec

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


# --- the fast path's write statement (:mod:`.sql_batch`) -------------------------------------------------------------
# One statement of data-modifying CTEs: ``WITH g_<table> AS (...), ok AS (...), w0 AS (...), ... SELECT ...``. Each
# builder below makes one piece of it; parameters are numbered from ``first`` (``$first``, ``$first + 1``, ...), in the
# order the batch binds them. ``ok`` is the guard condition a deferred write runs under (:data:`GUARD_OK`), or ``""``
# when the statement has no guard.

GUARD_OK = "(SELECT ok FROM ok)"
"""The guard condition of a write statement that has guards: the value of its ``ok`` CTE (:func:`guard_ok_cte_sql`)."""

_PG_SCALAR = {"str": "text", "int": "int8", "float": "float8", "json": "jsonb"}
"""The scalar type of each column kind (parameters of a one-row source)."""


def _where(ok: str) -> str:
    """`` WHERE <ok>`` (nothing without a guard)."""
    return f" WHERE {ok}" if ok else ""


def _and(ok: str) -> str:
    """`` AND <ok>`` (nothing without a guard)."""
    return f" AND {ok}" if ok else ""


def _kinds_of(columns: Sequence[str], kinds: Mapping[str, str]) -> List[str]:
    """The kind of each column (``json`` when ``kinds`` does not name it)."""
    return [kinds.get(c, "json") for c in columns]


def _key_join(primary_keys: Sequence[str], source_columns: Optional[Sequence[str]] = None) -> str:
    """The join of a table ``t`` to a values source ``v`` by primary key: ``t."<key>" = v."<column>" AND ...``, the
    source's key columns named like the keys unless ``source_columns`` names them."""
    columns = primary_keys if source_columns is None else source_columns
    return " AND ".join(f"t.{quote(key)} = v.{quote(c)}" for key, c in zip(primary_keys, columns, strict=True))


def _set_columns(names: Sequence[str], source: str, primary_keys: Sequence[str]) -> str:
    """``SET`` of the columns ``names`` from the row alias ``source`` (``v``, ``excluded``); without ``names``, the
    first key set to itself (the statement then only finds, or keeps, the rows)."""
    first_key = quote(primary_keys[0])
    return ", ".join(f"{quote(n)} = {source}.{quote(n)}" for n in names) or f"{first_key} = t.{first_key}"


def values_source_sql(first: int, columns: Sequence[str], kinds: Sequence[str], single: bool) -> str:
    """Rows of ``columns`` (of the given ``kinds``) as a table ``v``, from parameters ``$first, ...``: ``single``,
    one row of scalars ``(SELECT $1::text AS "c", ...) AS v`` (cheaper to send and to plan than arrays); otherwise
    ``unnest($1::text[], ...) AS v("c", ...)``, one array per column."""
    if single:
        values = ", ".join(
            f"${first + i}::{_PG_SCALAR[kind]} AS {quote(c)}"
            for i, (c, kind) in enumerate(zip(columns, kinds, strict=True))
        )
        return f"(SELECT {values}) AS v"
    arrays = ", ".join(f"${first + i}::{PG_ARRAY[kind]}" for i, kind in enumerate(kinds))
    return f"unnest({arrays}) AS v({select_list(columns)})"


def deferred_insert_sql(spec: TableSpec, single: bool, first: int, ok: str) -> str:
    """Insert the rows of :func:`values_source_sql` (all columns) into the table of ``spec`` (under the guard ``ok``)."""
    columns = spec.column_names
    source = values_source_sql(first, columns, _kinds_of(columns, spec.kinds), single)
    return f"INSERT INTO {quote(spec.name)} ({select_list(columns)}) SELECT * FROM {source}{_where(ok)}"


def deferred_update_sql(spec: TableSpec, names: Sequence[str], single: bool, first: int, ok: str) -> str:
    """Set the columns ``names`` of the rows of ``spec``'s table to the values of :func:`values_source_sql` (of
    columns: the primary keys, then ``names``), joined by primary key (under the guard ``ok``); returns the keys of the
    rows updated. No ``names``: the first key is set to itself (the rows are only checked to exist)."""
    primary_keys = spec.primary_keys
    columns = [*primary_keys, *names]
    source = values_source_sql(first, columns, _kinds_of(columns, spec.kinds), single)
    return (
        f"UPDATE {quote(spec.name)} AS t SET {_set_columns(names, 'v', primary_keys)} FROM {source} "
        f"WHERE {_key_join(primary_keys)}{_and(ok)} "
        f"RETURNING {select_list(primary_keys, 't')}"
    )


def deferred_upsert_sql(spec: TableSpec, names: Sequence[str], single: bool, first: int, ok: str) -> str:
    """Insert the rows of :func:`values_source_sql` (all columns) into the table of ``spec`` (under the guard ``ok``);
    a row whose key exists gets the columns ``names`` instead (none: the first key is set to itself)."""
    columns, primary_keys = spec.column_names, spec.primary_keys
    sets = _set_columns(names, "excluded", primary_keys)
    source = values_source_sql(first, columns, _kinds_of(columns, spec.kinds), single)
    return (
        f"INSERT INTO {quote(spec.name)} AS t ({select_list(columns)}) SELECT * FROM {source}{_where(ok)} "
        f"ON CONFLICT ({select_list(primary_keys)}) DO UPDATE SET {sets}"
    )


def deferred_delete_sql(spec: TableSpec, single: bool, first: int, ok: str) -> str:
    """Delete the rows of ``spec``'s table whose (text) keys are the rows of :func:`values_source_sql` (under the
    guard ``ok``); returns the keys of the rows deleted."""
    primary_keys = spec.primary_keys
    source = values_source_sql(first, primary_keys, ["str"] * len(primary_keys), single)
    return (
        f"DELETE FROM {quote(spec.name)} AS t USING {source} WHERE {_key_join(primary_keys)}{_and(ok)} "
        f"RETURNING {select_list(primary_keys, 't')}"
    )


def deferred_enqueue_sql(single: bool, first: int, ok: str) -> str:
    """Append to the queue (under the guard ``ok``) the text ``$first`` (``single``) or the texts of the array
    ``$first``, in array order; returns the ``seq`` of each entry."""
    if single:
        return f"INSERT INTO rollout_queue (value) SELECT ${first}::text{_where(ok)} RETURNING seq"
    return (
        f"INSERT INTO rollout_queue (value) SELECT u.v FROM unnest(${first}::text[]) WITH ORDINALITY AS u(v, i)"
        f"{_where(ok)} ORDER BY u.i RETURNING seq"
    )


def deferred_raise_counters_sql(first: int, ok: str) -> str:
    """Raise each counter of the key array ``$first`` to at least its number in the array ``$first + 1`` (under the
    guard ``ok``): one conditional upsert per key (a counter holding a value instead of a number is left alone)."""
    return (
        f"INSERT INTO span_sequence_ids AS t (key, num, value) SELECT v.k, v.n, NULL FROM "
        f"unnest(${first}::text[], ${first + 1}::int8[]) AS v(k, n){_where(ok)} ON CONFLICT (key) DO UPDATE "
        "SET num = excluded.num WHERE t.num IS NOT NULL AND t.num < excluded.num"
    )


def deferred_set_counter_sql(create: bool, first: int, ok: str) -> str:
    """Set counter ``$first`` to the number ``$first + 1`` (under the guard ``ok``): ``create``, an ``INSERT`` without
    ``ON CONFLICT`` (a concurrent creation fails the statement); otherwise an ``UPDATE`` of its row."""
    if create:
        return f"INSERT INTO span_sequence_ids (key, num, value) SELECT ${first}::text, ${first + 1}::int8, NULL{_where(ok)}"
    return f"UPDATE span_sequence_ids SET num = ${first + 1}::int8 WHERE key = ${first}::text{_and(ok)}"


def deferred_queue_delete_sql(first: int, ok: str) -> str:
    """Delete the queue entries whose ``seq`` is in the array ``$first`` (under the guard ``ok``)."""
    return f"DELETE FROM rollout_queue WHERE seq = ANY(${first}::int8[]){_and(ok)}"


def deferred_notify_sql(first: int, ok: str) -> str:
    """Notify channel ``$first`` with payload ``$first + 1`` (under the guard ``ok``; sent when the statement's
    transaction commits)."""
    return f"SELECT pg_notify(${first}, ${first + 1}){_where(ok)}"


def row_guard_cte_sql(
    table: str, primary_keys: Sequence[str], key_kinds: Sequence[str], single: bool, first: int
) -> str:
    """The CTE ``g_<table>``: lock (``FOR UPDATE``) the rows of ``table`` an optimistic unit read whose version is
    unchanged. Its source (:func:`values_source_sql`) has one column ``k<i>`` per primary key (of ``key_kinds``) and
    the version read ``x`` (``NULL``: any version; only the row's existence matters)."""
    keys = [f"k{i}" for i in range(len(primary_keys))]
    source = values_source_sql(first, [*keys, "x"], [*key_kinds, "str"], single)
    return (
        f"g_{table} AS (SELECT 1 FROM {quote(table)} AS t JOIN {source} "
        f'ON {_key_join(primary_keys, keys)} AND (v."x" IS NULL OR t.xmin::text = v."x") FOR UPDATE OF t)'
    )


def row_guard_check_sql(table: str, param: int) -> str:
    """Whether the CTE ``g_<table>`` (:func:`row_guard_cte_sql`) found all its rows: their number is ``$param``."""
    return f"(SELECT count(*) FROM g_{table}) = ${param}"


def latest_resources_check_sql(param: int) -> str:
    """Whether the version of the latest resources snapshot is still ``$param`` (``NULL``: there is still none)."""
    return f"(SELECT xmin::text FROM resources {LATEST_RESOURCES_ORDER}) IS NOT DISTINCT FROM ${param}::text"


def queue_head_check_sql(first: int) -> str:
    """Whether the queue entry ``$first`` is the head of the queue, but for the entries of the array ``$first + 1``
    (those other claims of this process are taking)."""
    return f"NOT EXISTS (SELECT 1 FROM rollout_queue WHERE seq < ${first}::int8 AND seq <> ALL(${first + 1}::int8[]))"


def guard_ok_cte_sql(checks: Sequence[str]) -> str:
    """The CTE ``ok``: whether every check holds (referred to as :data:`GUARD_OK`)."""
    return f"ok AS (SELECT {' AND '.join(checks)} AS ok)"


def guard_result_sql(ok: str) -> str:
    """The first output of a write statement: whether its guard held (``true`` without a guard)."""
    return ok or "true"


def write_cte_sql(index: int, statement: str) -> str:
    """The deferred write ``statement`` as the CTE ``w<index>``."""
    return f"w{index} AS ({statement})"


def write_rows_sql(index: int) -> str:
    """An output of a write statement: the rows the CTE ``w<index>`` returns, as one array of records (a ``SELECT`` in
    a ``WITH`` clause only runs when referenced)."""
    return f"(SELECT array_agg(ROW(w{index}.*)) FROM w{index})"


def written_version_sql(ok: str) -> str:
    """An output of a write statement: the version its writes give their rows -- the (32-bit) id of the statement's
    transaction, as text; ``NULL`` when the guard ``ok`` failed."""
    return f"CASE WHEN {guard_result_sql(ok)} THEN (pg_current_xact_id()::text::int8 % 4294967296)::text END"


def write_statement_sql(parts: Sequence[str], outputs: Sequence[str]) -> str:
    """The write statement: the CTEs ``parts`` (guards, ``ok``, writes), then one row of ``outputs``."""
    return f"WITH {', '.join(parts)} SELECT {', '.join(outputs)}"
