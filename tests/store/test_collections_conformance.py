"""Backend-neutral contract of the collections layer, run over every ``COLLECTION_BACKENDS`` entry.

Every operation runs inside ``collections.atomic(...)`` so that transactional backends can reuse the tests unchanged.
Null ordering follows the in-memory semantics, which the REST layer relies on: ``*_time`` nulls sort
last ascending, other nulls sort as the type's zero (first ascending).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from rollouthub.store.collection.base import DuplicatedPrimaryKeyError
from rollouthub.types import Attempt, ResourcesUpdate, Rollout, Span, Worker

R = TypeVar("R")


async def run(collections: Any, fn: Callable[[Any], Awaitable[R]], *, mode: str = "rw") -> R:
    async with collections.atomic(mode=mode) as c:
        return await fn(c)


def worker(worker_id: str, status: str = "unknown", **fields: Any) -> Worker:
    return Worker(worker_id=worker_id, status=status, **fields)  # type: ignore[arg-type]


def attempt(rollout_id: str, attempt_id: str, sequence_id: int = 1, **fields: Any) -> Attempt:
    fields.setdefault("start_time", 100.0 + sequence_id)
    return Attempt(rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id, **fields)


def rollout(rollout_id: str, **fields: Any) -> Rollout:
    fields.setdefault("input", None)
    fields.setdefault("start_time", 100.0)
    return Rollout(rollout_id=rollout_id, **fields)


def ids(items: Any, field: str = "worker_id") -> list[Any]:
    return [getattr(item, field) for item in items]


FILTER_WORKERS = [
    worker("w1", "busy", current_rollout_id="ro-alpha", last_heartbeat_time=10.0),
    worker("w2", "idle", current_rollout_id=None, last_heartbeat_time=30.0),
    worker("w3", "unknown", current_rollout_id="ro-beta", last_heartbeat_time=None),
    worker("w4", "busy", current_rollout_id="ro-alphabet", last_heartbeat_time=20.0),
]


@pytest.fixture
async def filled(collections: Any) -> Any:
    await run(collections, lambda c: c.workers.insert(FILTER_WORKERS))
    return collections


async def query_workers(collections: Any, filter: Any = None, **kwargs: Any) -> Any:
    return await run(collections, lambda c: c.workers.query(filter=filter, **kwargs), mode="r")


# ---------------------------------------------------------------------------------------------------------------------
# Members
# ---------------------------------------------------------------------------------------------------------------------


async def test_members_primary_keys_and_item_types(collections: Any) -> None:
    async with collections.atomic(mode="r") as c:
        expected = {
            "rollouts": (["rollout_id"], Rollout),
            "attempts": (["rollout_id", "attempt_id"], Attempt),
            "spans": (["rollout_id", "attempt_id", "span_id"], Span),
            "resources": (["resources_id"], ResourcesUpdate),
            "workers": (["worker_id"], Worker),
        }
        for name, (keys, model) in expected.items():
            member = getattr(c, name)
            assert list(member.primary_keys()) == keys, name
            assert member.item_type() is model, name
            assert await member.size() == 0, name
            text = repr(member)
            assert model.__name__ in text, text
        assert c.rollout_queue.item_type() is str
        assert await c.rollout_queue.size() == 0
        assert await c.span_sequence_ids.size() == 0


async def test_execute_returns_callback_result(collections: Any) -> None:
    async def callback(c: Any) -> int:
        await c.workers.insert([worker("w-exec")])
        return await c.workers.size()

    assert await collections.execute(callback, mode="rw", commit=True, labels=["workers"]) == 1
    assert await collections.execute(lambda c: c.workers.size(), mode="r") == 1


async def test_atomic_with_labels(collections: Any) -> None:
    async with collections.atomic(mode="rw", labels=["workers", "rollouts"]) as c:
        await c.workers.insert([worker("w-a")])
        await c.rollouts.insert([rollout("ro-a")])
    async with collections.atomic(mode="r", snapshot=True, labels=["workers"]) as c:
        assert await c.workers.size() == 1
    async with collections.atomic(labels=["generic"]) as c:
        assert await c.rollouts.size() == 1


# ---------------------------------------------------------------------------------------------------------------------
# insert / update / delete / upsert
# ---------------------------------------------------------------------------------------------------------------------


async def test_insert_and_query(collections: Any) -> None:
    await run(collections, lambda c: c.workers.insert([worker("w1"), worker("w2", "busy")]))
    result = await query_workers(collections)
    assert sorted(ids(result)) == ["w1", "w2"]
    assert result.total == 2
    assert await run(collections, lambda c: c.workers.size(), mode="r") == 2
    stored = await run(collections, lambda c: c.workers.get(filter={"worker_id": {"exact": "w2"}}), mode="r")
    assert stored == worker("w2", "busy")


async def test_insert_accepts_tuples(collections: Any) -> None:
    await run(collections, lambda c: c.workers.insert((worker("t1"), worker("t2"))))
    assert sorted(ids(await query_workers(collections))) == ["t1", "t2"]


async def test_insert_duplicate_of_existing(collections: Any) -> None:
    await run(collections, lambda c: c.workers.insert([worker("w1", "busy")]))
    with pytest.raises(DuplicatedPrimaryKeyError, match="(?i)duplicated.*primary key") as info:
        await run(collections, lambda c: c.workers.insert([worker("w1", "idle")]))
    assert isinstance(info.value, ValueError)
    stored = await run(collections, lambda c: c.workers.get(filter={"worker_id": {"exact": "w1"}}), mode="r")
    assert stored.status == "busy"


async def test_insert_duplicate_within_payload_has_no_effect(collections: Any) -> None:
    with pytest.raises(DuplicatedPrimaryKeyError, match="(?i)duplicated.*primary key"):
        await run(collections, lambda c: c.workers.insert([worker("a"), worker("b"), worker("a", "busy")]))
    assert await run(collections, lambda c: c.workers.size(), mode="r") == 0
    assert list(await query_workers(collections)) == []


async def test_insert_composite_primary_key(collections: Any) -> None:
    await run(collections, lambda c: c.attempts.insert([attempt("r1", "a1"), attempt("r2", "a1")]))
    assert await run(collections, lambda c: c.attempts.size(), mode="r") == 2
    with pytest.raises(DuplicatedPrimaryKeyError):
        await run(collections, lambda c: c.attempts.insert([attempt("r1", "a1", 2)]))


async def test_insert_wrong_type(collections: Any) -> None:
    with pytest.raises(TypeError):
        await run(collections, lambda c: c.workers.insert([rollout("ro-1")]))
    assert await run(collections, lambda c: c.workers.size(), mode="r") == 0


async def test_update_replaces_whole_item(collections: Any) -> None:
    await run(collections, lambda c: c.workers.insert([worker("w1", "busy", heartbeat_stats={"a": 1})]))
    updated = await run(collections, lambda c: c.workers.update([worker("w1", "idle")]))
    assert list(updated) == [worker("w1", "idle")]
    stored = await run(collections, lambda c: c.workers.get(filter={"worker_id": {"exact": "w1"}}), mode="r")
    assert stored.status == "idle"
    assert stored.heartbeat_stats is None


async def test_update_selected_fields(collections: Any) -> None:
    original = worker("w1", "busy", heartbeat_stats={"a": 1}, last_heartbeat_time=5.0)
    await run(collections, lambda c: c.workers.insert([original]))
    patch = worker("w1", "idle", heartbeat_stats={"ignored": True}, last_idle_time=9.0)
    updated = await run(collections, lambda c: c.workers.update([patch], update_fields=["status", "last_idle_time"]))
    expected = worker("w1", "idle", heartbeat_stats={"a": 1}, last_heartbeat_time=5.0, last_idle_time=9.0)
    assert list(updated) == [expected]
    stored = await run(collections, lambda c: c.workers.get(filter={"worker_id": {"exact": "w1"}}), mode="r")
    assert stored == expected


async def test_update_missing_raises(collections: Any) -> None:
    with pytest.raises(ValueError):
        await run(collections, lambda c: c.workers.update([worker("ghost")]))
    with pytest.raises(ValueError):
        await run(collections, lambda c: c.attempts.update([attempt("r1", "a1")], update_fields=["status"]))
    assert await run(collections, lambda c: c.workers.size(), mode="r") == 0


async def test_update_composite_key_targets_one_item(collections: Any) -> None:
    await run(collections, lambda c: c.attempts.insert([attempt("r1", "a1"), attempt("r2", "a1")]))
    await run(
        collections, lambda c: c.attempts.update([attempt("r2", "a1", status="failed")], update_fields=["status"])
    )
    items = await run(collections, lambda c: c.attempts.query(sort={"name": "rollout_id", "order": "asc"}), mode="r")
    assert [(a.rollout_id, a.status) for a in items] == [("r1", "preparing"), ("r2", "failed")]


async def test_delete_by_primary_key(collections: Any) -> None:
    await run(collections, lambda c: c.workers.insert([worker("w1", "busy"), worker("w2"), worker("w3")]))
    await run(collections, lambda c: c.workers.delete([worker("w1", "idle")]))
    assert sorted(ids(await query_workers(collections))) == ["w2", "w3"]
    await run(collections, lambda c: c.workers.delete([worker("w2"), worker("w3")]))
    assert await run(collections, lambda c: c.workers.size(), mode="r") == 0
    with pytest.raises(ValueError):
        await run(collections, lambda c: c.workers.delete([worker("w1")]))


async def test_delete_composite_key(collections: Any) -> None:
    await run(collections, lambda c: c.attempts.insert([attempt("r1", "a1"), attempt("r1", "a2", 2)]))
    await run(collections, lambda c: c.attempts.delete([attempt("r1", "a1", 99)]))
    remaining = await run(collections, lambda c: c.attempts.query(), mode="r")
    assert [(a.rollout_id, a.attempt_id) for a in remaining] == [("r1", "a2")]


async def test_upsert_inserts_and_replaces(collections: Any) -> None:
    inserted = await run(collections, lambda c: c.workers.upsert([worker("w1", "busy", heartbeat_stats={"a": 1})]))
    assert list(inserted) == [worker("w1", "busy", heartbeat_stats={"a": 1})]
    replaced = await run(collections, lambda c: c.workers.upsert([worker("w1", "idle"), worker("w2")]))
    assert list(replaced) == [worker("w1", "idle"), worker("w2")]
    stored = await query_workers(collections, sort={"name": "worker_id", "order": "asc"})
    assert list(stored) == [worker("w1", "idle"), worker("w2")]


async def test_upsert_empty_update_fields_is_get_or_insert(collections: Any) -> None:
    await run(collections, lambda c: c.workers.insert([worker("w1", "busy", heartbeat_stats={"a": 1})]))
    result = await run(
        collections, lambda c: c.workers.upsert([worker("w1", "idle"), worker("w2", "idle")], update_fields=[])
    )
    assert list(result) == [worker("w1", "busy", heartbeat_stats={"a": 1}), worker("w2", "idle")]
    stored = await query_workers(collections, sort={"name": "worker_id", "order": "asc"})
    assert list(stored) == [worker("w1", "busy", heartbeat_stats={"a": 1}), worker("w2", "idle")]


async def test_upsert_selected_fields(collections: Any) -> None:
    await run(collections, lambda c: c.workers.insert([worker("w1", "busy", heartbeat_stats={"a": 1})]))
    result = await run(
        collections,
        lambda c: c.workers.upsert(
            [worker("w1", "idle", heartbeat_stats={"b": 2}), worker("w2", "busy", heartbeat_stats={"c": 3})],
            update_fields=["heartbeat_stats"],
        ),
    )
    assert list(result) == [
        worker("w1", "busy", heartbeat_stats={"b": 2}),
        worker("w2", "busy", heartbeat_stats={"c": 3}),
    ]
    stored = await query_workers(collections, sort={"name": "worker_id", "order": "asc"})
    assert list(stored) == list(result)


# ---------------------------------------------------------------------------------------------------------------------
# Filters
# ---------------------------------------------------------------------------------------------------------------------


async def test_no_filter_matches_everything(filled: Any) -> None:
    assert sorted(ids(await query_workers(filled))) == ["w1", "w2", "w3", "w4"]
    assert sorted(ids(await query_workers(filled, {}))) == ["w1", "w2", "w3", "w4"]
    assert sorted(ids(await query_workers(filled, {"_aggregate": "or"}))) == ["w1", "w2", "w3", "w4"]


async def test_exact_filter(filled: Any) -> None:
    assert sorted(ids(await query_workers(filled, {"status": {"exact": "busy"}}))) == ["w1", "w4"]
    assert ids(await query_workers(filled, {"last_heartbeat_time": {"exact": 30.0}})) == ["w2"]
    assert list(await query_workers(filled, {"status": {"exact": "nope"}})) == []


@pytest.mark.parametrize("container", [list, set, tuple])
async def test_within_filter(filled: Any, container: Any) -> None:
    result = await query_workers(filled, {"status": {"within": container(["idle", "unknown"])}})
    assert sorted(ids(result)) == ["w2", "w3"]
    assert list(await query_workers(filled, {"status": {"within": container()}})) == []


async def test_contains_filter_substring_and_null_safety(filled: Any) -> None:
    assert sorted(ids(await query_workers(filled, {"current_rollout_id": {"contains": "alpha"}}))) == ["w1", "w4"]
    assert ids(await query_workers(filled, {"current_rollout_id": {"contains": "phab"}})) == ["w4"]
    # w2 has a null current_rollout_id: never matches, never raises.
    assert sorted(ids(await query_workers(filled, {"current_rollout_id": {"contains": "ro-"}}))) == ["w1", "w3", "w4"]


async def test_none_operand_is_ignored(filled: Any) -> None:
    assert sorted(ids(await query_workers(filled, {"status": {"exact": None}}))) == ["w1", "w2", "w3", "w4"]
    result = await query_workers(filled, {"status": {"exact": "busy", "within": None}})
    assert sorted(ids(result)) == ["w1", "w4"]


async def test_or_with_only_ignored_operands_matches_nothing(filled: Any) -> None:
    assert list(await query_workers(filled, {"_aggregate": "or", "status": {"exact": None}})) == []


async def test_unknown_operator(filled: Any) -> None:
    with pytest.raises(ValueError, match="Unsupported filter operator 'regex' for field 'status'"):
        await query_workers(filled, {"status": {"regex": "b.*"}})


async def test_unknown_aggregate(filled: Any) -> None:
    with pytest.raises(ValueError, match="Unsupported filter aggregate 'xor'"):
        await query_workers(filled, {"_aggregate": "xor", "status": {"exact": "busy"}})


async def test_and_or_pooling(filled: Any) -> None:
    both = {"status": {"exact": "busy"}, "current_rollout_id": {"contains": "bet"}}
    assert ids(await query_workers(filled, both)) == ["w4"]
    assert sorted(ids(await query_workers(filled, {**both, "_aggregate": "or"}))) == ["w1", "w3", "w4"]
    same_field = {"status": {"exact": "busy", "within": ["idle"]}}
    assert list(await query_workers(filled, same_field)) == []
    assert sorted(ids(await query_workers(filled, {**same_field, "_aggregate": "or"}))) == ["w1", "w2", "w4"]


async def test_must_is_always_anded(filled: Any) -> None:
    filter = {
        "_must": {"status": {"within": ["busy", "unknown"]}},
        "_aggregate": "or",
        "current_rollout_id": {"contains": "beta"},
        "worker_id": {"exact": "w1"},
    }
    assert sorted(ids(await query_workers(filled, filter))) == ["w1", "w3"]
    only_must = {"_must": {"status": {"exact": "busy"}}, "_aggregate": "or"}
    assert sorted(ids(await query_workers(filled, only_must))) == ["w1", "w4"]


async def test_must_as_list_of_mappings(filled: Any) -> None:
    filter = {"_must": [{"status": {"exact": "busy"}}, {"current_rollout_id": {"contains": "alphabet"}}]}
    assert ids(await query_workers(filled, filter)) == ["w4"]
    merged = {"_must": [{"status": {"exact": "busy"}}, {"status": {"within": ["busy", "idle"]}}]}
    assert sorted(ids(await query_workers(filled, merged))) == ["w1", "w4"]


async def test_must_validation(filled: Any) -> None:
    with pytest.raises(ValueError, match="Duplicate operator"):
        await query_workers(filled, {"_must": [{"status": {"exact": "busy"}}, {"status": {"exact": "idle"}}]})
    with pytest.raises(TypeError):
        await query_workers(filled, {"_must": "status"})
    with pytest.raises(TypeError):
        await query_workers(filled, {"_must": [{"status": {"exact": "busy"}}, "oops"]})


async def test_or_on_primary_key_does_not_prune_other_subtrees(collections: Any) -> None:
    rows = [
        attempt("r1", "a1", 1, status="running"),
        attempt("r1", "a2", 2, status="failed"),
        attempt("r2", "b1", 1, status="failed"),
        attempt("r3", "c1", 1, status="succeeded"),
    ]
    await run(collections, lambda c: c.attempts.insert(rows))

    async def keys(filter: Any) -> list[tuple[str, str]]:
        result = await run(collections, lambda c: c.attempts.query(filter=filter), mode="r")
        return sorted((a.rollout_id, a.attempt_id) for a in result)

    ored = {"_aggregate": "or", "rollout_id": {"exact": "r1"}, "status": {"exact": "failed"}}
    assert await keys(ored) == [("r1", "a1"), ("r1", "a2"), ("r2", "b1")]
    anded = {"rollout_id": {"exact": "r1"}, "status": {"exact": "failed"}}
    assert await keys(anded) == [("r1", "a2")]
    must = {"_must": {"rollout_id": {"exact": "r2"}}, "_aggregate": "or", "status": {"within": ["failed", "running"]}}
    assert await keys(must) == [("r2", "b1")]
    full = {"rollout_id": {"exact": "r1"}, "attempt_id": {"exact": "a2"}}
    assert await keys(full) == [("r1", "a2")]
    contradictory = {"_must": {"rollout_id": {"exact": "r1"}}, "rollout_id": {"exact": "r2"}}
    assert await keys(contradictory) == []
    by_within = {"rollout_id": {"within": ["r2", "r3"]}}
    assert await keys(by_within) == [("r2", "b1"), ("r3", "c1")]


# ---------------------------------------------------------------------------------------------------------------------
# Sorting
# ---------------------------------------------------------------------------------------------------------------------


async def test_sort_by_string_int_and_float(collections: Any) -> None:
    await run(
        collections,
        lambda c: c.attempts.insert(
            [
                attempt("r1", "a2", 2, start_time=5.5),
                attempt("r1", "a3", 3, start_time=1.5),
                attempt("r1", "a1", 1, start_time=9.0),
            ]
        ),
    )

    async def order(name: str, direction: str) -> list[str]:
        result = await run(collections, lambda c: c.attempts.query(sort={"name": name, "order": direction}), mode="r")
        return [a.attempt_id for a in result]

    assert await order("sequence_id", "asc") == ["a1", "a2", "a3"]
    assert await order("sequence_id", "desc") == ["a3", "a2", "a1"]
    assert await order("attempt_id", "desc") == ["a3", "a2", "a1"]
    assert await order("start_time", "asc") == ["a3", "a2", "a1"]
    assert await order("start_time", "desc") == ["a1", "a2", "a3"]


async def test_sort_order_defaults_to_asc(filled: Any) -> None:
    assert ids(await query_workers(filled, sort={"name": "worker_id"})) == ["w1", "w2", "w3", "w4"]


async def test_sort_time_field_nulls_last_ascending(filled: Any) -> None:
    asc = await query_workers(filled, sort={"name": "last_heartbeat_time", "order": "asc"})
    assert ids(asc) == ["w1", "w4", "w2", "w3"]
    desc = await query_workers(filled, sort={"name": "last_heartbeat_time", "order": "desc"})
    assert ids(desc) == ["w3", "w2", "w4", "w1"]


async def test_sort_non_time_nulls_first_ascending(collections: Any) -> None:
    rows = [rollout("ro-b", mode="val"), rollout("ro-a", mode=None), rollout("ro-c", mode="train")]
    await run(collections, lambda c: c.rollouts.insert(rows))
    asc = await run(collections, lambda c: c.rollouts.query(sort={"name": "mode", "order": "asc"}), mode="r")
    assert [r.mode for r in asc] == [None, "train", "val"]
    desc = await run(collections, lambda c: c.rollouts.query(sort={"name": "mode", "order": "desc"}), mode="r")
    assert [r.mode for r in desc] == ["val", "train", None]

    await run(collections, lambda c: c.attempts.insert([attempt("r", "x", 1, worker_id="w-b"), attempt("r", "y", 2)]))
    by_worker = await run(collections, lambda c: c.attempts.query(sort={"name": "worker_id", "order": "asc"}), mode="r")
    assert [a.worker_id for a in by_worker] == [None, "w-b"]


async def test_sort_validation(filled: Any) -> None:
    with pytest.raises(ValueError, match="Failed to sort items by 'nope'"):
        await query_workers(filled, sort={"name": "nope", "order": "asc"})
    with pytest.raises(ValueError, match="Sort options must include a 'name' field"):
        await query_workers(filled, sort={"name": "", "order": "asc"})
    with pytest.raises(ValueError, match="Sort options must include a 'name' field"):
        await query_workers(filled, sort={"order": "asc"})
    with pytest.raises(ValueError):
        await query_workers(filled, sort={"name": "worker_id", "order": "sideways"})


async def test_sort_by_a_field_without_an_order_is_refused_before_reading(filled: Any) -> None:
    # Objects and lists have no order on any backend (SQL would compare JSON text, memory would raise TypeError).
    message = (
        r"^Failed to sort items by 'heartbeat_stats': field has no order on Worker .*sortable fields are: worker_id"
    )
    with pytest.raises(ValueError, match=message):
        await query_workers(filled, sort={"name": "heartbeat_stats", "order": "asc"})
    with pytest.raises(ValueError, match="Failed to sort items by 'config': field has no order on Rollout"):
        await run(filled, lambda c: c.rollouts.get(sort={"name": "config", "order": "desc"}), mode="r")


# ---------------------------------------------------------------------------------------------------------------------
# Pagination and get
# ---------------------------------------------------------------------------------------------------------------------


async def test_pagination_with_sort(filled: Any) -> None:
    page = await query_workers(filled, sort={"name": "worker_id", "order": "desc"}, limit=2, offset=1)
    assert ids(page) == ["w3", "w2"]
    assert page.total == 4 and page.limit == 2 and page.offset == 1
    zero = await query_workers(filled, limit=0)
    assert list(zero) == [] and zero.total == 4
    beyond = await query_workers(filled, offset=10)
    assert list(beyond) == [] and beyond.total == 4
    filtered = await query_workers(filled, {"status": {"exact": "busy"}}, sort={"name": "worker_id"}, limit=1, offset=1)
    assert ids(filtered) == ["w4"] and filtered.total == 2


async def test_pagination_without_sort_is_consistent(filled: Any) -> None:
    everything = ids(await query_workers(filled))
    pages = [ids(await query_workers(filled, limit=3, offset=offset)) for offset in (0, 3)]
    assert pages[0] + pages[1] == everything
    assert sorted(everything) == ["w1", "w2", "w3", "w4"]


async def test_large_dataset_pages(collections: Any) -> None:
    rows = [worker(f"w{i:04d}", "busy" if i % 3 == 0 else "idle") for i in range(1000)]
    await run(collections, lambda c: c.workers.insert(rows))
    collected: list[str] = []
    for offset in range(0, 1000, 128):
        page = await query_workers(collections, sort={"name": "worker_id", "order": "asc"}, limit=128, offset=offset)
        assert page.total == 1000
        collected.extend(ids(page))
    assert collected == [f"w{i:04d}" for i in range(1000)]
    busy = await query_workers(
        collections, {"status": {"exact": "busy"}}, sort={"name": "worker_id"}, limit=10, offset=330
    )
    assert busy.total == 334
    assert ids(busy) == [f"w{i:04d}" for i in range(990, 1000, 3)]
    unsorted = []
    for offset in range(0, 1000, 300):
        unsorted.extend(ids(await query_workers(collections, limit=300, offset=offset)))
    assert sorted(unsorted) == [f"w{i:04d}" for i in range(1000)]


async def test_get(filled: Any) -> None:
    async def get(**kwargs: Any) -> Any:
        return await run(filled, lambda c: c.workers.get(**kwargs), mode="r")

    assert (await get(filter={"worker_id": {"exact": "w3"}})).worker_id == "w3"
    assert await get(filter={"worker_id": {"exact": "missing"}}) is None
    busy_min = await get(filter={"status": {"exact": "busy"}}, sort={"name": "worker_id", "order": "asc"})
    assert busy_min.worker_id == "w1"
    busy_max = await get(filter={"status": {"exact": "busy"}}, sort={"name": "worker_id", "order": "desc"})
    assert busy_max.worker_id == "w4"
    latest = await get(sort={"name": "last_heartbeat_time", "order": "desc"}, filter={"status": {"exact": "busy"}})
    assert latest.worker_id == "w4"
    either = await get(
        filter={"_aggregate": "or", "status": {"exact": "idle"}, "worker_id": {"exact": "w3"}},
        sort={"name": "worker_id", "order": "desc"},
    )
    assert either.worker_id == "w3"
    any_item = await get()
    assert any_item is not None and any_item.worker_id in {"w1", "w2", "w3", "w4"}


# ---------------------------------------------------------------------------------------------------------------------
# Queue
# ---------------------------------------------------------------------------------------------------------------------


async def test_queue_fifo(collections: Any) -> None:
    async with collections.atomic() as c:
        queue = c.rollout_queue
        assert await queue.enqueue(["a", "b", "c"]) == ["a", "b", "c"]
        assert list(await queue.enqueue(("d",))) == ["d"]
        assert await queue.size() == 4
        assert await queue.has("b") is True
        assert await queue.has("z") is False
        assert list(await queue.peek()) == ["a"]
        assert list(await queue.peek(3)) == ["a", "b", "c"]
        assert await queue.size() == 4
        assert list(await queue.dequeue()) == ["a"]
        assert await queue.has("a") is False
        assert list(await queue.dequeue(2)) == ["b", "c"]
        await queue.enqueue(["e"])
        assert list(await queue.peek(10)) == ["d", "e"]
        assert list(await queue.dequeue(10)) == ["d", "e"]
        assert list(await queue.dequeue()) == []
        assert list(await queue.peek()) == []
        assert await queue.size() == 0


async def test_queue_non_positive_limits(collections: Any) -> None:
    async with collections.atomic() as c:
        await c.rollout_queue.enqueue(["a", "b"])
        assert list(await c.rollout_queue.dequeue(0)) == []
        assert list(await c.rollout_queue.dequeue(-1)) == []
        assert list(await c.rollout_queue.peek(0)) == []
        assert await c.rollout_queue.size() == 2


async def test_queue_wrong_type(collections: Any) -> None:
    with pytest.raises(TypeError):
        await run(collections, lambda c: c.rollout_queue.enqueue([1]))
    assert await run(collections, lambda c: c.rollout_queue.size(), mode="r") == 0


async def test_queue_large_volume(collections: Any) -> None:
    items = [f"ro-{i}" for i in range(1000)]
    await run(collections, lambda c: c.rollout_queue.enqueue(items))
    drained: list[str] = []
    while True:
        batch = await run(collections, lambda c: c.rollout_queue.dequeue(64))
        if not batch:
            break
        drained.extend(batch)
    assert drained == items


# ---------------------------------------------------------------------------------------------------------------------
# KeyValue
# ---------------------------------------------------------------------------------------------------------------------


async def test_key_value_basics(collections: Any) -> None:
    async with collections.atomic() as c:
        kv = c.span_sequence_ids
        assert await kv.get("a") is None
        assert await kv.get("a", 7) == 7
        assert await kv.has("a") is False
        await kv.set("a", 3)
        assert await kv.has("a") is True
        assert await kv.get("a") == 3
        await kv.set("a", 4)
        assert await kv.get("a") == 4
        assert await kv.size() == 1
        assert await kv.pop("a") == 4
        assert await kv.pop("a", 9) == 9
        assert await kv.pop("a") is None
        assert await kv.size() == 0


async def test_key_value_inc_and_chmax(collections: Any) -> None:
    async with collections.atomic() as c:
        kv = c.span_sequence_ids
        assert await kv.inc("r", 1) == 1
        assert await kv.inc("r", 4) == 5
        assert await kv.get("r") == 5
        assert await kv.chmax("r", 3) == 5
        assert await kv.chmax("r", 10) == 10
        assert await kv.get("r") == 10
        assert await kv.chmax("fresh", 6) == 6
        assert await kv.inc("fresh", 1) == 7


async def test_key_value_raise_to(collections: Any) -> None:
    async with collections.atomic() as c:
        kv = c.span_sequence_ids
        await kv.raise_to("r", 4)  # missing key
        assert await kv.get("r") == 4
        await kv.raise_to("r", 2)  # lower: unchanged
        assert await kv.get("r") == 4
        await kv.raise_to("r", 4)
        assert await kv.get("r") == 4
        await kv.raise_to("r", 9)
        assert await kv.get("r") == 9
        assert await kv.inc("r", 1) == 10
        await kv.raise_to("f", 1.5)  # floats go through chmax
        await kv.raise_to("f", 2.5)
        assert await kv.get("f") == 2.5
        await kv.set("text", "not a number")
        with pytest.raises(TypeError):
            await kv.raise_to("text", 3)
        assert await kv.get("text") == "not a number"


@pytest.mark.parametrize("bad", ["1", None, True, [1]])
async def test_key_value_rejects_non_numeric_arguments(collections: Any, bad: Any) -> None:
    async with collections.atomic() as c:
        await c.span_sequence_ids.set("r", 1)
        with pytest.raises(TypeError):
            await c.span_sequence_ids.inc("r", bad)
        with pytest.raises(TypeError):
            await c.span_sequence_ids.chmax("r", bad)
        with pytest.raises(TypeError):
            await c.span_sequence_ids.raise_to("r", bad)
        assert await c.span_sequence_ids.get("r") == 1
