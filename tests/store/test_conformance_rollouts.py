"""Conformance: rollout creation, lookup and queries."""

from __future__ import annotations

import time
import warnings
from typing import Any

import pydantic
import pytest

from rollouthub.store.base import UNSET
from rollouthub.types import LLM, Attempt, AttemptedRollout, PaginatedResult, Rollout, RolloutConfig
from tests.store.backends import BackendTraits
from tests.store.helpers import ids_of, make_otel_span

TOTAL_KEYS = ("total_rollouts", "total_attempts", "total_spans", "total_resources", "total_workers")


# ---------------------------------------------------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------------------------------------------------


async def test_statistics_grow_by_one_per_entity(store: Any, traits: BackendTraits) -> None:
    before = await store.statistics()
    for key in TOTAL_KEYS:
        assert before[key] == 0, key

    rollout = await store.start_rollout(input={"q": 1})
    await store.add_otel_span(rollout.rollout_id, rollout.attempt.attempt_id, make_otel_span())
    await store.add_resources({"llm": LLM(endpoint="http://localhost:1/v1", model="m")})
    await store.update_worker("worker-1", heartbeat_stats={"cpu": 0.5})

    after = await store.statistics()
    for key in TOTAL_KEYS:
        assert after[key] == before[key] + 1, key
    if traits.statistics_name is not None:
        assert after["name"] == traits.statistics_name
        assert before["name"] == traits.statistics_name
    assert isinstance(after["uptime"], float)
    assert after["uptime"] > before["uptime"] >= 0.0


# ---------------------------------------------------------------------------------------------------------------------
# enqueue_rollout / start_rollout
# ---------------------------------------------------------------------------------------------------------------------


async def test_enqueue_rollout_echoes_fields(store: Any) -> None:
    before = time.time()
    rollout = await store.enqueue_rollout(
        input={"prompt": "hello"}, mode="train", resources_id="res-explicit", metadata={"k": "v"}
    )
    after = time.time()
    assert type(rollout) is Rollout
    assert rollout.rollout_id.startswith("ro-")
    assert len(rollout.rollout_id) == 15
    assert rollout.input == {"prompt": "hello"}
    assert rollout.mode == "train"
    assert rollout.resources_id == "res-explicit"
    assert rollout.metadata == {"k": "v"}
    assert rollout.status == "queuing"
    assert rollout.end_time is None
    assert rollout.config == RolloutConfig()
    assert before <= rollout.start_time <= after

    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert type(fetched) is Rollout
    assert fetched == rollout


async def test_enqueue_rollout_defaults(store: Any) -> None:
    rollout = await store.enqueue_rollout(input=None)
    assert rollout.input is None
    assert rollout.mode is None
    assert rollout.resources_id is None
    assert rollout.metadata == {}
    assert rollout.config == RolloutConfig()
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched.input is None
    assert fetched.metadata == {}


async def test_enqueue_rollout_stores_given_config(store: Any) -> None:
    config = RolloutConfig(
        timeout_seconds=30.0, unresponsive_seconds=5.0, max_attempts=3, retry_condition=["failed", "timeout"]
    )
    rollout = await store.enqueue_rollout(input="task", config=config)
    assert rollout.config == config
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched.config == config


async def test_enqueue_copies_config_and_metadata(store: Any) -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    metadata = {"a": 1}
    rollout = await store.enqueue_rollout(input="task", config=config, metadata=metadata)
    config.max_attempts = 5
    config.retry_condition.append("timeout")
    metadata["b"] = 2
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched.config == RolloutConfig(max_attempts=2, retry_condition=["failed"])
    assert fetched.metadata == {"a": 1}


async def test_enqueue_accepts_any_json_input(store: Any) -> None:
    inputs: list[Any] = [None, 0, 1.5, "text", [1, "two", None], {"nested": {"list": [1, 2]}}, True]
    rollouts = [await store.enqueue_rollout(input=value) for value in inputs]
    for value, rollout in zip(inputs, rollouts, strict=True):
        fetched = await store.get_rollout_by_id(rollout.rollout_id)
        assert fetched.input == value


