"""In-memory collection primitives and their internals.

Backend-neutral behaviour lives in ``test_collections_conformance.py``; this module covers what is specific to the
in-memory implementation: constructors, the PK-prefix/no-scan optimisation, case-sensitive ``contains``, generic
membership, stable sorting, the lock classes and ``InMemoryLightningCollections.atomic``.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
import uuid
from typing import Any, Optional

import pytest
from pydantic import BaseModel

import rollouthub.store.collection.memory as memory_collections
from rollouthub.store.collection import (
    DequeBasedQueue,
    DictBasedKeyValue,
    InMemoryLightningCollections,
    ListBasedCollection,
)
from rollouthub.store.collection.base import DuplicatedPrimaryKeyError
from rollouthub.store.collection.memory import _item_matches_filters, _LoopAwareAsyncLock, _ThreadSafeAsyncLock
from rollouthub.types import Attempt, Span, Worker
from tests.store.helpers import make_span, run_in_threads

ATOMIC_LABELS = {
    "rollouts",
    "attempts",
    "spans",
    "resources",
    "workers",
    "rollout_queue",
    "span_sequence_ids",
    "generic",
}


class Item(BaseModel):
    key: str
    tags: list[str] = []
    count: int = 0
    note: Optional[str] = None
    payload: Optional[dict[str, Any]] = None
    created_time: Optional[float] = None


def items_collection(*items: Item) -> ListBasedCollection[Item]:
    return ListBasedCollection(list(items), Item, ["key"], id="items")


def keys(result: Any) -> list[str]:
    return [item.key for item in result]


# ---------------------------------------------------------------------------------------------------------------------
# ListBasedCollection construction
# ---------------------------------------------------------------------------------------------------------------------


async def test_list_based_collection_basics() -> None:
    collection = items_collection(Item(key="a"), Item(key="b"))
    assert list(collection.primary_keys()) == ["key"]
    assert collection.item_type() is Item
    assert await collection.size() == 2
    assert collection.collection_name == "items"
    text = repr(collection)
    assert "ListBasedCollection" in text and "Item" in text and "2" in text
    assert keys(await collection.query()) == ["a", "b"]


def test_list_based_collection_requires_primary_keys() -> None:
    with pytest.raises(ValueError, match="primary_keys must be non-empty"):
        ListBasedCollection([], Item, [])


def test_list_based_collection_rejects_dict_subclass() -> None:
    class Record(dict):  # type: ignore[type-arg]
        pass

    with pytest.raises(TypeError):
        ListBasedCollection([], Record, ["key"])


def test_default_collection_name_is_a_uuid() -> None:
    name = ListBasedCollection([], Item, ["key"]).collection_name
    assert str(uuid.UUID(name)) == name
    assert ListBasedCollection([], Item, ["key"]).collection_name != name


def test_initial_items_reject_duplicates() -> None:
    with pytest.raises(DuplicatedPrimaryKeyError):
        ListBasedCollection([Item(key="a"), Item(key="a")], Item, ["key"])


async def test_insertion_order_without_sort() -> None:
    collection = items_collection()
    for name in ["z", "a", "m", "b"]:
        await collection.insert([Item(key=name)])
    assert keys(await collection.query()) == ["z", "a", "m", "b"]
    await collection.delete([Item(key="a")])
    await collection.insert([Item(key="a")])
    assert keys(await collection.query()) == ["z", "m", "b", "a"]


# ---------------------------------------------------------------------------------------------------------------------
# In-memory filter semantics
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def tagged() -> ListBasedCollection[Item]:
    return items_collection(
        Item(key="a", tags=["red", "blue"], count=1, note="Hello World"),
        Item(key="b", tags=["green"], count=2, note=None),
        Item(key="c", tags=[], count=3, note="hello"),
    )


async def test_contains_list_membership(tagged: ListBasedCollection[Item]) -> None:
    assert keys(await tagged.query(filter={"tags": {"contains": "red"}})) == ["a"]
    assert keys(await tagged.query(filter={"tags": {"contains": "re"}})) == []


async def test_contains_is_case_sensitive(tagged: ListBasedCollection[Item]) -> None:
    assert keys(await tagged.query(filter={"note": {"contains": "hello"}})) == ["c"]
    assert keys(await tagged.query(filter={"note": {"contains": "World"}})) == ["a"]
    assert keys(await tagged.query(filter={"note": {"contains": "WORLD"}})) == []


async def test_contains_type_mismatch_is_no_match(tagged: ListBasedCollection[Item]) -> None:
    assert keys(await tagged.query(filter={"count": {"contains": "1"}})) == []
    assert keys(await tagged.query(filter={"_aggregate": "or", "count": {"contains": 1}, "key": {"exact": "b"}})) == [
        "b"
    ]


async def test_within_non_iterable_is_no_match(tagged: ListBasedCollection[Item]) -> None:
    assert keys(await tagged.query(filter={"count": {"within": 5}})) == []
    assert keys(await tagged.query(filter={"count": {"within": [2, 3]}})) == ["b", "c"]


async def test_missing_field_reads_as_none(tagged: ListBasedCollection[Item]) -> None:
    assert keys(await tagged.query(filter={"nonexistent": {"exact": "x"}})) == []
    assert keys(await tagged.query(filter={"nonexistent": {"contains": "x"}})) == []
    assert keys(await tagged.query(filter={"nonexistent": {"exact": None}})) == ["a", "b", "c"]


def test_item_matches_filters_directly() -> None:
    item = Item(key="a", tags=["x"], count=2)
    assert _item_matches_filters(item, None, "and") is True
    assert _item_matches_filters(item, {}, "or") is True
    assert _item_matches_filters(item, {"key": {"exact": "a"}, "count": {"exact": 3}}, "and") is False
    assert _item_matches_filters(item, {"key": {"exact": "a"}, "count": {"exact": 3}}, "or") is True
    assert _item_matches_filters(item, {"key": {"exact": None}}, "and") is True
    assert _item_matches_filters(item, {"key": {"exact": None}}, "or") is False
    assert _item_matches_filters(item, {"key": {"exact": "a"}}, "or", must_filters={"count": {"exact": 3}}) is False
    assert _item_matches_filters(item, None, "and", must_filters={"tags": {"contains": "x"}}) is True


# ---------------------------------------------------------------------------------------------------------------------
# In-memory sorting
# ---------------------------------------------------------------------------------------------------------------------


async def test_sort_is_stable() -> None:
    collection = items_collection(
        Item(key="d", count=1), Item(key="a", count=2), Item(key="c", count=1), Item(key="b", count=2)
    )
    assert keys(await collection.query(sort={"name": "count", "order": "asc"})) == ["d", "c", "a", "b"]
    assert keys(await collection.query(sort={"name": "count", "order": "desc"})) == ["a", "b", "d", "c"]


async def test_sort_nulls_by_annotation() -> None:
    collection = items_collection(
        Item(key="a", note="x", created_time=5.0),
        Item(key="b", note=None, created_time=None),
        Item(key="c", note="", created_time=1.0),
    )
    by_note = await collection.query(sort={"name": "note", "order": "asc"})
    assert keys(by_note)[2] == "a"
    assert set(keys(by_note)[:2]) == {"b", "c"}
    assert keys(await collection.query(sort={"name": "created_time", "order": "asc"})) == ["c", "a", "b"]
    assert keys(await collection.query(sort={"name": "created_time", "order": "desc"})) == ["b", "a", "c"]


async def test_sort_null_with_unsupported_annotation() -> None:
    collection = items_collection(Item(key="a", payload={"x": 1}), Item(key="b", payload=None))
    with pytest.raises(ValueError):
        await collection.query(sort={"name": "payload", "order": "asc"})


async def test_sort_unknown_field_message() -> None:
    with pytest.raises(ValueError, match="^Failed to sort items by 'nope': field does not exist on Item$"):
        await items_collection(Item(key="a")).query(sort={"name": "nope", "order": "asc"})


# ---------------------------------------------------------------------------------------------------------------------
# PK-prefix optimisation and the no-scan guarantee
# ---------------------------------------------------------------------------------------------------------------------


class _Spy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, collection: ListBasedCollection[Attempt]) -> None:
        self.iter_calls = 0
        self.match_calls = 0
        original_iter = collection._iter_items
        original_match = memory_collections._item_matches_filters

        def iter_items(*args: Any, **kwargs: Any) -> Any:
            self.iter_calls += 1
            return original_iter(*args, **kwargs)

        def matches(*args: Any, **kwargs: Any) -> bool:
            self.match_calls += 1
            return original_match(*args, **kwargs)

        monkeypatch.setattr(collection, "_iter_items", iter_items)
        monkeypatch.setattr(memory_collections, "_item_matches_filters", matches)

    def reset(self) -> None:
        self.iter_calls = 0
        self.match_calls = 0


@pytest.fixture
def attempts_tree() -> ListBasedCollection[Attempt]:
    rows = [
        Attempt(
            rollout_id=f"r{r}",
            attempt_id=f"a{a}",
            sequence_id=a,
            start_time=float(a),
            status="failed" if a == 2 else "running",
        )
        for r in range(5)
        for a in range(1, 5)
    ]
    return ListBasedCollection(rows, Attempt, ["rollout_id", "attempt_id"], id="attempts")


async def test_full_primary_key_lookup_does_not_scan(
    monkeypatch: pytest.MonkeyPatch, attempts_tree: ListBasedCollection[Attempt]
) -> None:
    spy = _Spy(monkeypatch, attempts_tree)
    found = await attempts_tree.get(filter={"rollout_id": {"exact": "r3"}, "attempt_id": {"exact": "a2"}})
    assert (found.rollout_id, found.attempt_id) == ("r3", "a2")
    assert spy.iter_calls == 0
    assert spy.match_calls <= 1

    spy.reset()
    must = {"_must": {"rollout_id": {"exact": "r1"}, "attempt_id": {"exact": "a4"}}}
    result = await attempts_tree.query(filter=must)
    assert [(a.rollout_id, a.attempt_id) for a in result] == [("r1", "a4")]
    assert spy.iter_calls == 0

    spy.reset()
    mixed = {"_must": {"rollout_id": {"exact": "r1"}}, "attempt_id": {"exact": "a2"}, "status": {"exact": "running"}}
    assert list(await attempts_tree.query(filter=mixed)) == []
    assert spy.iter_calls == 0

    spy.reset()
    assert await attempts_tree.get(filter={"rollout_id": {"exact": "r9"}, "attempt_id": {"exact": "a1"}}) is None
    assert spy.iter_calls == 0


async def test_primary_key_prefix_scans_only_subtree(
    monkeypatch: pytest.MonkeyPatch, attempts_tree: ListBasedCollection[Attempt]
) -> None:
    spy = _Spy(monkeypatch, attempts_tree)
    result = await attempts_tree.query(filter={"rollout_id": {"exact": "r2"}, "status": {"exact": "running"}})
    assert sorted(a.attempt_id for a in result) == ["a1", "a3", "a4"]
    assert spy.match_calls <= 4

    spy.reset()
    result = await attempts_tree.query(filter={"_must": {"rollout_id": {"exact": "r0"}}})
    assert result.total == 4
    assert spy.match_calls <= 4

    spy.reset()
    result = await attempts_tree.query(filter={"status": {"exact": "failed"}})
    assert result.total == 5
    assert spy.match_calls > 4  # the spy does observe full scans


async def test_contradictory_primary_key_values_short_circuit(
    monkeypatch: pytest.MonkeyPatch, attempts_tree: ListBasedCollection[Attempt]
) -> None:
    spy = _Spy(monkeypatch, attempts_tree)
    result = await attempts_tree.query(filter={"_must": {"rollout_id": {"exact": "r1"}}, "rollout_id": {"exact": "r2"}})
    assert list(result) == [] and result.total == 0
    assert spy.match_calls == 0


# ---------------------------------------------------------------------------------------------------------------------
# DequeBasedQueue and DictBasedKeyValue
# ---------------------------------------------------------------------------------------------------------------------


async def test_deque_queue_initial_items_and_type_checks() -> None:
    queue = DequeBasedQueue(str, items=["a", "b"], id="q")
    assert queue.item_type() is str
    assert queue.collection_name == "q"
    assert await queue.size() == 2
    with pytest.raises(TypeError):
        await queue.has(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await queue.enqueue([b"bytes"])  # type: ignore[list-item]
    assert list(await queue.dequeue(5)) == ["a", "b"]


async def test_dict_key_value_copies_initial_mapping() -> None:
    data = {"a": 1}
    kv = DictBasedKeyValue(data=data, id="kv")
    assert kv.collection_name == "kv"
    await kv.set("b", 2)
    assert await kv.inc("a", 5) == 6
    await kv.pop("b")
    assert data == {"a": 1}
    assert await kv.get("a") == 6


@pytest.mark.parametrize("stored", ["text", True, [1]])
async def test_dict_key_value_rejects_non_numeric_stored_values(stored: Any) -> None:
    kv = DictBasedKeyValue(data={"k": stored})
    with pytest.raises(TypeError):
        await kv.inc("k", 1)
    with pytest.raises(TypeError):
        await kv.chmax("k", 1)
    assert await kv.get("k") == stored


async def test_dict_key_value_accepts_floats() -> None:
    kv = DictBasedKeyValue()
    assert await kv.inc("f", 1.5) == 1.5
    assert await kv.chmax("f", 2.5) == 2.5


# ---------------------------------------------------------------------------------------------------------------------
# Lock classes
# ---------------------------------------------------------------------------------------------------------------------


async def _max_concurrency(lock: Any, tasks: int = 5) -> tuple[int, list[int]]:
    active = 0
    peak = 0
    order: list[int] = []

    async def body(index: int) -> None:
        nonlocal active, peak
        async with lock:
            active += 1
            peak = max(peak, active)
            order.append(index)
            await asyncio.sleep(0.01)
            active -= 1

    await asyncio.gather(*(body(i) for i in range(tasks)))
    return peak, order


@pytest.mark.parametrize("lock_class", [_LoopAwareAsyncLock, _ThreadSafeAsyncLock])
async def test_locks_serialize_tasks(lock_class: Any) -> None:
    peak, order = await _max_concurrency(lock_class())
    assert peak == 1
    assert sorted(order) == list(range(5))


async def test_thread_safe_lock_blocks_other_thread() -> None:
    lock = _ThreadSafeAsyncLock()
    acquired = threading.Event()
    release = threading.Event()
    contender_got_it = threading.Event()

    def holder(_: int) -> None:
        async def hold() -> None:
            async with lock:
                acquired.set()
                await asyncio.to_thread(release.wait, 10)

        asyncio.run(hold())

    def contender(_: int) -> None:
        async def take() -> None:
            async with lock:
                contender_got_it.set()

        asyncio.run(take())

    holder_thread = asyncio.ensure_future(asyncio.to_thread(run_in_threads, 1, holder))
    try:
        assert await asyncio.to_thread(acquired.wait, 5)
        contender_thread = asyncio.ensure_future(asyncio.to_thread(run_in_threads, 1, contender))
        assert not await asyncio.to_thread(contender_got_it.wait, 0.2), "lock did not exclude the other thread"
        release.set()
        await asyncio.wait_for(contender_thread, 10)
        assert contender_got_it.is_set()
    finally:
        release.set()
        await asyncio.wait_for(holder_thread, 10)


async def test_loop_aware_lock_yields_per_loop_asyncio_lock() -> None:
    lock = _LoopAwareAsyncLock()
    async with lock as inner:
        assert isinstance(inner, asyncio.Lock)
        assert inner.locked()
    assert not inner.locked()
    async with lock as again:
        assert again is inner

    seen: dict[str, Any] = {}

    def other_loop(_: int) -> None:
        async def body() -> None:
            async with lock as other:
                seen["lock"] = other
                seen["locked"] = other.locked()

        asyncio.run(body())

    # The other thread gets its own lock even while this loop holds ours (no cross-thread exclusion).
    async with lock:
        await asyncio.wait_for(asyncio.to_thread(run_in_threads, 1, other_loop), 10)
    assert seen["lock"] is not inner
    assert seen["locked"] is True


@pytest.mark.parametrize("lock_class", [_LoopAwareAsyncLock, _ThreadSafeAsyncLock])
async def test_locks_survive_pickling(lock_class: Any) -> None:
    lock = lock_class()
    async with lock:
        restored = pickle.loads(pickle.dumps(lock))
    peak, _ = await _max_concurrency(restored, tasks=3)
    assert peak == 1


# ---------------------------------------------------------------------------------------------------------------------
# InMemoryLightningCollections
# ---------------------------------------------------------------------------------------------------------------------


class RecordingLock:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def __aenter__(self) -> RecordingLock:
        self.log.append(f"enter:{self.name}")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.log.append(f"exit:{self.name}")

    def try_acquire(self) -> bool:
        return False  # always through ``__aenter__``

    def release(self) -> None:
        self.log.append(f"exit:{self.name}")


async def test_thread_safe_lock_try_acquire_and_release() -> None:
    lock = _ThreadSafeAsyncLock()
    assert lock.try_acquire()
    assert lock.locked()
    assert not lock.try_acquire()  # held: not taken again
    lock.release()
    assert not lock.locked()
    async with lock:
        assert not lock.try_acquire()
    assert lock.try_acquire()
    lock.release()


async def test_lock_scope_waits_for_a_held_lock() -> None:
    collections = InMemoryLightningCollections(lock_type="thread")
    lock = collections._lock["workers"]
    assert lock.try_acquire()
    entered = asyncio.Event()

    async def unit() -> None:
        async with collections.atomic(mode="rw", labels=["workers"]):
            entered.set()

    task = asyncio.create_task(unit())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not entered.is_set()  # the unit waits while the lock is held
    lock.release()
    await asyncio.wait_for(task, timeout=5)
    assert entered.is_set() and not lock.locked()


def test_collection_names_and_locks() -> None:
    collections = InMemoryLightningCollections(lock_type="asyncio")
    assert collections.collection_name == "router"
    for name in ["rollouts", "attempts", "spans", "resources", "workers", "rollout_queue", "span_sequence_ids"]:
        assert getattr(collections, name).collection_name == name
    assert set(collections._lock) == ATOMIC_LABELS
    assert all(isinstance(lock, _LoopAwareAsyncLock) for lock in collections._lock.values())
    threaded = InMemoryLightningCollections(lock_type="thread")
    assert set(threaded._lock) == ATOMIC_LABELS
    assert not any(isinstance(lock, _LoopAwareAsyncLock) for lock in threaded._lock.values())


@pytest.mark.parametrize(
    ("kwargs", "expected_enters"),
    [
        ({"mode": "r"}, 0),
        ({"mode": "r", "snapshot": True}, 1),
        ({"mode": "rw"}, 1),
        ({"mode": "w"}, 1),
        ({}, 1),
    ],
)
async def test_atomic_locking_by_mode(kwargs: dict[str, Any], expected_enters: int) -> None:
    collections = InMemoryLightningCollections(lock_type="asyncio")
    log: list[str] = []
    collections._lock = {"default": RecordingLock("default", log)}
    async with collections.atomic(**kwargs) as c:
        assert c.rollouts is collections.rollouts
        assert log == ["enter:default"] * expected_enters
    assert log == ["enter:default", "exit:default"] * expected_enters


async def test_atomic_acquires_labels_in_sorted_order() -> None:
    collections = InMemoryLightningCollections(lock_type="asyncio")
    log: list[str] = []
    collections._lock = {name: RecordingLock(name, log) for name in ["workers", "attempts", "rollouts", "spans"]}
    async with collections.atomic(labels=["workers", "attempts", "rollouts"]):
        assert log == ["enter:attempts", "enter:rollouts", "enter:workers"]
    assert sorted(entry for entry in log if entry.startswith("exit:")) == [
        "exit:attempts",
        "exit:rollouts",
        "exit:workers",
    ]
    log.clear()
    async with collections.atomic():
        assert log == ["enter:attempts", "enter:rollouts", "enter:spans", "enter:workers"]
    assert len(log) == 8


async def test_atomic_has_no_rollback_and_releases_on_error() -> None:
    collections = InMemoryLightningCollections(lock_type="asyncio")
    with pytest.raises(RuntimeError, match="boom"):
        async with collections.atomic(mode="rw", commit=True, labels=["workers"]) as c:
            await c.workers.insert([Worker(worker_id="partial")])
            raise RuntimeError("boom")
    assert await collections.workers.size() == 1

    async def reacquire() -> int:
        async with collections.atomic(mode="rw", labels=["workers"]) as c:
            return await c.workers.size()

    assert await asyncio.wait_for(reacquire(), 5) == 1


async def test_thread_lock_type_excludes_across_threads() -> None:
    collections = InMemoryLightningCollections(lock_type="thread")
    acquired = threading.Event()
    release = threading.Event()
    second_entered = threading.Event()

    def holder(_: int) -> None:
        async def hold() -> None:
            async with collections.atomic(labels=["rollouts"]):
                acquired.set()
                await asyncio.to_thread(release.wait, 10)

        asyncio.run(hold())

    def contender(_: int) -> None:
        async def take() -> None:
            async with collections.atomic(labels=["rollouts"]):
                second_entered.set()

        asyncio.run(take())

    holder_future = asyncio.ensure_future(asyncio.to_thread(run_in_threads, 1, holder))
    try:
        assert await asyncio.to_thread(acquired.wait, 5)
        contender_future = asyncio.ensure_future(asyncio.to_thread(run_in_threads, 1, contender))
        assert not await asyncio.to_thread(second_entered.wait, 0.2)

        # Another label is independent.
        async def other_label() -> None:
            async with collections.atomic(labels=["workers"]):
                pass

        await asyncio.wait_for(other_label(), 5)
        release.set()
        await asyncio.wait_for(contender_future, 10)
        assert second_entered.is_set()
    finally:
        release.set()
        await asyncio.wait_for(holder_future, 10)


async def test_evict_spans_for_rollout() -> None:
    collections = InMemoryLightningCollections(lock_type="asyncio")
    spans: list[Span] = [
        make_span("r1", "a1", 1, span_id="s1"),
        make_span("r1", "a2", 2, span_id="s2"),
        make_span("r2", "b1", 1, span_id="s3"),
    ]
    await collections.spans.insert(spans)
    await collections.evict_spans_for_rollout("r1")
    remaining = await collections.spans.query()
    assert [s.span_id for s in remaining] == ["s3"]
    assert list(await collections.spans.query(filter={"_must": {"rollout_id": {"exact": "r1"}}})) == []
    await collections.evict_spans_for_rollout("r-unknown")
    assert [s.span_id for s in await collections.spans.query()] == ["s3"]
