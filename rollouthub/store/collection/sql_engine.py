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
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from sqlalchemy.exc import DBAPIError

from .sql_batch import WriteBatch

if TYPE_CHECKING:
    from .sql import SqlLightningCollections

__all__ = ["StatementCache", "Unit", "ACTIVE_UNIT", "is_transient_error"]

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

    async def insert_all_or_none(self, compiled: Compiled, rows: Sequence[Dict[str, Any]]) -> bool:
        """Embedded database: run the cached ``INSERT`` once per row of values in one ``executemany``; when a key
        already exists nothing of it stays (undone to a savepoint: :attr:`~.sql_dialect.SqlDialect.SAVEPOINT_INSERT`).
        Returns whether the rows were inserted."""
        assert self.sqlite, "insert_all_or_none runs on the embedded driver"
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

    async def execute_many(self, compiled: Compiled, rows: Sequence[Dict[str, Any]]) -> None:
        """Embedded database: run the cached statement once per row of values, in one ``executemany``."""
        assert self.sqlite, "execute_many runs on the embedded driver"
        raw = self.raw if self.raw is not None else await self.driver()
        params = [StatementCache.params(compiled, row) for row in rows]
        await raw.call(lambda conn: conn.executemany(compiled[0], params))

    async def fetch_sql(self, sql: str, params: Sequence[Any]) -> Sequence[Any]:
        """Run literal SQL (driver paramstyle) and return its rows."""
        raw = await self.driver()
        if self.sqlite:
            return (await raw.run(sql, list(params), True))[0]  # type: ignore[no-any-return]
        return await raw.fetch(sql, *params)  # type: ignore[no-any-return]


ACTIVE_UNIT: contextvars.ContextVar[Optional[Unit]] = contextvars.ContextVar("rollouthub_sql_unit", default=None)