async def test_start_rollout_creates_preparing_rollout_and_attempt(store: Any) -> None:
    config = RolloutConfig(timeout_seconds=10.0, max_attempts=2, retry_condition=["timeout"])
    before = time.time()
    rollout = await store.start_rollout(input={"x": 1}, mode="val", config=config, metadata={"m": True})
    after = time.time()

    assert type(rollout) is AttemptedRollout
    assert rollout.rollout_id.startswith("ro-")
    assert rollout.status == "preparing"
    assert rollout.mode == "val"
    assert rollout.metadata == {"m": True}
    assert rollout.config == config
    assert before <= rollout.start_time <= after
    attempt = rollout.attempt
    assert attempt.attempt_id.startswith("at-")
    assert len(attempt.attempt_id) == 11
    assert attempt.rollout_id == rollout.rollout_id
    assert attempt.sequence_id == 1
    assert attempt.status == "preparing"
    assert attempt.start_time == rollout.start_time
    assert attempt.end_time is None
    assert attempt.worker_id is None
    assert attempt.last_heartbeat_time is None

    preparing = await store.query_rollouts(status_in=["preparing"])
    assert ids_of(preparing) == [rollout.rollout_id]
    attempts = await store.query_attempts(rollout.rollout_id)
    assert [a.attempt_id for a in attempts] == [attempt.attempt_id]
    latest = await store.get_latest_attempt(rollout.rollout_id)
    assert latest == attempt
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert type(fetched) is AttemptedRollout
    assert fetched.config == config
    assert fetched.attempt == attempt


async def test_start_rollout_is_not_queued(store: Any) -> None:
    await store.start_rollout(input="direct")
    assert await store.dequeue_rollout() is None


async def test_start_rollout_accepts_unknown_resources_id(store: Any) -> None:
    rollout = await store.start_rollout(input="x", resources_id="rs-does-not-exist")
    assert rollout.resources_id == "rs-does-not-exist"
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched.resources_id == "rs-does-not-exist"


# ---------------------------------------------------------------------------------------------------------------------
# query_rollouts
# ---------------------------------------------------------------------------------------------------------------------


async def _four_rollouts_in_different_states(store: Any) -> dict[str, Rollout]:
    """A: preparing (dequeued), B: failed (attempt failed), C: succeeded (set by user), D: queuing."""
    a = await store.enqueue_rollout(input="a")
    b = await store.enqueue_rollout(input="b")
    c = await store.enqueue_rollout(input="c")
    d = await store.enqueue_rollout(input="d")
    claimed_a = await store.dequeue_rollout()
    assert claimed_a is not None and claimed_a.rollout_id == a.rollout_id
    claimed_b = await store.dequeue_rollout()
    assert claimed_b is not None and claimed_b.rollout_id == b.rollout_id
    await store.update_attempt(b.rollout_id, claimed_b.attempt.attempt_id, status="failed")
    await store.update_rollout(c.rollout_id, status="succeeded")
    return {"a": a, "b": b, "c": c, "d": d}


async def test_query_rollouts_status_counts(store: Any) -> None:
    r = await _four_rollouts_in_different_states(store)
    expected = {"preparing": ["a"], "failed": ["b"], "succeeded": ["c"], "queuing": ["d"], "running": []}
    for status, keys in expected.items():
        result = await store.query_rollouts(status_in=[status])
        assert sorted(ids_of(result)) == sorted(r[k].rollout_id for k in keys), status
        assert result.total == len(keys)
    both = await store.query_rollouts(status_in=["queuing", "failed"])
    assert sorted(ids_of(both)) == sorted([r["b"].rollout_id, r["d"].rollout_id])
    everything = await store.query_rollouts()
    assert isinstance(everything, PaginatedResult)
    assert everything.total == 4 and len(everything) == 4
    assert everything.limit == -1 and everything.offset == 0


async def test_query_rollouts_empty_status_list_matches_nothing(store: Any) -> None:
    await _four_rollouts_in_different_states(store)
    result = await store.query_rollouts(status_in=[])
    assert list(result) == []
    assert result.total == 0
    assert list(await store.query_rollouts(rollout_id_in=[])) == []


