"""Units of work of the SQL backend: one pooled driver connection, its transaction, and cached compiled statements.

SQLAlchemy defines the schema, runs DDL/migrations and compiles every statement *shape* once
(:class:`StatementCache`); a unit then executes the cached SQL text on a pooled driver connection (a
:class:`~.sql_sqlite.SqliteDriver` or an ``asyncpg.Connection``) taken from a small per-event-loop
:class:`DriverPool`. This removes SQLAlchemy's per-statement construction, cache-key, execution-context and
greenlet costs, and its per-checkout pool events (together about 1.5 ms per unit on the reference 2-core machine --
several times the cost of the SQLite statements themselves).
"""

from __future__ import annotations

import asyncio
import contextvars
import sqlite3
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from sqlalchemy.exc import DBAPIError

from .sql_batch import WriteBatch
from .sql_schema import TableSpec

if TYPE_CHECKING:
    from .sql import SqlLightningCollections

__all__ = ["BulkInsert", "StatementCache", "Unit", "ACTIVE_UNIT", "is_transient_error"]

_RETRY_SQLSTATES = {"40001", "40P01"}


def is_transient_error(exc: BaseException) -> bool:
    """Whether re-running the unit may succeed (serialization failure, deadlock, SQLite busy/locked)."""
    if isinstance(exc, DBAPIError):
        exc = exc.orig if exc.orig is not None else exc
    code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    if code in _RETRY_SQLSTATES:
        return True
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        return "locked" in text or "busy" in text
    return False


Compiled = Tuple[str, Tuple[str, ...], Dict[str, Any]]


class StatementCache:
    """Compiled SQL per statement shape: ``key -> (sql text, positional parameter names, default values)``."""

    def __init__(self) -> None:
        self._cache: Dict[Any, Compiled] = {}
        self.dialect: Any = None

    def reset(self, dialect: Any) -> None:
        """Compile with ``dialect`` from now on (drops what was compiled before)."""
        self.dialect = dialect
        self._cache = {}

    def get(self, key: Any, build: Callable[[], Any]) -> Compiled:
        """The compiled form of ``build()`` (compiled on the first request for ``key``)."""
        hit = self._cache.get(key)
        if hit is None:
            compiled = build().compile(dialect=self.dialect, compile_kwargs={"render_postcompile": True})
            names = tuple(compiled.positiontup or ())
            hit = (compiled.string, names, dict(compiled.params))
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    @staticmethod
    def params(compiled: Compiled, values: Dict[str, Any]) -> List[Any]:
        """Positional parameters for one execution."""
        _, names, defaults = compiled
        return [values[n] if n in values else defaults[n] for n in names]


class BulkInsert(NamedTuple):
    """A bulk insert that stores every row or none (:meth:`Unit.insert_all_or_none`): the table, its rows (column
    values by column name) and their keys, and the statements the unit may need -- each built on first use (through
    the statement cache), as only one kind of database needs it."""

    spec: TableSpec
    keys: Sequence[Tuple[Any, ...]]
    rows: Sequence[Dict[str, Any]]
    insert_row: Callable[[], Compiled]
    """Embedded database: the ``INSERT`` of one row (bound by column name), run once per row with ``executemany``."""
    key_exists: Callable[[], Compiled]
    """Embedded database: whether a key exists (bound by the primary key bind names), to name the key that did."""
    delete_row: Callable[[], Compiled]
    """Database server: the ``DELETE`` of one row by key, undoing the unit's own rows when a key existed."""


