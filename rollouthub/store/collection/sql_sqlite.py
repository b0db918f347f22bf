"""The SQLite driver of the SQL backend: a small asynchronous wrapper over the standard :mod:`sqlite3` module.

A unit of work (:class:`~.sql_engine.Unit`) runs its statements on one pooled :class:`SqliteDriver`. Handing every
DB-API call to a worker thread separately (cursor, execute, fetch, close, commit) costs one or two context switches
plus a GIL hand-over per call on a busy 2-core machine (measured: 0.1-1.5 ms per hop under load), which dominates the
cost of a local SQLite statement (10-50 us). The driver therefore offers:

* **inline mode** (the default of :class:`~rollouthub.store.collection.sql.SqlLightningCollections`): statements run
  directly on the event-loop thread, like any other short CPU-bound step. The only potentially long wait in SQLite
  -- another connection (process) holding the write lock -- is never spent blocking: the connection's
  ``busy_timeout`` is 0 and a busy statement is retried with ``await asyncio.sleep`` backoff until the configured
  busy timeout elapses. (Auto-checkpoints, every ~4 MB of WAL, do block the loop for their fsync.)
* **thread mode** (``inline=False``): one dedicated worker thread per connection (a single-thread
  :class:`~concurrent.futures.ThreadPoolExecutor`), and one hop per statement: execute, fetch every row and close
  the cursor happen together in the worker thread; :meth:`SqliteDriver.call` runs a whole function (several
  statements) in one hop,
* no hop for ``commit()``/``rollback()`` when no transaction is open (autocommit reads),
* an optional *pending* ``BEGIN``: the transaction is started in the same hop as the unit's first statement
  (:attr:`SqliteDriver.pending_begin`), and not at all when the unit issues none.

SQLAlchemy (schema creation, migrations, the cross-process change watcher) keeps its own connections: stock
aiosqlite connections (SQLAlchemy's aiosqlite dialect), with the same pragmas (:func:`install_engine_pragmas`). Connection-level pragmas (WAL,
``busy_timeout``, ``synchronous``) are applied when a connection opens.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "SqliteDriver",
    "checkpoint_and_truncate",
    "engine_connect_args",
    "install_engine_pragmas",
    "make_driver_factory",
]

T = TypeVar("T")


def _connect(path: str, busy_timeout: float, pragmas: Sequence[str]) -> sqlite3.Connection:
    # A statement cache larger than the default 128: the compiled shapes (filters x sorts x pagination x tables) of a
    # busy server can exceed it, and re-preparing a statement costs more than running it.
    conn = sqlite3.connect(
        path, isolation_level=None, timeout=busy_timeout, check_same_thread=False, cached_statements=512
    )
    for statement in pragmas:
        conn.execute(statement)
    return conn


def checkpoint_and_truncate(path: str, checkpoint: str, busy_timeout: float = 5.0) -> Optional[Tuple[int, int, int]]:
    """Copy every committed page of the write-ahead log into the database file and empty the log (``checkpoint``:
    the dialect's ``WAL_CHECKPOINT_TRUNCATE`` pragma), so that the ``.db`` file alone holds every committed write.

    Returns SQLite's ``(busy, log pages, checkpointed pages)``; ``None`` for an in-memory database or a file that
    does not exist. Complete (``busy == 0``) when no other connection is reading or writing at the time.
    """
    if not path or path == ":memory:" or path.startswith("file::memory:"):
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=busy_timeout, isolation_level=None)
    except sqlite3.OperationalError:  # no such file
        return None
    try:
        row = conn.execute(checkpoint).fetchone()
        return (int(row[0]), int(row[1]), int(row[2])) if row is not None else None
    finally:
        conn.close()


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SqliteDriver:
    """One ``sqlite3`` connection driven from asyncio (see the module docstring); open with :meth:`open`."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], *, inline: bool, busy_timeout: float) -> None:
        self._connector = connector
        self._busy_timeout = busy_timeout
        self._db: Optional[sqlite3.Connection] = None
        self._worker: Optional[ThreadPoolExecutor] = (
            None if inline else ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollouthub-sqlite")
        )
        self.pending_begin: Optional[str] = None
        """A ``BEGIN`` statement to run right before the next statement of this connection (``None``: none)."""

    async def open(self) -> SqliteDriver:
        """Open the ``sqlite3`` connection (thread mode: in the worker thread); returns ``self``."""
        if self._worker is None:
            self._db = await self._retry_inline(self._connector)
        else:
            self._db = await asyncio.wrap_future(self._worker.submit(self._connector))
        return self

    def is_closed(self) -> bool:
        """Whether the connection is closed (or was never opened)."""
        return self._db is None

    def _database(self) -> sqlite3.Connection:
        db = self._db
        if db is None:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        return db

    async def _hop(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)``: inline on the loop thread (busy statements retried), or in the worker thread."""
        self._database()
        if self._worker is None:
            return await self._retry_inline(fn, *args)
        return await asyncio.wrap_future(self._worker.submit(fn, *args))

    async def _retry_inline(self, fn: Callable[..., T], *args: Any) -> T:
        deadline: Optional[float] = None
        delay = 0.0005
        while True:
            try:
                return fn(*args)
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self._busy_timeout
                if now >= deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)

    def _begin_if_pending(self, db: sqlite3.Connection) -> None:
        pending = self.pending_begin
        if pending is not None:
            db.execute(pending)
            self.pending_begin = None

    def _run_sql(self, sql: str, params: Any, fetch: bool) -> Tuple[List[Any], int]:
        db = self._database()
        self._begin_if_pending(db)
        cur = db.cursor()
        try:
            cur.execute(sql, params)
            rows = cur.fetchall() if fetch else []
            return rows, cur.rowcount
        finally:
            cur.close()

    def run_now(self, sql: str, params: Any, fetch: bool) -> Optional[Tuple[List[Any], int]]:
        """Inline mode: execute one statement right away, like :meth:`run`; ``None`` when it must wait (another
        connection holds the lock, or thread mode) -- the caller then awaits :meth:`run`."""
        if self._worker is not None or self._db is None:
            return None
        try:  # the common case: no lock to wait for, so no retry loop and no coroutine
            return self._run_sql(sql, params, fetch)
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
        return None

    async def run(self, sql: str, params: Any, fetch: bool) -> Tuple[List[Any], int]:
        """Execute one statement (starting a pending transaction first); returns ``(rows, rowcount)``, the rows
        fetched when ``fetch``."""
        done = self.run_now(sql, params, fetch)
        if done is not None:
            return done
        return await self._hop(self._run_sql, sql, params, fetch)

    def _call_fn(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        db = self._database()
        self._begin_if_pending(db)
        return fn(db)

    def call(self, fn: Callable[[sqlite3.Connection], T]) -> Awaitable[T]:
        """Run ``fn(db)`` (``db``: the ``sqlite3.Connection``) in one go, in the connection's thread (starting a pending transaction
        first): a whole unit of several statements costs one hop."""
        return self._hop(self._call_fn, fn)

    async def commit(self) -> None:
        """Commit when a transaction is open (nothing to do, so no hop, otherwise)."""
        self.pending_begin = None
        db = self._db
        if db is not None and db.in_transaction:
            await self._hop(db.commit)

    async def rollback(self) -> None:
        """Roll back when a transaction is open (nothing to do, so no hop, otherwise)."""
        self.pending_begin = None
        db = self._db
        if db is not None and db.in_transaction:
            await self._hop(db.rollback)

    async def close(self) -> None:
        """Close the connection (thread mode: in the worker thread, which then ends)."""
        db, self._db = self._db, None
        worker, self._worker = self._worker, None
        if worker is not None:
            try:
                if db is not None:
                    await asyncio.wrap_future(worker.submit(db.close))
            finally:
                worker.shutdown(wait=False)
        elif db is not None:
            db.close()

    def terminate(self) -> None:
        """Close without waiting (a broken connection dropped from the pool; thread mode: after the worker's
        current call)."""
        db, self._db = self._db, None
        worker, self._worker = self._worker, None
        if worker is None:
            if db is not None:
                db.close()
            return
        if db is not None:
            worker.submit(db.close)
        worker.shutdown(wait=False)


def make_driver_factory(
    path: str, busy_timeout: float, pragmas_for: Callable[[float], Sequence[str]], *, inline: bool = True
) -> Callable[[], Awaitable[SqliteDriver]]:
    """A coroutine function opening :class:`SqliteDriver` connections to ``path``.

    Each connection first runs ``pragmas_for(sqlite_busy_timeout)``, where ``sqlite_busy_timeout`` is how long SQLite
    itself may wait for a lock: ``busy_timeout`` in thread mode, 0 inline (the driver then retries a busy statement
    with ``asyncio.sleep`` until ``busy_timeout``, so a lock held by another process never blocks the loop).
    """
    sqlite_busy = 0.0 if inline else busy_timeout
    pragmas = tuple(pragmas_for(sqlite_busy))

    async def factory() -> SqliteDriver:
        connector = partial(_connect, path, sqlite_busy, pragmas)
        return await SqliteDriver(connector, inline=inline, busy_timeout=busy_timeout).open()

    return factory


def engine_connect_args(busy_timeout: float) -> Dict[str, Any]:
    """``connect_args`` for SQLAlchemy's aiosqlite dialect: autocommit ``sqlite3`` mode (statements such as
    ``BEGIN IMMEDIATE`` are explicit), the busy timeout and a larger statement cache."""
    return {"isolation_level": None, "timeout": busy_timeout, "check_same_thread": False, "cached_statements": 512}


def install_engine_pragmas(engine: AsyncEngine, pragmas: Sequence[str]) -> None:
    """Apply the backend's connection pragmas (WAL, ``busy_timeout``, ``synchronous``: the dialect's
    ``sqlite_pragmas``) to every connection ``engine`` opens (a ``connect`` event listener)."""
    statements = tuple(pragmas)

    def on_connect(dbapi_conn: Any, connection_record: Any) -> None:
        cursor = dbapi_conn.cursor()
        try:
            for statement in statements:
                cursor.execute(statement)
        finally:
            cursor.close()

    event.listen(engine.sync_engine, "connect", on_connect)
