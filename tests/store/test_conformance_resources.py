"""Conformance: resources snapshots."""

from __future__ import annotations

import asyncio
from typing import Any

from rollouthub.types import LLM, EnqueueRolloutRequest, PromptTemplate, ResourcesUpdate
from tests.store.conftest import FakeClock


def _llm(model: str = "model-a") -> LLM:
    return LLM(endpoint="http://localhost:8000/v1", model=model, sampling_parameters={"temperature": 0.5})


def _prompt(text: str = "Hello {name}") -> PromptTemplate:
    return PromptTemplate(template=text, engine="f-string")


async def test_add_resources_creates_latest_snapshot(store: Any) -> None:
    update = await store.add_resources({"main_llm": _llm(), "prompt": _prompt()})
    assert isinstance(update, ResourcesUpdate)
    assert update.resources_id.startswith("rs-")
    assert len(update.resources_id) == 15
    assert update.version == 1
    assert update.create_time == update.update_time
    assert update.create_time > 0
    assert isinstance(update.resources["main_llm"], LLM)
    assert isinstance(update.resources["prompt"], PromptTemplate)

    latest = await store.get_latest_resources()
    assert latest is not None
    assert latest.resources_id == update.resources_id
    by_id = await store.get_resources_by_id(update.resources_id)
    assert by_id == update
    assert type(by_id.resources["main_llm"]) is LLM
    assert type(by_id.resources["prompt"]) is PromptTemplate
    assert by_id.resources["main_llm"].model == "model-a"
    assert by_id.resources["main_llm"].sampling_parameters == {"temperature": 0.5}
    assert by_id.resources["prompt"].template == "Hello {name}"


async def test_two_adds_give_two_ids_and_second_is_latest(store: Any) -> None:
    first = await store.add_resources({"llm": _llm("one")})
    second = await store.add_resources({"llm": _llm("two")})
    assert first.resources_id != second.resources_id
    latest = await store.get_latest_resources()
    assert latest.resources_id == second.resources_id
    assert (await store.get_resources_by_id(first.resources_id)).resources["llm"].model == "one"


async def test_empty_named_resources_are_valid(store: Any) -> None:
    update = await store.add_resources({})
    assert update.resources == {}
    assert (await store.get_resources_by_id(update.resources_id)).resources == {}


async def test_empty_store_has_no_resources(store: Any) -> None:
    assert await store.get_latest_resources() is None
    assert await store.get_resources_by_id("any-id") is None
    empty = await store.query_resources()
    assert list(empty) == [] and empty.total == 0


async def test_update_resources_upserts_and_moves_latest(store: Any) -> None:
    v1 = await store.update_resources("v1", {"llm": _llm("m1")})
    assert v1.resources_id == "v1"
    assert v1.version == 1
    assert v1.create_time == v1.update_time
    assert (await store.get_latest_resources()).resources_id == "v1"

    v2 = await store.update_resources("v2", {"llm": _llm("m2")})
    assert (await store.get_latest_resources()).resources_id == "v2"
    assert v2.version == 1
    still_v1 = await store.get_resources_by_id("v1")
    assert still_v1.resources["llm"].model == "m1"


async def test_query_resources_lists_added_and_upserted(store: Any) -> None:
    added = await store.add_resources({"llm": _llm()})
    await store.update_resources("custom", {"prompt": _prompt()})
    result = await store.query_resources()
    assert result.total == 2
    assert sorted(r.resources_id for r in result) == sorted([added.resources_id, "custom"])


async def test_query_resources_filters_sort_and_pagination(store: Any) -> None:
    for rid in ["test-001", "test-002", "prod-003", "prod-004", "dev-005"]:
        await store.update_resources(rid, {"llm": _llm(rid)})

    contains = await store.query_resources(resources_id_contains="test-")
    assert sorted(r.resources_id for r in contains) == ["test-001", "test-002"]
    assert contains.total == 2
    assert [r.resources_id for r in await store.query_resources(resources_id_contains="-003")] == ["prod-003"]

    exact = await store.query_resources(resources_id="prod-004")
    assert [r.resources_id for r in exact] == ["prod-004"]
    both = await store.query_resources(resources_id="prod-004", resources_id_contains="prod")
    assert [r.resources_id for r in both] == ["prod-004"]
    conflicting = await store.query_resources(resources_id="prod-004", resources_id_contains="test")
    assert list(conflicting) == []

    desc = await store.query_resources(sort_by="resources_id", sort_order="desc")
    assert [r.resources_id for r in desc] == ["test-002", "test-001", "prod-004", "prod-003", "dev-005"]
    page = await store.query_resources(sort_by="resources_id", sort_order="desc", limit=2, offset=1)
    assert [r.resources_id for r in page] == ["test-001", "prod-004"]
    assert page.total == 5 and page.limit == 2 and page.offset == 1

    filtered_pages = [
        await store.query_resources(resources_id_contains="d", sort_by="resources_id", limit=2, offset=offset)
        for offset in (0, 2)
    ]
    assert [r.resources_id for r in filtered_pages[0]] == ["dev-005", "prod-003"]
    assert [r.resources_id for r in filtered_pages[1]] == ["prod-004"]
    assert filtered_pages[0].total == filtered_pages[1].total == 3

    beyond = await store.query_resources(offset=10)
    assert list(beyond) == [] and beyond.total == 5

    for snapshot in await store.query_resources():
        assert snapshot.create_time > 0
        assert snapshot.update_time > 0
        assert snapshot.version >= 1