class DriverPool:
    """A minimal pool of driver connections for one event loop (at most ``max_size`` open at once).

    Also carries the event loop's SQLite write lock (:attr:`write_lock`), so that a unit finds both with one lookup.
    """

    def __init__(self, factory: Callable[[], Any], max_size: int, write_lock: asyncio.Lock) -> None:
        self._factory = factory
        self._idle: List[Any] = []
        self._sem = asyncio.Semaphore(max_size)
        self._all: List[Any] = []
        self.write_lock = write_lock
        """SQLite: the lock ordering this loop's writers of the database file."""

    async def acquire(self) -> Any:
        """An idle connection, or a new one (waits while ``max_size`` are in use)."""
        sem = self._sem
        await sem.acquire()
        try:
            idle = self._idle
            while idle:
                conn = idle.pop()
                if self._alive(conn):
                    return conn
            conn = await self._factory()
            self._all.append(conn)
            return conn
        except BaseException:
            sem.release()
            raise

    @staticmethod
    def _alive(conn: Any) -> bool:
        return not conn.is_closed()

    def release(self, conn: Any, broken: bool = False) -> None:
        """Return a connection; a broken one is closed instead."""
        try:
            if broken or not self._alive(conn):
                self._discard(conn)
            else:
                self._idle.append(conn)
        finally:
            self._sem.release()

    def _discard(self, conn: Any) -> None:
        if conn in self._all:
            self._all.remove(conn)
        conn.terminate()

    async def close(self) -> None:
        """Close every connection of the pool."""
        conns, self._all, self._idle = self._all, [], []
        for conn in conns:
            try:
                await conn.close()
            except Exception:  # pragma: no cover - best effort
                pass


