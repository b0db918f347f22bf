"""PostgreSQL commit units (``rollouthub.store.collection.sql_batch``): writes deferred into one statement, optimistic
units with row-version guards, the pessimistic fallback, and the round trips of the store's hot operations.

Needs ``ROLLOUTHUB_TEST_POSTGRES_URL`` (skipped with a message without it; CI sets it).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Dict, List

import asyncpg
import pytest

from rollouthub.store.collection.base import DuplicatedPrimaryKeyError
from rollouthub.store.sql import SqlLightningStore
from rollouthub.types import Rollout, Worker
from tests.store.sql_backends import postgres_collections, postgres_store


def _rollout(rollout_id: str, status: str = "queuing") -> Rollout:
    return Rollout(rollout_id=rollout_id, input={"i": rollout_id}, start_time=1.0, status=status)  # type: ignore[arg-type]


def _count_statements(store_or_collections: Any) -> collections.Counter[str]:
    """Count, by first keyword, the statements the pool's connections send from now on."""
    counts: collections.Counter[str] = collections.Counter()
    backend = getattr(store_or_collections, "collections", store_or_collections)
    factory = backend._driver_factory

    def connect_factory() -> Any:
        connect = factory()

        async def logged() -> Any:
            conn = await connect()
            conn.add_query_logger(lambda record: counts.update([record.query.split(None, 1)[0].rstrip(";").upper()]))
            return conn

        return logged

    backend._driver_factory = connect_factory
    return counts


async def _other_connection(collections_obj: Any) -> Any:
    dsn = collections_obj.url.set(drivername="postgresql").render_as_string(hide_password=False)
    return await asyncpg.connect(dsn, server_settings={"search_path": collections_obj.pg_schema})


async def test_hot_store_operations_round_trips() -> None:
    """enqueue: 1 write statement (the latest resources are cached, checked by it); dequeue of a rollout this process
    queued: 1 write statement (the queue entry is remembered, checked by it), without BEGIN/COMMIT; update_attempt of
    the attempt this process just claimed: 1 write (its rollout and attempt are remembered, checked by it; NOTIFY
    included) -- 3 per cycle (21 before the commit units, 8 before the caches). The watchdog's scan (one read) is
    kept out."""
    async with postgres_store(scan_debounce_seconds=3600.0) as store:
        counts = _count_statements(store)
        per_op: Dict[str, int] = {}
        for _ in range(3):  # the first cycle also learns which units need a transaction
            for name, call in (
                ("enqueue", lambda: store.enqueue_rollout({"task": 1})),
                ("dequeue", lambda: store.dequeue_rollout(worker_id="w")),
            ):
                counts.clear()
                result = await call()
                await asyncio.sleep(0)  # query-log records are handed over with call_soon
                per_op[name] = sum(counts.values())
                assert "BEGIN" not in counts and "COMMIT" not in counts, (name, dict(counts))
            counts.clear()
            await store.update_attempt(result.rollout_id, result.attempt.attempt_id, status="succeeded")
            await asyncio.sleep(0)
            per_op["update_attempt"] = sum(counts.values())
            update_counts = dict(counts)
        assert per_op == {"enqueue": 1, "dequeue": 1, "update_attempt": 1}, per_op
        assert "BEGIN" not in update_counts and "COMMIT" not in update_counts
        rollout = await store.get_rollout_by_id(result.rollout_id)
        assert rollout.status == "succeeded" and rollout.attempt.status == "succeeded"
        worker = await store.get_worker_by_id("w")
        assert worker is not None and worker.status == "idle"


async def test_claims_stay_fifo_when_another_store_queues_entries() -> None:
    """The queue mirror of a store knows only its own entries: an entry queued before them by another store (process)
    is claimed first (the mirror's claim fails its head check and runs again in a transaction), entries another store
    claimed are skipped, and every rollout is claimed once, with one attempt."""
    async with postgres_store(scan_debounce_seconds=3600.0) as store:
        backend = store.collections
        other = SqlLightningStore(backend.url.render_as_string(hide_password=False), schema=backend.pg_schema)
        try:
            foreign = await other.enqueue_rollout({"who": "other"})
            mine = [await store.enqueue_rollout({"who": "me", "i": i}) for i in range(3)]
            taken = await other.dequeue_rollout()  # the other store claims the foreign entry ... and one of ours
            assert taken is not None and taken.rollout_id == foreign.rollout_id
            taken = await other.dequeue_rollout()
            assert taken is not None and taken.rollout_id == mine[0].rollout_id
            late = await other.enqueue_rollout({"who": "other", "late": True})
            claimed = [await store.dequeue_rollout(worker_id="w") for _ in range(3)]
            assert [c.rollout_id for c in claimed if c is not None] == [
                mine[1].rollout_id,
                mine[2].rollout_id,
                late.rollout_id,
            ]
            assert await store.dequeue_rollout() is None
            first = await other.enqueue_rollout({"who": "other", "first": True})
            second = await store.enqueue_rollout({"who": "me", "second": True})
            assert (await store.dequeue_rollout()).rollout_id == first.rollout_id  # type: ignore[union-attr]
            assert (await store.dequeue_rollout()).rollout_id == second.rollout_id  # type: ignore[union-attr]
            for rollout in [*mine, late, first, second]:
                attempts = await store.query_attempts(rollout.rollout_id)
                assert [a.sequence_id for a in attempts] == [1]
        finally:
            await other.close()


