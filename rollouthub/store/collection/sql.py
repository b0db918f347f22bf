"""SQL implementation of the collections layer: SQLite (file) or PostgreSQL, chosen by URL.

SQLAlchemy 2 Core defines the schema (:mod:`.sql_schema`), creates and migrates it, and compiles every statement
shape once (:class:`~.sql_engine.StatementCache`); units execute the compiled SQL directly on pooled driver
connections (SQLite: :mod:`.sql_sqlite`, a small driver over :mod:`sqlite3` that by default runs statements inline
on the event-loop thread; PostgreSQL: asyncpg). See ``docs/sql-backend.md`` for the reasons and the measurements.

Units of work (``atomic()`` / ``execute()``):

* ``mode="r"`` without ``snapshot``: statements run in autocommit (no write lock; WAL readers never block).
  ``snapshot=True`` opens a read transaction (SQLite ``BEGIN``; PostgreSQL ``REPEATABLE READ READ ONLY``).
* ``mode="w"``/``"rw"`` or ``commit=True``: one transaction, committed at the end and rolled back on error.
  SQLite: ``BEGIN IMMEDIATE`` (one writer at a time; an in-process lock orders local writers, the busy timeout
  bounds the wait for other processes). PostgreSQL: ``commit=True`` units run in ``REPEATABLE READ``, other write
  units in ``READ COMMITTED``; in both, rows read inside a write unit are locked (``SELECT ... FOR UPDATE``) so
  read-modify-write cannot lose updates. ``execute(commit=True)`` re-runs the callback on serialization failures /
  deadlocks (SQLSTATE 40001 / 40P01) and on SQLite "database is locked", with jittered backoff within a time budget.
* PostgreSQL fast path (on unless ``pg_fast_path=False`` / ``ROLLOUTHUB_PG_FAST_PATH=0``): ``execute(commit=True)``
  units (the business logic's read-modify-write units) defer their writes into one statement and run optimistically
  first (reads without a transaction, the writes guarded by the versions of the rows read), starting a transaction
  where the unit needs a result mid-way and running again in one when a row changed: see :mod:`.sql_batch`. Their
  compound reads (:mod:`.sql_compound`) may be answered from what the process remembers, checked by the write
  statement (:mod:`.sql_caches`).
* ``labels=["generic"]`` alone: process-local coordination only (no database transaction).

A unit is bound to the task that opened it: nested ``atomic()`` calls from the same task join it. Driver
connections are bound to an event loop, so one pool is kept per running loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
import weakref
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Sequence, Set, Tuple, TypeVar, cast

import aiologic
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from typing_extensions import Self

from rollouthub.types import Attempt, ResourcesUpdate, Rollout, Span, Worker
from rollouthub.utils.metrics import MetricsBackend

from . import sql_compound
from .base import (
    AtomicLabels,
    AtomicMode,
    Collection,
    KeyValue,
    LightningCollections,
    PoppedRollout,
    Queue,
    RolloutAttempts,
)
from .sql_batch import GuardConflict
from .sql_caches import CachedResources, CachedRollout, QueueMirror
from .sql_dialect import SqlDialect
from .sql_dialect_postgres import PostgresDialect
from .sql_dialect_sqlite import SqliteDialect
from .sql_engine import ACTIVE_UNIT, DriverPool, StatementCache, Unit, is_transient_error
from .sql_key_value import SqlKeyValue
from .sql_primitives import SqlCollection
from .sql_queue import SqlQueue
from .sql_schema import SqlSchema, describe_url, ensure_schema, normalize_database_url

__all__ = ["SqlLightningCollections", "SqlCollection", "SqlQueue", "SqlKeyValue", "is_transient_error"]

logger = logging.getLogger(__name__)

R = TypeVar("R")

DIALECTS: Dict[str, Callable[[], SqlDialect]] = {"sqlite": SqliteDialect, "postgresql": PostgresDialect}
"""The dialect class of each database (by the name :func:`~.sql_schema.normalize_database_url` returns)."""

_WRITE_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)
_WRITE_LOCKS_GUARD = threading.Lock()


FAST_PATH_ENV = "ROLLOUTHUB_PG_FAST_PATH"
"""The environment variable that turns the PostgreSQL fast path off (``0``/``false``/``off``) or on."""


def _fast_path_setting(flag: Optional[bool]) -> bool:
    """``flag``, or (``None``) what :data:`FAST_PATH_ENV` says (on when unset)."""
    if flag is not None:
        return flag
    text = os.environ.get(FAST_PATH_ENV, "").strip().lower()
    if text in ("", "1", "true", "on", "yes"):
        return True
    if text in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"{FAST_PATH_ENV} must be 1/true/on or 0/false/off, got {text!r}")


def _make_collection(backend: SqlLightningCollections, unit: Optional[Unit], name: str) -> Any:
    if name == "rollout_queue":
        return SqlQueue(backend, unit)
    if name == "span_sequence_ids":
        return SqlKeyValue(backend, unit)
    return SqlCollection(backend, backend.schema.specs[name], unit)


def _make_collections(backend: SqlLightningCollections, unit: Optional[Unit]) -> Dict[str, Any]:
    names = ("rollouts", "attempts", "spans", "resources", "workers", "rollout_queue", "span_sequence_ids")
    return {name: _make_collection(backend, unit, name) for name in names}


class _UnitView(LightningCollections):
    """The collections object yielded by ``atomic()``: every operation runs in the unit's transaction."""

    def __init__(self, backend: SqlLightningCollections, unit: Unit) -> None:
        super().__init__(tracker=None)
        self._backend = backend
        self._unit = unit
        self._cols: Optional[Dict[str, Any]] = None

    def _get(self, name: str) -> Any:
        cols = self._cols
        if cols is None:
            cols = self._cols = {}
        found = cols.get(name)
        if found is None:
            found = cols[name] = _make_collection(self._backend, self._unit, name)
        return found

    rollouts = property(lambda self: self._get("rollouts"))  # type: ignore[assignment]
    attempts = property(lambda self: self._get("attempts"))  # type: ignore[assignment]
    spans = property(lambda self: self._get("spans"))  # type: ignore[assignment]
    resources = property(lambda self: self._get("resources"))  # type: ignore[assignment]
    workers = property(lambda self: self._get("workers"))  # type: ignore[assignment]
    rollout_queue = property(lambda self: self._get("rollout_queue"))  # type: ignore[assignment]
    span_sequence_ids = property(lambda self: self._get("span_sequence_ids"))  # type: ignore[assignment]

    def atomic(self, **kwargs: Any) -> Any:
        """Nested units join this one."""
        return self._backend.atomic(**kwargs)

    async def execute(self, callback: Callable[[Self], Awaitable[R]], **kwargs: Any) -> R:  # type: ignore[override]
        """Nested executes run inside this unit (no separate retry)."""
        return await callback(self)

    async def dequeue_rollouts(self, limit: int) -> List[PoppedRollout]:
        """PostgreSQL fast path: one statement (see :func:`.sql_compound.dequeue_rollouts`); otherwise the
        primitives."""
        if not self._backend.fast_path or limit <= 0:
            return await super().dequeue_rollouts(limit)
        return await sql_compound.dequeue_rollouts(self._unit, self._backend.schema.specs["rollouts"], limit)

    async def latest_resources(self) -> Optional[Any]:
        """PostgreSQL optimistic units: cached and validated by the unit's write statement (see
        :func:`.sql_compound.latest_resources`); otherwise the primitives."""
        if self._unit.optimistic:
            return await sql_compound.latest_resources(self._unit, self._backend.schema.specs["resources"])
        return await super().latest_resources()

    async def get_rollout_and_attempts(self, rollout_id: str, attempt_id: Optional[str] = None) -> RolloutAttempts:
        """PostgreSQL fast path: one statement (see :func:`.sql_compound.get_rollout_and_attempts`); otherwise the
        primitives."""
        if not self._backend.fast_path:
            return await super().get_rollout_and_attempts(rollout_id, attempt_id)
        specs = self._backend.schema.specs
        return await sql_compound.get_rollout_and_attempts(
            self._unit, specs["rollouts"], specs["attempts"], rollout_id, attempt_id
        )

    async def notify(self, channel: str, payload: str) -> None:
        """PostgreSQL ``NOTIFY`` delivered when this unit commits (deferred with its writes when it defers them)."""
        batch = self._unit.batch
        if batch is not None:
            batch.notify(channel, payload)
        else:
            await self._unit.fetch_sql(self._backend.sql_dialect.notify(), [channel, payload])