class Unit:
    """One atomic unit: a lazily acquired connection, its transaction and (SQLite writes) the local write lock."""

    __slots__ = (
        "backend",
        "write",
        "snapshot",
        "commit",
        "task",
        "pool",
        "raw",
        "_write_lock",
        "_pg_tx",
        "view",
        "sqlite",
        "for_update",
        "batch",
        "optimistic",
        "claims",
    )

    def __init__(
        self,
        backend: SqlLightningCollections,
        write: bool,
        snapshot: bool,
        commit: bool,
        deferred: bool = False,
        optimistic: bool = False,
    ) -> None:
        self.backend = backend
        self.write = write
        self.snapshot = snapshot
        self.commit = commit
        self.task = asyncio.current_task()
        self.pool: Optional[DriverPool] = None
        self.raw: Any = None
        self._write_lock: Optional[asyncio.Lock] = None  # SQLite write units: the local write lock while held
        self._pg_tx: Any = None
        self.view: Any = None
        self.sqlite: bool = backend.sql_dialect.embedded
        """Whether the unit runs on SQLite (an embedded database: :attr:`~.sql_dialect.SqlDialect.embedded`)."""
        self.optimistic = optimistic
        """PostgreSQL commit unit run without a transaction (see :mod:`.sql_batch`)."""
        self.for_update: bool = write and not self.sqlite and not optimistic
        """Lock the rows read by this unit (PostgreSQL write units in a transaction)."""
        self.batch: Optional[WriteBatch] = WriteBatch() if deferred else None
        """The deferred writes of a PostgreSQL commit unit (see :mod:`.sql_batch`)."""
        self.claims: Optional[List[int]] = None
        """The queue entries this (optimistic) unit is claiming (in ``backend.claiming`` until the unit ends)."""

    async def driver(self) -> Any:
        """The unit's driver connection, opening it (and its transaction) on first use."""
        if self.raw is None:
            await self._open()
        return self.raw

    async def _open(self) -> None:
        backend = self.backend
        if not backend._ready:
            await backend._ensure_ready()
        pool = backend._pool_for_loop()
        if self.sqlite and self.write:
            lock = pool.write_lock
            await lock.acquire()
            self._write_lock = lock
        try:
            raw = await pool.acquire()
            try:
                if self.sqlite:
                    if self.write or self.snapshot:
                        dialect = backend.sql_dialect
                        raw.pending_begin = dialect.BEGIN_WRITE if self.write else dialect.BEGIN_READ
                elif (self.write or self.snapshot) and not self.optimistic:
                    isolation = "repeatable_read" if (self.commit or not self.write) else "read_committed"
                    tx = raw.transaction(isolation=isolation, readonly=not self.write)
                    await tx.start()
                    self._pg_tx = tx
            except BaseException:
                pool.release(raw, broken=True)
                raise
        except BaseException:
            self._release_lock()
            raise
        self.pool, self.raw = pool, raw

    async def start_transaction(self) -> None:
        """An optimistic unit that needs a transaction from here on (a statement must run right away, or a row is
        written twice): open it, then lock and check the rows the unit read so far, sending its pending writes in
        the same statement (:meth:`~.sql_batch.WriteBatch.flush`). A row that changed since it was read raises
        :class:`~.sql_batch.GuardConflict` (nothing written; ``execute()`` runs the unit again in a transaction)."""
        batch = self.batch
        assert batch is not None and self.optimistic
        raw = await self.driver()
        self.optimistic = False
        self.for_update = True
        tx = raw.transaction(isolation="repeatable_read")
        await tx.start()
        self._pg_tx = tx
        await batch.flush(self, check=True)

    def _release_lock(self) -> None:
        lock, self._write_lock = self._write_lock, None
        if lock is not None:
            lock.release()

    async def close(self, failed: bool) -> None:
        """Send the deferred writes, commit (or roll back when ``failed``), release the connection and the lock."""
        batch = self.batch
        if batch is not None and not failed and (batch.ops or batch.cached):
            try:
                await batch.flush(self)
            except BaseException:
                await self._end(True)
                raise
        await self._end(failed)

    async def _end(self, failed: bool) -> None:
        claims = self.claims
        if claims is not None:
            self.claims = None
            self.backend.claiming.difference_update(claims)
        pool, raw, tx = self.pool, self.raw, self._pg_tx
        self.pool = self.raw = self._pg_tx = None
        try:
            if pool is not None:
                broken = True
                try:
                    if self.sqlite:
                        await (raw.rollback() if failed else raw.commit())
                    elif tx is not None:
                        await (tx.rollback() if failed else tx.commit())
                    broken = (not self.sqlite) and raw.is_in_transaction()
                finally:
                    pool.release(raw, broken=broken)
        finally:
            self._release_lock()

    # --- execution ---------------------------------------------------------------------------------------------

    async def fetch(self, compiled: Compiled, values: Dict[str, Any]) -> Sequence[Any]:
        """Run a cached statement and return its rows."""
        raw = self.raw if self.raw is not None else await self.driver()
        params = StatementCache.params(compiled, values)
        if self.sqlite:
            # run_now answers at once unless the statement must wait (then run awaits the lock): no coroutine
            return (raw.run_now(compiled[0], params, True) or await raw.run(compiled[0], params, True))[0]  # type: ignore[no-any-return]
        return await raw.fetch(compiled[0], *params)  # type: ignore[no-any-return]

    async def execute(self, compiled: Compiled, values: Dict[str, Any]) -> int:
        """Run a cached statement and return the number of affected rows."""
        raw = self.raw if self.raw is not None else await self.driver()
        params = StatementCache.params(compiled, values)
        if self.sqlite:
            return (raw.run_now(compiled[0], params, False) or await raw.run(compiled[0], params, False))[1]  # type: ignore[no-any-return]
        status = await raw.execute(compiled[0], *params)
        try:
            return int(status.rsplit(" ", 1)[-1])
        except ValueError:
            return 0

    async def insert_all_or_none(self, bulk: BulkInsert) -> Optional[Tuple[Any, ...]]:
        """Insert the rows of ``bulk`` all or none, whatever the database; returns ``None``, or a key that already
        existed (then nothing of the insert stays). The embedded database runs one ``INSERT`` per row in one
        ``executemany`` under a savepoint (:meth:`_insert_rows_embedded`); a server runs the dialect's
        :meth:`~.sql_dialect.SqlDialect.insert_skipping_conflicts` and deletes its own rows when a key existed."""
        if self.sqlite:
            return await self._insert_embedded(bulk)
        return await self._insert_server(bulk)

    @staticmethod
    def _key_binds(spec: TableSpec, key: Sequence[Any]) -> Dict[str, Any]:
        """The values of the primary key bind parameters of ``spec`` for ``key``."""
        return dict(zip(spec.pk_bind_names, key, strict=False))

    async def _insert_embedded(self, bulk: BulkInsert) -> Optional[Tuple[Any, ...]]:
        """:meth:`insert_all_or_none` on the embedded database: a refused insert asks which key existed."""
        if await self._insert_rows_embedded(bulk.insert_row(), bulk.rows):
            return None
        key_exists = bulk.key_exists()
        for key in bulk.keys:  # which key existed (the caller refuses rows that repeat a key)
            if await self.fetch(key_exists, self._key_binds(bulk.spec, key)):
                return key
        return bulk.keys[0]

    async def _insert_server(self, bulk: BulkInsert) -> Optional[Tuple[Any, ...]]:
        """:meth:`insert_all_or_none` on a database server: one statement that skips existing keys, then (a key
        existed) the deletion of the rows it inserted -- the call has no partial effect."""
        spec = bulk.spec
        columns = spec.column_names
        sql = self.backend.sql_dialect.insert_skipping_conflicts(spec.name, columns, spec.kinds, spec.primary_keys)
        rows = bulk.rows
        inserted = [tuple(r) for r in await self.fetch_sql(sql, [[row[c] for row in rows] for c in columns])]
        if len(inserted) == len(rows):
            return None
        delete_row = bulk.delete_row()
        for key in inserted:
            await self.execute(delete_row, self._key_binds(spec, key))
        done = set(inserted)
        return next(k for k in bulk.keys if k not in done)

    async def _insert_rows_embedded(self, compiled: Compiled, rows: Sequence[Dict[str, Any]]) -> bool:
        """Embedded database: run the cached ``INSERT`` once per row of values in one ``executemany``; when a key
        already exists nothing of it stays (undone to a savepoint: :attr:`~.sql_dialect.SqlDialect.SAVEPOINT_INSERT`).
        Returns whether the rows were inserted."""
        raw = self.raw if self.raw is not None else await self.driver()
        params = [StatementCache.params(compiled, row) for row in rows]
        dialect = self.backend.sql_dialect

        def insert(conn: sqlite3.Connection) -> bool:
            if len(params) == 1:  # one statement is atomic by itself: no savepoint needed
                try:
                    conn.execute(compiled[0], params[0])
                    return True
                except sqlite3.IntegrityError:
                    return False
            conn.execute(dialect.SAVEPOINT_INSERT)
            try:
                conn.executemany(compiled[0], params)
            except sqlite3.IntegrityError:
                conn.execute(dialect.ROLLBACK_TO_INSERT)
                conn.execute(dialect.RELEASE_INSERT)
                return False
            conn.execute(dialect.RELEASE_INSERT)
            return True

        return await raw.call(insert)  # type: ignore[no-any-return]

    async def enqueue(self, insert_value: Callable[[], Compiled], values: Sequence[str]) -> None:
        """Append ``values`` to the rollout queue in order, whatever the database: the embedded database runs the
        ``INSERT`` of one value (``insert_value()``, binding it as ``v``) once per value in one ``executemany``; a
        server runs the dialect's :meth:`~.sql_dialect.SqlDialect.enqueue_many` with the values as one array."""
        if self.sqlite:
            compiled = insert_value()
            raw = self.raw if self.raw is not None else await self.driver()
            params = [StatementCache.params(compiled, {"v": value}) for value in values]
            await raw.call(lambda conn: conn.executemany(compiled[0], params))
        else:
            await self.fetch_sql(self.backend.sql_dialect.enqueue_many(), [values])

    async def fetch_sql(self, sql: str, params: Sequence[Any]) -> Sequence[Any]:
        """Run literal SQL (driver paramstyle) and return its rows."""
        raw = await self.driver()
        if self.sqlite:
            return (await raw.run(sql, list(params), True))[0]  # type: ignore[no-any-return]
        return await raw.fetch(sql, *params)  # type: ignore[no-any-return]


ACTIVE_UNIT: contextvars.ContextVar[Optional[Unit]] = contextvars.ContextVar("rollouthub_sql_unit", default=None)