async def test_optimistic_unit_reruns_when_a_row_it_read_changed() -> None:
    """Another connection changes a row between the unit's read and its write: nothing of the first run is written,
    the unit runs again (in a transaction) and sees the change -- no lost update."""
    async with postgres_collections() as c:
        await c.rollouts.insert([_rollout("ro-1")])
        other = await _other_connection(c)
        runs: List[Dict[str, Any]] = []

        async def callback(view: Any) -> None:
            rollout = await view.rollouts.get(filter={"rollout_id": {"exact": "ro-1"}})
            runs.append(dict(rollout.metadata or {}))
            if len(runs) == 1:  # a concurrent writer, after our read
                await other.execute("UPDATE rollouts SET metadata = '{\"other\": 1}' WHERE rollout_id = 'ro-1'")
            merged = rollout.model_copy(update={"metadata": {**(rollout.metadata or {}), "mine": len(runs)}})
            await view.rollouts.update([merged], update_fields=["metadata"])
            await view.workers.insert([Worker(worker_id=f"w-run{len(runs)}")])

        try:
            await c.execute(callback, mode="rw", commit=True, labels=["rollouts", "workers"])
        finally:
            await other.close()
        assert runs == [{}, {"other": 1}]
        stored = await c.rollouts.get(filter={"rollout_id": {"exact": "ro-1"}})
        assert stored.metadata == {"other": 1, "mine": 2}
        assert [w.worker_id for w in (await c.workers.query()).items] == ["w-run2"]  # the first run wrote nothing


async def test_unit_needing_a_result_mid_way_starts_its_transaction_there() -> None:
    """Popping the queue (its result is needed) cannot be deferred: the optimistic unit starts its transaction at
    that call (its pending writes go with the check of the rows it read) and runs once; a row it read that changed
    before that point makes it run again, with nothing of the first run written."""
    async with postgres_collections() as c:
        await c.rollout_queue.enqueue(["ro-1", "ro-2"])
        await c.rollouts.insert([_rollout("ro-1")])
        other = await _other_connection(c)
        calls: List[int] = []
        names = iter(range(1, 100))

        async def callback(view: Any) -> str:
            calls.append(1)
            await view.rollouts.get(filter={"rollout_id": {"exact": "ro-1"}})
            await view.workers.insert([Worker(worker_id=f"w{next(names)}")])
            if interfere and len(calls) == 1:  # a concurrent writer, after our read
                await other.execute("UPDATE rollouts SET metadata = '{\"other\": 1}' WHERE rollout_id = 'ro-1'")
            return str((await view.rollout_queue.dequeue(1))[0])

        try:
            interfere = False
            assert await c.execute(callback, mode="rw", commit=True, labels=["rollout_queue", "workers"]) == "ro-1"
            assert len(calls) == 1
            calls.clear()
            interfere = True
            assert await c.execute(callback, mode="rw", commit=True, labels=["rollout_queue", "workers"]) == "ro-2"
            assert len(calls) == 2  # the first run found ro-1 changed when it started its transaction
        finally:
            await other.close()
        # w2 belongs to the run that found its read stale: nothing of it was written.
        assert sorted(w.worker_id for w in (await c.workers.query()).items) == ["w1", "w3"]


async def test_deferred_writes_are_all_or_nothing() -> None:
    """A duplicate key or a missing row fails the whole unit: none of its other writes is kept."""
    async with postgres_collections() as c:
        await c.rollouts.insert([_rollout("ro-1")])

        async def duplicate(view: Any) -> None:
            await view.workers.insert([Worker(worker_id="w-dup")])
            await view.rollouts.insert([_rollout("ro-1")])

        with pytest.raises(DuplicatedPrimaryKeyError, match="ro-1"):
            await c.execute(duplicate, mode="rw", commit=True, labels=["rollouts", "workers"])

        async def missing(view: Any) -> None:
            await view.workers.insert([Worker(worker_id="w-missing")])
            await view.rollouts.update([_rollout("ro-nope", "running")], update_fields=["status"])

        with pytest.raises(ValueError, match="ro-nope"):
            await c.execute(missing, mode="rw", commit=True, labels=["rollouts", "workers"])
        assert (await c.workers.query()).items == []