class _UnitScope:
    """Async context of one unit (class-based: this runs several times per store call)."""

    __slots__ = ("backend", "write", "snapshot", "commit", "view", "unit", "token", "deferred", "optimistic")

    def __init__(
        self,
        backend: SqlLightningCollections,
        write: bool,
        snapshot: bool,
        commit: bool,
        view: bool,
        deferred: bool = False,
        optimistic: bool = False,
    ) -> None:
        self.backend = backend
        self.write = write
        self.snapshot = snapshot
        self.commit = commit
        self.view = view
        self.deferred = deferred
        self.optimistic = optimistic
        self.unit: Optional[Unit] = None
        self.token: Any = None

    async def __aenter__(self) -> Any:
        active = ACTIVE_UNIT.get()
        if active is not None and active.backend is self.backend and (active.write or not self.write):
            if active.task is asyncio.current_task():
                return active.view if self.view else active
        unit = self.unit = Unit(self.backend, self.write, self.snapshot, self.commit, self.deferred, self.optimistic)
        unit.view = _UnitView(self.backend, unit)
        self.token = ACTIVE_UNIT.set(unit)
        return unit.view if self.view else unit

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        unit = self.unit
        if unit is None:
            return
        self.unit = None
        ACTIVE_UNIT.reset(self.token)
        await unit.close(exc_type is not None)


