"""A leaner aiosqlite connection for the SQLite backend (plugged into SQLAlchemy via ``async_creator``).

Stock aiosqlite hands every DB-API call to its worker thread separately: creating a cursor, executing, fetching and
closing are four thread hops per statement, and ``COMMIT`` of a read-only unit is one more. On a busy 2-core machine
each hop costs one or two context switches plus a GIL hand-over (measured: 0.1-1.5 ms per hop under load), which
dominates the cost of a local SQLite statement (10-50 us). This subclass therefore offers:

* **inline mode** (the default of :class:`~rollouthub.store.collection.sql.SqlLightningCollections`): statements run
  directly on the event-loop thread, like any other short CPU-bound step. The only potentially long wait in SQLite
  -- another connection (process) holding the write lock -- is never spent blocking: the connection's
  ``busy_timeout`` is 0 and a busy statement is retried with ``await asyncio.sleep`` backoff until the configured
  busy timeout elapses. (Auto-checkpoints, every ~4 MB of WAL, do block the loop for their fsync.)
* **thread mode** (``inline=False``): aiosqlite's worker thread, but one hop per statement (execute + fetch all rows
  + close the cursor happen together in the worker thread),
* no hop for ``commit()``/``rollback()`` when no transaction is open (autocommit reads),
* an optional *pending* ``BEGIN``: the transaction is started in the same hop as the unit's first statement
  (:func:`set_pending_begin`), and not at all when the unit issues none.

Connection-level pragmas (WAL, ``busy_timeout``, ``synchronous``) are applied in the worker thread on connect.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from functools import partial
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

import aiosqlite

__all__ = ["FastSqliteConnection", "checkpoint_and_truncate", "make_async_creator", "set_pending_begin"]


def _connect(path: str, busy_timeout: float, synchronous: str) -> sqlite3.Connection:
    # A statement cache larger than the default 128: the compiled shapes (filters x sorts x pagination x tables) of a
    # busy server can exceed it, and re-preparing a statement costs more than running it.
    conn = sqlite3.connect(
        path, isolation_level=None, timeout=busy_timeout, check_same_thread=False, cached_statements=512
    )
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


def checkpoint_and_truncate(path: str, busy_timeout: float = 5.0) -> Optional[Tuple[int, int, int]]:
    """Copy every committed page of the write-ahead log into the database file and empty the log
    (``PRAGMA wal_checkpoint(TRUNCATE)``), so that the ``.db`` file alone holds every committed write.

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
        row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return (int(row[0]), int(row[1]), int(row[2])) if row is not None else None
    finally:
        conn.close()


class _PrefetchCursor:
    """A cursor whose ``execute`` runs, fetches and closes in one worker-thread call."""

    arraysize = 1

    def __init__(self, connection: FastSqliteConnection) -> None:
        self._connection = connection
        self.description: Optional[Sequence[Any]] = None
        self.rowcount = -1
        self.lastrowid: Optional[int] = None
        self._rows: List[Any] = []

    async def __aenter__(self) -> _PrefetchCursor:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    def _run(self, method: str, sql: str, parameters: Any) -> Tuple[Any, List[Any], int, Optional[int]]:
        conn = self._connection._conn
        pending = self._connection.pending_begin
        if pending is not None:
            conn.execute(pending)
            self._connection.pending_begin = None
        cur = conn.cursor()
        try:
            getattr(cur, method)(sql, parameters)
            desc = cur.description
            rows = cur.fetchall() if desc is not None else []
            return desc, rows, cur.rowcount, cur.lastrowid
        finally:
            cur.close()

    async def execute(self, sql: str, parameters: Optional[Iterable[Any]] = None) -> _PrefetchCursor:
        """Execute and prefetch every row."""
        result = await self._connection._execute(self._run, "execute", sql, () if parameters is None else parameters)
        self.description, self._rows, self.rowcount, self.lastrowid = result
        return self

    async def executemany(self, sql: str, seq_of_parameters: Iterable[Iterable[Any]]) -> _PrefetchCursor:
        """Execute for every parameter set (one worker-thread call)."""
        result = await self._connection._execute(self._run, "executemany", sql, seq_of_parameters)
        self.description, self._rows, self.rowcount, self.lastrowid = result
        return self

    async def fetchall(self) -> List[Any]:
        """The prefetched rows."""
        rows, self._rows = self._rows, []
        return rows

    async def fetchone(self) -> Any:
        """The next prefetched row, or ``None``."""
        return self._rows.pop(0) if self._rows else None

    async def fetchmany(self, size: Optional[int] = None) -> List[Any]:
        """Up to ``size`` prefetched rows."""
        size = self.arraysize if size is None else size
        rows, self._rows = self._rows[:size], self._rows[size:]
        return rows

    async def close(self) -> None:
        """Nothing to release: the sqlite3 cursor was closed in the worker thread."""
        self._rows = []

    async def nextset(self) -> None:
        """SQLite has no result sets beyond the first."""
        return None

    async def setinputsizes(self, *sizes: Any) -> None:
        """No-op (DB-API)."""
        return None