async def test_query_rollouts_returns_attempted_rollout_with_newest_attempt(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x")
    first = await store.dequeue_rollout()
    assert first is not None
    second = await store.start_attempt(rollout.rollout_id)
    assert second.attempt.sequence_id == 2
    result = await store.query_rollouts(rollout_id_in=[rollout.rollout_id])
    assert len(result) == 1
    item = result[0]
    assert type(item) is AttemptedRollout
    assert item.attempt.attempt_id == second.attempt.attempt_id
    assert item.attempt.sequence_id == 2


async def test_query_rollouts_mixes_rollout_and_attempted_rollout(store: Any) -> None:
    queued = await store.enqueue_rollout(input="q")
    started = await store.start_rollout(input="s")
    by_id = {item.rollout_id: item for item in await store.query_rollouts()}
    assert type(by_id[queued.rollout_id]) is Rollout
    assert not hasattr(by_id[queued.rollout_id], "attempt")
    assert type(by_id[started.rollout_id]) is AttemptedRollout


async def test_query_rollouts_by_ids(store: Any) -> None:
    r = await _four_rollouts_in_different_states(store)
    several = await store.query_rollouts(rollout_id_in=[r["a"].rollout_id, r["c"].rollout_id])
    assert sorted(ids_of(several)) == sorted([r["a"].rollout_id, r["c"].rollout_id])
    one = await store.query_rollouts(rollout_id_in=[r["d"].rollout_id])
    assert ids_of(one) == [r["d"].rollout_id]
    assert one[0].status == "queuing"
    unknown = await store.query_rollouts(rollout_id_in=["ro-unknown00000"])
    assert list(unknown) == [] and unknown.total == 0
    combined = await store.query_rollouts(rollout_id_in=[r["a"].rollout_id, r["b"].rollout_id], status_in=["preparing"])
    assert ids_of(combined) == [r["a"].rollout_id]


async def test_query_rollouts_id_contains(store: Any) -> None:
    r = await _four_rollouts_in_different_states(store)
    all_ids = [x.rollout_id for x in r.values()]
    suffix = r["b"].rollout_id[-6:]
    result = await store.query_rollouts(rollout_id_contains=suffix)
    assert sorted(ids_of(result)) == sorted(i for i in all_ids if suffix in i)
    assert r["b"].rollout_id in ids_of(result)
    assert list(await store.query_rollouts(rollout_id_contains="no-such-substring")) == []


async def test_query_rollouts_sort_desc_with_pagination(store: Any) -> None:
    r = await _four_rollouts_in_different_states(store)
    expected = sorted((x.rollout_id for x in r.values()), reverse=True)
    page = await store.query_rollouts(sort_by="rollout_id", sort_order="desc", limit=2, offset=1)
    assert ids_of(page) == expected[1:3]
    assert page.total == 4
    assert page.limit == 2
    assert page.offset == 1
    asc = await store.query_rollouts(sort_by="rollout_id")
    assert ids_of(asc) == sorted(expected)


async def test_query_rollouts_sort_by_start_time(store: Any) -> None:
    created = [await store.enqueue_rollout(input=i) for i in range(4)]
    asc = await store.query_rollouts(sort_by="start_time", sort_order="asc")
    assert [x.start_time for x in asc] == sorted(x.start_time for x in created)
    desc = await store.query_rollouts(sort_by="start_time", sort_order="desc")
    assert [x.start_time for x in desc] == sorted((x.start_time for x in created), reverse=True)


async def test_query_rollouts_or_of_status_and_ids(store: Any) -> None:
    r = await _four_rollouts_in_different_states(store)
    result = await store.query_rollouts(status_in=["failed"], rollout_id_in=[r["d"].rollout_id], filter_logic="or")
    assert sorted(ids_of(result)) == sorted([r["b"].rollout_id, r["d"].rollout_id])
    anded = await store.query_rollouts(status_in=["failed"], rollout_id_in=[r["d"].rollout_id], filter_logic="and")
    assert list(anded) == []


async def test_query_rollouts_and_vs_or_with_contains(store: Any) -> None:
    r = await _four_rollouts_in_different_states(store)
    queuing_id = r["d"].rollout_id
    anded = await store.query_rollouts(status_in=["failed"], rollout_id_contains=queuing_id)
    assert list(anded) == []
    ored = await store.query_rollouts(status_in=["failed"], rollout_id_contains=queuing_id, filter_logic="or")
    assert sorted(ids_of(ored)) == sorted([r["b"].rollout_id, queuing_id])


async def test_query_rollouts_or_sort_and_pagination(store: Any) -> None:
    r = await _four_rollouts_in_different_states(store)
    matches = sorted([r["a"].rollout_id, r["b"].rollout_id, r["d"].rollout_id])
    page = await store.query_rollouts(
        status_in=["queuing", "preparing"],
        rollout_id_in=[r["b"].rollout_id],
        filter_logic="or",
        sort_by="rollout_id",
        sort_order="asc",
        limit=2,
        offset=1,
    )
    assert ids_of(page) == matches[1:3]
    assert page.total == 3
    assert page.limit == 2
    assert page.offset == 1


async def test_query_rollouts_offset_and_limit_edges(store: Any) -> None:
    for i in range(3):
        await store.enqueue_rollout(input=i)
    zero = await store.query_rollouts(limit=0)
    assert list(zero) == [] and zero.total == 3
    past = await store.query_rollouts(offset=10)
    assert list(past) == [] and past.total == 3


async def test_query_rollouts_deprecated_aliases(store: Any) -> None:
    r = await _four_rollouts_in_different_states(store)
    with pytest.warns(DeprecationWarning, match="status is deprecated, use status_in instead"):
        by_status = await store.query_rollouts(status=["failed"])
    assert ids_of(by_status) == [r["b"].rollout_id]
    with pytest.warns(DeprecationWarning, match="rollout_ids is deprecated, use rollout_id_in instead"):
        by_ids = await store.query_rollouts(rollout_ids=[r["c"].rollout_id])
    assert ids_of(by_ids) == [r["c"].rollout_id]


async def test_query_rollouts_new_names_win_over_deprecated(store: Any) -> None:
    r = await _four_rollouts_in_different_states(store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        result = await store.query_rollouts(status_in=["queuing"], status=["failed"])
        assert ids_of(result) == [r["d"].rollout_id]
        result = await store.query_rollouts(rollout_id_in=[r["a"].rollout_id], rollout_ids=[r["b"].rollout_id])
        assert ids_of(result) == [r["a"].rollout_id]


# ---------------------------------------------------------------------------------------------------------------------
# query_attempts / get_latest_attempt
# ---------------------------------------------------------------------------------------------------------------------


async def test_query_attempts_sorting_and_pagination(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    await store.start_attempt(rollout.rollout_id)
    await store.start_attempt(rollout.rollout_id)

    default = await store.query_attempts(rollout.rollout_id)
    assert [a.sequence_id for a in default] == [1, 2, 3]
    assert all(isinstance(a, Attempt) for a in default)
    desc = await store.query_attempts(rollout.rollout_id, sort_by="sequence_id", sort_order="desc")
    assert [a.sequence_id for a in desc] == [3, 2, 1]
    page = await store.query_attempts(rollout.rollout_id, limit=1, offset=1)
    assert [a.sequence_id for a in page] == [2]
    assert page.total == 3 and page.limit == 1 and page.offset == 1
    past = await store.query_attempts(rollout.rollout_id, offset=5)
    assert list(past) == [] and past.total == 3
    zero = await store.query_attempts(rollout.rollout_id, limit=0)
    assert list(zero) == [] and zero.total == 3

    latest = await store.get_latest_attempt(rollout.rollout_id)
    assert latest is not None and latest.sequence_id == 3


async def test_query_attempts_unknown_or_unattempted_rollout(store: Any) -> None:
    unknown = await store.query_attempts("ro-missing")
    assert list(unknown) == [] and unknown.total == 0
    assert await store.get_latest_attempt("ro-missing") is None
    queued = await store.enqueue_rollout(input="q")
    assert list(await store.query_attempts(queued.rollout_id)) == []
    assert await store.get_latest_attempt(queued.rollout_id) is None


async def test_query_attempts_scoped_to_rollout(store: Any) -> None:
    first = await store.start_rollout(input=1)
    second = await store.start_rollout(input=2)
    await store.start_attempt(second.rollout_id)
    assert [a.rollout_id for a in await store.query_attempts(first.rollout_id)] == [first.rollout_id]
    assert [a.sequence_id for a in await store.query_attempts(second.rollout_id)] == [1, 2]


# ---------------------------------------------------------------------------------------------------------------------
# get_rollout_by_id
# ---------------------------------------------------------------------------------------------------------------------


async def test_get_rollout_by_id(store: Any) -> None:
    attempted = await store.enqueue_rollout(input="attempted")
    plain = await store.enqueue_rollout(input="plain")
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == attempted.rollout_id

    got = await store.get_rollout_by_id(attempted.rollout_id)
    assert type(got) is AttemptedRollout
    assert got.attempt.attempt_id == claimed.attempt.attempt_id
    assert got.status == "preparing"

    got_plain = await store.get_rollout_by_id(plain.rollout_id)
    assert type(got_plain) is Rollout
    assert not hasattr(got_plain, "attempt")

    assert await store.get_rollout_by_id("ro-nonexistent") is None

    await store.update_rollout(plain.rollout_id, metadata={"updated": True})
    refreshed = await store.get_rollout_by_id(plain.rollout_id)
    assert refreshed.metadata == {"updated": True}


async def test_get_rollout_by_id_carries_latest_attempt(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    newest = await store.start_attempt(rollout.rollout_id)
    got = await store.get_rollout_by_id(rollout.rollout_id)
    assert got.attempt.attempt_id == newest.attempt.attempt_id
    assert got.attempt.sequence_id == 2


# ---------------------------------------------------------------------------------------------------------------------
# update_rollout
# ---------------------------------------------------------------------------------------------------------------------


async def test_update_rollout_changes_several_fields(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x", mode="train", metadata={"old": 1})
    other = await store.enqueue_rollout(input="y")
    new_config = RolloutConfig(timeout_seconds=5.0, max_attempts=4, retry_condition=["unresponsive"])
    updated = await store.update_rollout(
        rollout.rollout_id,
        input={"new": "input"},
        status="running",
        mode="test",
        resources_id="rs-custom",
        config=new_config,
        metadata={"new": 2},
    )
    assert type(updated) is Rollout
    assert updated.rollout_id == rollout.rollout_id
    assert updated.input == {"new": "input"}
    assert updated.status == "running"
    assert updated.mode == "test"
    assert updated.resources_id == "rs-custom"
    assert updated.config == new_config
    assert updated.metadata == {"new": 2}
    assert updated.start_time == rollout.start_time

    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched.status == "running"
    assert fetched.mode == "test"
    assert fetched.config == new_config
    assert fetched.metadata == {"new": 2}
    untouched = await store.get_rollout_by_id(other.rollout_id)
    assert untouched.config == RolloutConfig()
    assert untouched.status == "queuing"


async def test_update_rollout_unset_keeps_and_none_clears(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x", mode="train", resources_id="rs-1", metadata={"a": 1})
    kept = await store.update_rollout(rollout.rollout_id, mode=UNSET, metadata=UNSET)
    assert kept.mode == "train" and kept.metadata == {"a": 1} and kept.resources_id == "rs-1"
    cleared = await store.update_rollout(rollout.rollout_id, mode=None, resources_id=None, metadata=None)
    assert cleared.mode is None
    assert cleared.resources_id is None
    assert cleared.metadata is None
    assert cleared.input == "x"
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched.mode is None and fetched.resources_id is None and fetched.metadata is None


async def test_update_rollout_replaces_metadata_wholesale(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x", metadata={"a": 1, "b": 2})
    updated = await store.update_rollout(rollout.rollout_id, metadata={"c": 3})
    assert updated.metadata == {"c": 3}


async def test_update_rollout_returns_plain_rollout_for_attempted(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    updated = await store.update_rollout(rollout.rollout_id, metadata={"k": 1})
    assert type(updated) is Rollout
    assert not hasattr(updated, "attempt")
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt == rollout.attempt


async def test_update_rollout_does_not_touch_attempts(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="running")
    await store.update_rollout(rollout.rollout_id, status="succeeded")
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt.status == "running"
    assert attempt.end_time is None


async def test_update_rollout_rejects_invalid_values(store: Any, traits: BackendTraits) -> None:
    rollout = await store.enqueue_rollout(input="x")
    with traits.raises(pydantic.ValidationError):
        await store.update_rollout(rollout.rollout_id, status="bogus")
    with traits.raises(pydantic.ValidationError):
        await store.update_rollout(rollout.rollout_id, mode="bogus")
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched.status == "queuing"
    assert fetched.mode is None