class _GenericScope:
    """``labels=["generic"]``: a process-local lock, no database transaction."""

    __slots__ = ("backend",)

    def __init__(self, backend: SqlLightningCollections) -> None:
        self.backend = backend

    async def __aenter__(self) -> Any:
        await self.backend._generic_lock.async_acquire()
        return self.backend

    async def __aexit__(self, *exc: Any) -> None:
        self.backend._generic_lock.async_release()


class SqlLightningCollections(LightningCollections):
    """Collections stored in SQLite (``sqlite:///path.db``) or PostgreSQL (``postgresql://...``).

    Args:
        url: database URL; ``sqlite://``/``postgresql://`` are rewritten to the aiosqlite/asyncpg drivers.
        tracker: optional metrics backend.
        echo: log the SQL of schema creation/migration (SQLAlchemy engine echo).
        pool_size / max_overflow: at most ``pool_size + max_overflow`` driver connections per event loop (opened on
            demand and kept).
        busy_timeout: SQLite: seconds a writer waits for another process' write lock.
        synchronous: SQLite ``PRAGMA synchronous`` (``"NORMAL"``: survives a process crash; ``"FULL"``: also
            survives power loss, slower).
        commit_retry_budget: seconds ``execute(commit=True)`` keeps retrying transient conflicts.
        schema: PostgreSQL schema (``search_path``) holding the tables; created when missing. A PostgreSQL URL may
            name it instead (``?schema=name``), set the connections' ``application_name`` (``?application_name=``,
            default ``rollouthub``) and size the pool (``?pool_size=4&max_overflow=4``).
        sqlite_inline: SQLite: run statements on the event-loop thread (no thread hop; waits for other processes'
            locks asynchronously). ``False``: one worker thread per connection.
        pg_fast_path: PostgreSQL: run the business logic's commit units on the fast path (deferred writes in one
            statement, optimistic units, process-local caches: :mod:`.sql_batch`); ``False``: the plain path (each
            unit a transaction of plain statements, rows read locked with ``FOR UPDATE``, as on SQLite). ``None``:
            ``$ROLLOUTHUB_PG_FAST_PATH`` (``0``/``false``/``off`` turn it off), on by default. Ignored on SQLite.
        engine_kwargs: passed to ``create_async_engine`` (the engine used for schema work).
    """

    def __init__(
        self,
        url: str,
        *,
        tracker: Optional[MetricsBackend] = None,
        echo: bool = False,
        pool_size: int = 5,
        max_overflow: int = 10,
        busy_timeout: float = 30.0,
        synchronous: str = "NORMAL",
        commit_retry_budget: float = 30.0,
        schema: Optional[str] = None,
        sqlite_inline: bool = True,
        pg_fast_path: Optional[bool] = None,
        **engine_kwargs: Any,
    ) -> None:
        super().__init__(tracker=tracker)
        self.url, self.dialect = normalize_database_url(url)
        self.sql_dialect: SqlDialect = DIALECTS[self.dialect]()
        """The named SQL operations of this database (:mod:`.sql_dialect`)."""
        self.display_url = describe_url(self.url)
        # The URL may also carry options (e.g. for `rollouthub store --backend URL`): the schema, the pool size...
        self.url, settings, schema, pool_size, max_overflow = self.sql_dialect.take_url_options(
            self.url, schema, pool_size, max_overflow
        )
        self.server_settings: Dict[str, str] = settings
        """PostgreSQL session settings of every connection: ``application_name`` (from the URL's
        ``?application_name=`` or ``rollouthub``, so that ``pg_stat_activity`` tells the store's connections apart)
        and the ``search_path`` of ``schema``."""
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"Invalid synchronous mode {synchronous!r}")
        self.fast_path = self.sql_dialect.has_fast_path and _fast_path_setting(pg_fast_path)
        """Whether PostgreSQL commit units run on the fast path (see ``pg_fast_path``)."""
        self.schema = SqlSchema(self.sql_dialect)
        self.pg_schema = schema
        self._echo = echo
        self._pool_size = pool_size
        self._max_overflow = max_overflow
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous.upper()
        self._commit_retry_budget = commit_retry_budget
        self._sqlite_inline = sqlite_inline
        self._engine_kwargs = engine_kwargs
        self._engines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncEngine] = weakref.WeakKeyDictionary()
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, DriverPool] = weakref.WeakKeyDictionary()
        self._last_pool: Optional[Tuple[asyncio.AbstractEventLoop, DriverPool]] = None
        self.stmts = StatementCache()
        # Compiled filters per (table, exact-filter signature): (where marker, shape, normalized filter).
        self.filter_shapes: Dict[Any, Tuple[Any, Tuple[Any, ...], Any]] = {}
        self.stmts.dialect = create_async_engine(self.url).dialect  # replaced by the connected dialect later
        self._engines_guard = threading.Lock()
        self._ready = False
        self._ready_lock = aiologic.Lock()
        self._generic_lock = aiologic.Lock()
        self._file_key = self.sql_dialect.write_lock_key(self.url)
        self._unbound: Optional[Dict[str, Any]] = None
        self.latest_resources_cache: Optional[CachedResources] = None
        """PostgreSQL: the latest resources snapshot and its version, as last read (see
        :func:`.sql_compound.latest_resources`); ``None``: unknown."""
        self.rollout_cache: Dict[str, CachedRollout] = {}
        """PostgreSQL: the rollouts (with their latest attempt) as this process last read or wrote them (see
        :func:`.sql_compound.get_rollout_and_attempts`)."""
        self.queue_mirror = QueueMirror()
        """PostgreSQL: the queue entries this process appended (see :class:`.sql_caches.QueueMirror`)."""
        self.claiming: Set[int] = set()
        """PostgreSQL: the queue entries (``seq``) optimistic units of this process are claiming (see
        :func:`.sql_compound.dequeue_rollouts`)."""

    # --- engines ----------------------------------------------------------------------------------------------

    def _create_engine(self) -> AsyncEngine:
        kwargs: Dict[str, Any] = dict(
            echo=self._echo,
            pool_size=self._pool_size,
            max_overflow=self._max_overflow,
            pool_reset_on_return=None,  # units always end with COMMIT/ROLLBACK themselves
        )
        kwargs["connect_args"] = self.sql_dialect.engine_connect_args(self._busy_timeout, self.server_settings)
        kwargs.update(self._engine_kwargs)
        engine = create_async_engine(self.url, **kwargs)
        self.sql_dialect.prepare_engine(engine, self._busy_timeout, self._synchronous)
        return engine

    def _local_write_lock(self) -> asyncio.Lock:
        """SQLite: the lock ordering this event loop's writers of this database file (other threads, loops and
        processes are ordered by SQLite's write lock, waited for asynchronously)."""
        loop = asyncio.get_running_loop()
        locks = _WRITE_LOCKS.get(loop)
        if locks is None:
            with _WRITE_LOCKS_GUARD:
                locks = _WRITE_LOCKS.setdefault(loop, {})
        lock = locks.get(self._file_key)
        if lock is None:
            lock = locks.setdefault(self._file_key, asyncio.Lock())
        return lock

    def _pool_for_loop(self) -> DriverPool:
        """The driver-connection pool of the running event loop (the last one used is cached)."""
        loop = asyncio.get_running_loop()
        last = self._last_pool
        if last is not None and last[0] is loop:
            return last[1]
        pool = self._pools.get(loop)
        if pool is None:
            with self._engines_guard:
                pool = self._pools.get(loop)
                if pool is None:
                    pool = DriverPool(
                        self._driver_factory(), self._pool_size + self._max_overflow, self._local_write_lock()
                    )
                    self._pools[loop] = pool
        self._last_pool = (loop, pool)
        return pool

    def _driver_factory(self) -> Callable[[], Any]:
        return self.sql_dialect.driver_factory(
            self.url, self._busy_timeout, self._synchronous, self._sqlite_inline, self.server_settings
        )

    def _engine_for_loop(self) -> AsyncEngine:
        """The engine (and pool) of the running event loop."""
        loop = asyncio.get_running_loop()
        engine = self._engines.get(loop)
        if engine is None:
            with self._engines_guard:
                engine = self._engines.get(loop)
                if engine is None:
                    engine = self._create_engine()
                    self._engines[loop] = engine
        return engine

    async def _ensure_ready(self) -> None:
        if self._ready:
            return
        async with self._ready_lock:
            if self._ready:
                return
            engine = self._engine_for_loop()
            async with engine.connect() as conn:
                for statement in self.sql_dialect.open_schema_work(self.pg_schema):
                    await conn.exec_driver_sql(statement)
                try:
                    await ensure_schema(conn, self.schema, self.display_url)
                except BaseException:
                    await conn.rollback()
                    raise
                await conn.commit()
            self.stmts.reset(engine.dialect)
            self._ready = True

    async def initialize(self) -> None:
        """Create or check the schema now (otherwise done on first use)."""
        await self._ensure_ready()

    async def close(self) -> None:
        """Dispose the engine of the running loop and forget the others; SQLite: checkpoint the write-ahead log into
        the database file and truncate it."""
        loop = asyncio.get_running_loop()
        with self._engines_guard:
            engine = self._engines.pop(loop, None)
            pool = self._pools.pop(loop, None)
            self._engines = weakref.WeakKeyDictionary()
            self._pools = weakref.WeakKeyDictionary()
            self._last_pool = None
        if pool is not None:
            await pool.close()
        if engine is not None:
            await engine.dispose()
        await self.sql_dialect.after_close(self.url, self._busy_timeout)

    async def notify(self, channel: str, payload: str) -> None:
        """PostgreSQL ``NOTIFY`` (autocommit)."""
        async with self._unit_scope(write=False, snapshot=False, commit=False) as unit:
            await unit.fetch_sql(self.sql_dialect.notify(), [channel, payload])

    # --- units ------------------------------------------------------------------------------------------------

    def _unit_scope(self, *, write: bool, snapshot: bool, commit: bool) -> _UnitScope:
        """An async context yielding the active unit of this task (when compatible) or a new one."""
        return _UnitScope(self, write, snapshot, commit, False)

    def _atomic(
        self,
        mode: AtomicMode,
        snapshot: bool,
        commit: bool,
        labels: Optional[Sequence[AtomicLabels]],
        optimistic: Optional[bool] = None,
    ) -> Any:
        """``optimistic``: ``None`` for a plain unit; ``True``/``False`` for a PostgreSQL unit of
        ``execute(commit=True)`` that defers its writes, run optimistically or in a transaction (see
        :mod:`.sql_batch`)."""
        if labels and all(label == "generic" for label in labels):
            return _GenericScope(self)
        if optimistic is None:
            return _UnitScope(self, mode != "r" or commit, snapshot, commit, True)
        return _UnitScope(self, True, snapshot, commit, True, deferred=True, optimistic=optimistic)

    def atomic(
        self,
        *,
        mode: AtomicMode = "rw",
        snapshot: bool = False,
        commit: bool = False,
        labels: Optional[Sequence[AtomicLabels]] = None,
        **kwargs: Any,
    ) -> Any:
        """A unit of work yielding a collections object bound to one connection/transaction (module docstring)."""
        if self.tracker is None:
            return self._atomic(mode, snapshot, commit, labels)
        return self._tracked_atomic(mode, snapshot, commit, labels)

    @asynccontextmanager
    async def _tracked_atomic(
        self,
        mode: AtomicMode,
        snapshot: bool,
        commit: bool,
        labels: Optional[Sequence[AtomicLabels]],
        optimistic: Optional[bool] = None,
    ) -> AsyncIterator[LightningCollections]:
        async with self.tracking_context("atomic", "router"):
            async with self._atomic(mode, snapshot, commit, labels, optimistic) as view:
                yield view

    def _commit_unit(
        self, mode: AtomicMode, snapshot: bool, labels: Optional[Sequence[AtomicLabels]], optimistic: Optional[bool]
    ) -> Any:
        if self.tracker is None:
            return self._atomic(mode, snapshot, True, labels, optimistic)
        return self._tracked_atomic(mode, snapshot, True, labels, optimistic)

    async def execute(
        self,
        callback: Callable[[Any], Awaitable[R]],
        *,
        mode: AtomicMode = "rw",
        snapshot: bool = False,
        commit: bool = False,
        labels: Optional[Sequence[AtomicLabels]] = None,
        **kwargs: Any,
    ) -> R:
        """Run ``callback(collections)`` in one unit; with ``commit=True`` transient conflicts are retried.

        On the PostgreSQL fast path ``commit=True`` units defer their writes and run optimistically first
        (:mod:`.sql_batch`): the callback may run more than once, so it must be re-runnable (as for conflict
        retries)."""
        active = ACTIVE_UNIT.get()
        nested = active is not None and active.backend is self and active.task is asyncio.current_task()
        if not commit or nested:
            async with self.atomic(mode=mode, snapshot=snapshot, commit=commit, labels=labels) as view:
                return await callback(view)
        deferred = self.fast_path and not (labels and all(label == "generic" for label in labels))
        optimistic: Optional[bool] = None
        if deferred:
            optimistic = not snapshot
        deadline = time.monotonic() + self._commit_retry_budget
        delay = 0.002
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._commit_unit(mode, snapshot, labels, optimistic) as view:
                    return await callback(view)
            except GuardConflict:
                optimistic = False  # the rows are contended: lock them this time
                self.latest_resources_cache = None  # it may be what changed
                continue
            except Exception as exc:
                if not is_transient_error(exc) or time.monotonic() + delay > deadline:
                    raise
                logger.debug("Retrying transaction after transient conflict (attempt %d): %s", attempt, exc)
                await asyncio.sleep(random.uniform(0, delay))
                delay = min(delay * 2, 0.25)

    # --- collections ------------------------------------------------------------------------------------------

    def _get(self, name: str) -> Any:
        if self._unbound is None:
            self._unbound = _make_collections(self, None)
        return self._unbound[name]

    @property
    def rollouts(self) -> Collection[Rollout]:
        """Rollouts (PK ``rollout_id``)."""
        return cast(Collection[Rollout], self._get("rollouts"))

    @property
    def attempts(self) -> Collection[Attempt]:
        """Attempts (PK ``rollout_id``, ``attempt_id``)."""
        return cast(Collection[Attempt], self._get("attempts"))

    @property
    def spans(self) -> Collection[Span]:
        """Spans (PK ``rollout_id``, ``attempt_id``, ``span_id``)."""
        return cast(Collection[Span], self._get("spans"))

    @property
    def resources(self) -> Collection[ResourcesUpdate]:
        """Resource snapshots (PK ``resources_id``)."""
        return cast(Collection[ResourcesUpdate], self._get("resources"))

    @property
    def workers(self) -> Collection[Worker]:
        """Workers (PK ``worker_id``)."""
        return cast(Collection[Worker], self._get("workers"))

    @property
    def rollout_queue(self) -> Queue[str]:
        """Queue of rollout ids."""
        return cast(Queue[str], self._get("rollout_queue"))

    @property
    def span_sequence_ids(self) -> KeyValue[str, int]:
        """Rollout id -> last issued span sequence id."""
        return cast(KeyValue[str, int], self._get("span_sequence_ids"))

    def __repr__(self) -> str:
        return f"<SqlLightningCollections {self.display_url}>"