async def test_update_result_and_repeated_row_writes() -> None:
    """Inside a unit ``update`` returns the stored items (it is sent at once); ``write_update`` is deferred; two
    writes of one row in one unit keep the last; a read of a table with pending writes sees them."""
    async with postgres_collections() as c:
        await c.rollouts.insert([_rollout("ro-1")])
        results: List[Any] = []

        async def callback(view: Any) -> int:
            results.append(await view.rollouts.update([_rollout("ro-1", "preparing")], update_fields=["status"]))
            await view.rollouts.write_update([_rollout("ro-1", "running")], update_fields=["status"])
            found = await view.rollouts.get(filter={"rollout_id": {"exact": "ro-1"}})
            return {"running": 1}.get(found.status, 0)

        assert await c.execute(callback, mode="rw", commit=True, labels=["rollouts"]) == 1
        assert [r.status for r in results[-1]] == ["preparing"]
        assert (await c.rollouts.get(filter={"rollout_id": {"exact": "ro-1"}})).status == "running"


async def test_finished_rollout_notifies_other_processes_with_its_unit() -> None:
    """The NOTIFY of a finished rollout is sent by the unit that writes the status (no extra round trip)."""
    async with postgres_store() as store:
        c = store.collections
        listener = await _other_connection(c)
        received: List[str] = []
        await listener.add_listener(store._channel, lambda *args: received.append(args[-1]))
        try:
            rollout = await store.enqueue_rollout({"task": 1})
            claimed = await store.dequeue_rollout(worker_id="w")
            assert claimed is not None and claimed.rollout_id == rollout.rollout_id
            await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, status="failed")
            for _ in range(100):
                if received:
                    break
                await asyncio.sleep(0.02)
        finally:
            await listener.close()
        assert received == [rollout.rollout_id]


async def test_counter_bumps_in_optimistic_units_never_repeat_a_value() -> None:
    """``inc`` in an optimistic unit reads the counter and defers the write under a version guard: concurrent bumps
    re-run the losers, so every unit gets its own block of values; a missing counter is created by the deferred
    writes (concurrent creations: one wins, the others re-run)."""
    async with postgres_collections() as c:
        calls: List[str] = []

        async def bump(view: Any) -> int:
            calls.append("run")
            return int(await view.span_sequence_ids.inc("ro-1", 3))

        assert await c.execute(bump, mode="rw", commit=True, labels=["span_sequence_ids"]) == 3
        assert len(calls) == 1  # created optimistically
        calls.clear()
        assert await c.execute(bump, mode="rw", commit=True, labels=["span_sequence_ids"]) == 6
        assert len(calls) == 1  # optimistic now

        async def one() -> int:
            return int(await c.execute(bump, mode="rw", commit=True, labels=["span_sequence_ids"]))

        ends = await asyncio.gather(*(one() for _ in range(20)))
        assert sorted(ends) == list(range(9, 9 + 3 * 20, 3))
        assert await c.span_sequence_ids.get("ro-1") == 6 + 3 * 20

        async def create(key: str) -> int:
            async def first(view: Any) -> int:
                return int(await view.span_sequence_ids.inc(key, 2))

            return int(await c.execute(first, mode="rw", commit=True, labels=["span_sequence_ids"]))

        assert sorted(await asyncio.gather(*(create("ro-new") for _ in range(8)))) == list(range(2, 18, 2))


def test_postgres_url_names_schema_application_and_pool() -> None:
    """``?schema=``, ``?application_name=`` and ``?pool_size=``/``?max_overflow=`` configure the store from its URL
    (e.g. ``rollouthub store --backend URL``); they are not passed to the driver; bad values are named."""
    from rollouthub.store.collection.sql import SqlLightningCollections

    c = SqlLightningCollections(
        "postgresql://u@db:5432/rh?schema=tenant_a&application_name=rh-a&pool_size=3&max_overflow=1"
    )
    assert c.pg_schema == "tenant_a" and c._pool_size == 3 and c._max_overflow == 1
    assert c.server_settings == {"application_name": "rh-a", "search_path": "tenant_a"}
    assert c.url.query == {}
    assert SqlLightningCollections("postgresql://u@db/rh").server_settings == {"application_name": "rollouthub"}
    with pytest.raises(ValueError, match="pool_size"):
        SqlLightningCollections("postgresql://u@db/rh?pool_size=many")
    with pytest.raises(ValueError, match="max_overflow"):
        SqlLightningCollections("postgresql://u@db/rh?max_overflow=-1")