async def test_resource_versions_and_times(store: Any) -> None:
    added = await store.add_resources({"llm": _llm("v1")})
    assert added.version == 1
    assert added.update_time == added.create_time

    versions = []
    previous = added
    for i in range(2, 6):
        updated = await store.update_resources(added.resources_id, {"llm": _llm(f"v{i}")})
        assert updated.create_time == added.create_time
        assert updated.update_time > previous.update_time
        versions.append(updated.version)
        previous = updated
    assert versions == [2, 3, 4, 5]
    stored = await store.get_resources_by_id(added.resources_id)
    assert stored.version == 5
    assert stored.resources["llm"].model == "v5"
    assert stored.create_time == added.create_time

    other = await store.update_resources("independent", {"llm": _llm()})
    assert other.version == 1
    other = await store.update_resources("independent", {"llm": _llm()})
    assert other.version == 2
    assert (await store.get_resources_by_id(added.resources_id)).version == 5


async def test_update_of_older_snapshot_makes_it_latest(store: Any) -> None:
    first = await store.add_resources({"llm": _llm("first")})
    second = await store.add_resources({"llm": _llm("second")})
    assert (await store.get_latest_resources()).resources_id == second.resources_id
    await store.update_resources(first.resources_id, {"llm": _llm("first-updated")})
    latest = await store.get_latest_resources()
    assert latest.resources_id == first.resources_id
    assert latest.resources["llm"].model == "first-updated"


async def test_update_time_uses_clock(fake_clock: FakeClock, store: Any, traits: Any) -> None:
    traits.require("in_process_clock")
    created_at = fake_clock.now
    added = await store.add_resources({"llm": _llm()})
    assert added.create_time == created_at == added.update_time
    fake_clock.advance(3.0)
    updated = await store.update_resources(added.resources_id, {"llm": _llm("b")})
    assert updated.create_time == created_at
    assert updated.update_time == created_at + 3.0


async def test_rollouts_inherit_latest_resources(store: Any) -> None:
    no_resources = await store.enqueue_rollout(input="none")
    assert no_resources.resources_id is None

    first = await store.add_resources({"llm": _llm("one")})
    inherited = await store.enqueue_rollout(input="inherit")
    assert inherited.resources_id == first.resources_id
    started = await store.start_rollout(input="start")
    assert started.resources_id == first.resources_id
    explicit = await store.enqueue_rollout(input="explicit", resources_id="rs-explicit")
    assert explicit.resources_id == "rs-explicit"

    second = await store.update_resources("second", {"llm": _llm("two")})
    later = await store.enqueue_rollout(input="later")
    assert later.resources_id == second.resources_id
    assert (await store.get_rollout_by_id(inherited.rollout_id)).resources_id == first.resources_id

    batch = await store.enqueue_many_rollouts(
        [EnqueueRolloutRequest(input=1), EnqueueRolloutRequest(input=2, resources_id="rs-own")]
    )
    assert [r.resources_id for r in batch] == ["second", "rs-own"]


async def test_concurrent_update_resources(store: Any) -> None:
    ids = [f"concurrent-{i:02d}" for i in range(50)]
    results = await asyncio.gather(*(store.update_resources(rid, {"llm": _llm(rid)}) for rid in ids))
    assert sorted(r.resources_id for r in results) == ids
    for rid in ids:
        stored = await store.get_resources_by_id(rid)
        assert stored is not None
        assert stored.resources["llm"].model == rid
        assert stored.version == 1
    assert (await store.query_resources()).total == 50
    latest = await store.get_latest_resources()
    assert latest.resources_id in ids
