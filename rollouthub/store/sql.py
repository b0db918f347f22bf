"""``SqlLightningStore``: the collection-based store persisted in SQLite (default) or PostgreSQL.

All business logic lives in :class:`~rollouthub.store.collection_based.CollectionBasedLightningStore`; this module
only picks the database, declares the capabilities and adds cross-process wake-ups for ``wait_for_rollouts`` (waiting
dequeues look at the queue every :data:`QUEUE_POLL_SECONDS` for rollouts queued by other processes):

* SQLite: while somebody waits, one background task per event loop reads ``PRAGMA data_version`` every 100 ms and
  wakes the waiters when another connection (any process) committed.
* PostgreSQL: while somebody waits, one dedicated asyncpg connection per event loop ``LISTEN``s on a channel; every
  store ``NOTIFY``s it (with the finished rollout ids) in the unit that writes a terminal status.

See ``docs/sql-backend.md``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict, List, Optional, Sequence, Union, cast

from rollouthub.types import Attempt, AttemptedRollout, FilterOptions, Rollout, SortOptions, Span
from rollouthub.utils.metrics import MetricsBackend

from .base import LightningStoreCapabilities, is_finished, paginated_json_from_items
from .collection.base import LightningCollections
from .collection.sql import SqlLightningCollections
from .collection.sql_primitives import SqlCollection
from .collection_based import CollectionBasedLightningStore, _attach, tracked

__all__ = ["SqlLightningStore", "DEFAULT_DATABASE_PATH", "resolve_database_url"]

logger = logging.getLogger(__name__)

DEFAULT_DATABASE_PATH = "rollouthub.db"
"""SQLite file (in the current directory) used when no URL is configured."""

POLL_INTERVAL_SECONDS = 0.1
"""SQLite change-counter poll period while waiters exist."""

WATCH_GRACE_SECONDS = 2.0
"""How long a watcher outlives its last waiter."""

QUEUE_POLL_SECONDS = 0.5
"""How often a waiting ``dequeue_rollout_or_wait`` looks at the queue for rollouts queued by other processes."""

_IN_CHUNK = 500


def resolve_database_url(database_url: Optional[str] = None) -> str:
    """The explicit URL, else ``$ROLLOUTHUB_DATABASE_URL``, else ``$DATABASE_URL``, else ``sqlite:///./rollouthub.db``."""
    url = database_url or os.environ.get("ROLLOUTHUB_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if url:
        return url
    path = os.path.abspath(DEFAULT_DATABASE_PATH)
    logger.info("No database URL configured; using the SQLite file %s", path)
    return f"sqlite:///{path}"


class _Watch:
    """The cross-process watcher of one event loop (refcounted by the waiters of that loop; its task starts when
    the first waiter actually blocks)."""

    def __init__(self) -> None:
        self.users = 0
        self.task: Optional[asyncio.Task[None]] = None
        self.stop = asyncio.Event()


class SqlLightningStore(CollectionBasedLightningStore[SqlLightningCollections]):
    """A durable store in SQLite or PostgreSQL that several processes may share.

    Args:
        database_url: ``sqlite:///path.db``, ``sqlite+aiosqlite:///...``, ``postgresql://...`` or
            ``postgresql+asyncpg://...``; defaults to ``$ROLLOUTHUB_DATABASE_URL``, ``$DATABASE_URL``, then
            ``./rollouthub.db``.
        tracker: optional metrics backend.
        scan_debounce_seconds: watchdog debounce (per store instance).
        read_snapshot: run multi-statement reads in a snapshot transaction.
        engine_kwargs: passed to :class:`~rollouthub.store.collection.sql.SqlLightningCollections` (``pool_size``,
            ``max_overflow``, ``busy_timeout``, ``synchronous``, ``commit_retry_budget``, ``schema``,
            ``sqlite_inline``, ``echo``, other ``create_async_engine`` arguments).
    """

    def __init__(
        self,
        database_url: Optional[str] = None,
        *,
        tracker: Optional[MetricsBackend] = None,
        scan_debounce_seconds: float = 10.0,
        read_snapshot: bool = False,
        **engine_kwargs: Any,
    ) -> None:
        collections = SqlLightningCollections(resolve_database_url(database_url), tracker=tracker, **engine_kwargs)
        super().__init__(
            collections, read_snapshot=read_snapshot, tracker=tracker, scan_debounce_seconds=scan_debounce_seconds
        )
        suffix = re.sub(r"[^a-z0-9_]", "_", (collections.pg_schema or "public").lower())
        self._channel = f"rollouthub_finished_{suffix}"[:63]
        self._watches: Dict[asyncio.AbstractEventLoop, _Watch] = {}
        self._watches_guard = threading.Lock()

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        """Thread- and async-safe; one logical copy shared by every process using the database."""
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=False)

    @property
    def database_url(self) -> str:
        """The database URL (password hidden)."""
        return self.collections.display_url

    async def initialize(self) -> None:
        """Create or check the schema now instead of on first use."""
        await self.collections.initialize()

    async def close(self) -> None:
        """Stop the watchers of this loop and dispose the engine."""
        loop = asyncio.get_running_loop()
        with self._watches_guard:
            watch = self._watches.pop(loop, None)
        if watch is not None and watch.task is not None:
            watch.task.cancel()
            try:
                await watch.task
            except (asyncio.CancelledError, Exception):
                pass
        await self.collections.close()

    @tracked("_unlocked_many_rollouts_to_attempted_rollouts")
    async def _unlocked_many_rollouts_to_attempted_rollouts(
        self, c: LightningCollections, rollouts: Sequence[Rollout]
    ) -> List[Union[Rollout, AttemptedRollout]]:
        """Attach latest attempts with one ``rollout_id IN (...)`` query per 500 rollouts (not one per rollout)."""
        if len(rollouts) <= 1:
            return await super()._unlocked_many_rollouts_to_attempted_rollouts(c, rollouts)
        latest: Dict[str, Attempt] = {}
        ids = [r.rollout_id for r in rollouts]
        for start in range(0, len(ids), _IN_CHUNK):
            page = await c.attempts.query(filter={"rollout_id": {"within": ids[start : start + _IN_CHUNK]}})
            for attempt in page.items:
                best = latest.get(attempt.rollout_id)
                if best is None or attempt.sequence_id > best.sequence_id:
                    latest[attempt.rollout_id] = attempt
        out: List[Union[Rollout, AttemptedRollout]] = []
        for rollout in rollouts:
            found = latest.get(rollout.rollout_id)
            out.append(_attach(rollout, found) if found is not None else rollout)
        return out

    async def _query_spans_json_unit(
        self, rollout_id: str, filters: FilterOptions, sort: Optional[SortOptions], limit: int, offset: int
    ) -> bytes:
        """The page as JSON spliced from the stored columns (no span models are built)."""
        async with self._read("spans") as c:
            spans_table = cast(SqlCollection[Span], c.spans)  # this store's units hold its SQL collections
            items, total = await spans_table.query_json(filter=filters, sort=sort, limit=limit, offset=offset)
        return paginated_json_from_items(items, limit, max(offset, 0), total)

    @tracked("_unlocked_get_running_rollouts")
    async def _unlocked_get_running_rollouts(self, c: LightningCollections) -> List[AttemptedRollout]:
        """Watchdog candidates: running rollouts that *have* a timeout or an unresponsiveness limit (the others can
        never be unhealthy), selected in SQL instead of loading every running rollout."""
        rollouts_table = cast(SqlCollection[Rollout], c.rollouts)  # this store's units hold its SQL collections
        rollouts = await rollouts_table.query_json_present(
            ["preparing", "running"], "config", ["timeout_seconds", "unresponsive_seconds"]
        )
        items = await self._unlocked_many_rollouts_to_attempted_rollouts(c, rollouts)
        return [item for item in items if isinstance(item, AttemptedRollout)]

    # ------------------------------------------------------------------------------------------------------------
    # Cross-process wake-ups
    # ------------------------------------------------------------------------------------------------------------

    def _cross_process_poll_interval(self) -> Optional[float]:
        """Called right before a waiter blocks: start this loop's watcher (so waits that return at once never open
        a connection). The watcher wakes waiters within ~100 ms; as a safety net they also re-read every 2 s."""
        loop = asyncio.get_running_loop()
        with self._watches_guard:
            watch = self._watches.get(loop)
            if watch is not None and watch.task is None and not watch.stop.is_set():
                watch.task = loop.create_task(self._watch_loop(watch))
        return 2.0

    def _queue_poll_interval(self) -> Optional[float]:
        """Rollouts queued by other processes sharing the database are noticed within :data:`QUEUE_POLL_SECONDS`
        (one cheap read of the queue size per waiting dequeue and period; this process' own enqueues wake at once)."""
        return QUEUE_POLL_SECONDS

    async def wait_for_rollouts(self, *, rollout_ids: List[str], timeout: float | None = None) -> List[Rollout]:
        """Event-driven in this process; other processes' changes are noticed within ~100 ms (see module doc)."""
        async with self._watching():
            return await super().wait_for_rollouts(rollout_ids=rollout_ids, timeout=timeout)

    @asynccontextmanager
    async def _watching(self) -> AsyncIterator[None]:
        """Keep this loop's cross-process watcher running while the body waits (plus a short grace period, so
        that back-to-back waits -- e.g. an HTTP client polling -- do not reconnect every time)."""
        loop = asyncio.get_running_loop()
        with self._watches_guard:
            watch = self._watches.get(loop)
            if watch is None or watch.stop.is_set() or (watch.task is not None and watch.task.done()):
                watch = self._watches[loop] = _Watch()
            watch.users += 1
        try:
            yield
        finally:
            with self._watches_guard:
                watch.users -= 1
                if watch.users == 0:
                    loop.call_later(WATCH_GRACE_SECONDS, self._maybe_stop, watch)

    def _maybe_stop(self, watch: _Watch) -> None:
        with self._watches_guard:
            if watch.users == 0:
                watch.stop.set()

    async def _watch_loop(self, watch: _Watch) -> None:
        """Run the dialect's watcher until no waiter is left; reconnect on errors."""
        while not watch.stop.is_set():
            try:
                if self.collections.dialect == "sqlite":
                    await self._watch_sqlite(watch)
                else:
                    await self._watch_postgres(watch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # pragma: no cover - depends on database failures
                logger.warning("Cross-process watcher of %s failed (%s); retrying", self.database_url, exc)
                self._wake_waiters()
                try:
                    await asyncio.wait_for(watch.stop.wait(), timeout=0.5)
                except asyncio.TimeoutError:
                    pass

    async def _watch_sqlite(self, watch: _Watch) -> None:
        await self.collections.initialize()
        engine = self.collections._engine_for_loop()
        async with engine.connect() as conn:
            last = (await conn.exec_driver_sql("PRAGMA data_version")).scalar()
            self._wake_waiters()  # changes between the waiter's first read and our first sample
            while not watch.stop.is_set():
                try:
                    await asyncio.wait_for(watch.stop.wait(), timeout=POLL_INTERVAL_SECONDS)
                    break
                except asyncio.TimeoutError:
                    pass
                current = (await conn.exec_driver_sql("PRAGMA data_version")).scalar()
                if current != last:
                    last = current
                    self._wake_waiters()

    async def _watch_postgres(self, watch: _Watch) -> None:
        import asyncpg

        await self.collections.initialize()
        dsn = self.collections.url.set(drivername="postgresql").render_as_string(hide_password=False)
        conn = await asyncpg.connect(dsn, server_settings=dict(self.collections.server_settings))
        lost = asyncio.Event()

        def on_notify(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            if payload:
                self._rollout_waiters.wake_ids(payload.split(","))
            else:
                self._wake_waiters()

        try:
            await conn.add_listener(self._channel, on_notify)
            conn.add_termination_listener(lambda _c: lost.set())
            self._wake_waiters()  # changes between the waiter's first read and LISTEN
            stop = asyncio.ensure_future(watch.stop.wait())
            dead = asyncio.ensure_future(lost.wait())
            try:
                await asyncio.wait({stop, dead}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
                dead.cancel()
            if lost.is_set():
                raise ConnectionError("LISTEN connection lost")
        finally:
            if not conn.is_closed():
                try:
                    await conn.remove_listener(self._channel, on_notify)
                finally:
                    await conn.close()

    @tracked("_unlocked_update_rollout_only")
    async def _unlocked_update_rollout_only(
        self, c: LightningCollections, rollout: Rollout, updates: Dict[str, Any]
    ) -> Rollout:
        """PostgreSQL: a rollout that reaches a terminal status ``NOTIFY``s the other processes' waiters, in the unit
        that writes the status (sent with its writes, delivered when it commits). SQLite relies on ``PRAGMA
        data_version``."""
        updated = await super()._unlocked_update_rollout_only(c, rollout, updates)
        if self.collections.dialect == "postgresql" and updated is not rollout and is_finished(updated):
            await cast(SqlLightningCollections, c).notify(self._channel, updated.rollout_id)
        return updated