class FastSqliteConnection(aiosqlite.Connection):
    """``aiosqlite.Connection`` with one thread hop per statement (see the module docstring)."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], *, inline: bool, busy_timeout: float) -> None:
        super().__init__(connector, 64)
        self._thread.daemon = True  # never keep the interpreter alive for a pooled connection
        self._inline = inline
        self._busy_timeout = busy_timeout
        self.pending_begin: Optional[str] = None

    def __await__(self) -> Any:
        if not self._inline:
            return super().__await__()
        return self._connect_inline().__await__()

    async def _connect_inline(self) -> FastSqliteConnection:
        self._connection = await self._execute_inline(self._connector)
        return self

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._inline:
            return await super()._execute(fn, *args, **kwargs)
        if not self._running or self._connection is None:
            raise ValueError("Connection closed")
        return await self._execute_inline(fn, *args, **kwargs)

    async def _execute_inline(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        deadline: Optional[float] = None
        delay = 0.0005
        while True:
            try:
                return fn(*args, **kwargs)
            except sqlite3.OperationalError as exc:
                text = str(exc).lower()
                if "locked" not in text and "busy" not in text:
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self._busy_timeout
                if now >= deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)

    async def close(self) -> None:
        """Close the sqlite3 connection (inline: directly; thread mode: through the worker thread)."""
        if not self._inline:
            return await super().close()
        conn, self._connection = self._connection, None
        self._running = False
        if conn is not None:
            conn.close()

    def stop(self) -> Any:
        """Force-close (used by SQLAlchemy's terminate and by ``__del__``)."""
        if not self._inline:
            return super().stop()
        self._running = False
        conn, self._connection = self._connection, None
        if conn is not None:
            conn.close()
        return None

    def cursor(self) -> _PrefetchCursor:  # type: ignore[override]
        """A prefetching cursor (no thread hop to create it)."""
        return _PrefetchCursor(self)

    def _run_sql(self, sql: str, params: Any, fetch: bool) -> Tuple[List[Any], int]:
        conn = self._conn
        if self.pending_begin is not None:
            conn.execute(self.pending_begin)
            self.pending_begin = None
        cur = conn.cursor()
        try:
            cur.execute(sql, params)
            rows = cur.fetchall() if fetch else []
            return rows, cur.rowcount
        finally:
            cur.close()

    def run_now(self, sql: str, params: Any, fetch: bool) -> Optional[Tuple[List[Any], int]]:
        """Inline mode: execute one statement right away, like :meth:`run`; ``None`` when it must wait (another
        connection holds the lock, or thread mode) -- the caller then awaits :meth:`run`."""
        if not self._inline or self._connection is None:
            return None
        try:  # the common case: no lock to wait for, so no retry loop and no coroutine
            return self._run_sql(sql, params, fetch)
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if "locked" not in text and "busy" not in text:
                raise
        return None

    async def run(self, sql: str, params: Any, fetch: bool) -> Tuple[List[Any], int]:
        """Execute one statement (starting a pending transaction first); returns ``(rows, rowcount)``."""
        done = self.run_now(sql, params, fetch)
        if done is not None:
            return done
        return await self._execute(self._run_sql, sql, params, fetch)  # type: ignore[no-any-return]

    def _call_fn(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        conn = self._conn
        if self.pending_begin is not None:
            conn.execute(self.pending_begin)
            self.pending_begin = None
        return fn(conn)

    async def call(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn(sqlite3_connection)`` in one go (starting a pending transaction first)."""
        return await self._execute(self._call_fn, fn)

    async def commit(self) -> None:
        """Commit when a transaction is open (no thread hop otherwise)."""
        self.pending_begin = None
        if self._connection is not None and self._connection.in_transaction:
            await self._execute(self._conn.commit)

    async def rollback(self) -> None:
        """Roll back when a transaction is open (no thread hop otherwise)."""
        self.pending_begin = None
        if self._connection is not None and self._connection.in_transaction:
            await self._execute(self._conn.rollback)


def make_async_creator(path: str, busy_timeout: float, synchronous: str, *, inline: bool = True) -> Callable[[], Any]:
    """An ``async_creator`` for ``create_async_engine`` opening :class:`FastSqliteConnection` objects."""
    sqlite_busy = 0.0 if inline else busy_timeout

    async def creator() -> FastSqliteConnection:
        return await FastSqliteConnection(
            partial(_connect, path, sqlite_busy, synchronous), inline=inline, busy_timeout=busy_timeout
        )

    return creator


def set_pending_begin(driver_connection: Any, statement: str) -> None:
    """Start a transaction with ``statement`` together with the next statement on this connection."""
    driver_connection.pending_begin = statement
