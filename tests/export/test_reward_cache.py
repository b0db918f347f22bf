"""The final-reward cache of the exports (``rollouthub.export.reward_cache``): what the dashboard's learning curve
re-reads at every refresh. On the real stores -- in memory, SQLite, PostgreSQL and through the HTTP client -- a
refresh reads the spans only of rollouts that changed, a late reward span or a retried attempt shows at the next
refresh, and the cache never holds more than its cap; through the store server's route as the dashboard calls it."""

from __future__ import annotations

import json
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

import aiohttp
import pytest

from rollouthub.export import ExportSelection, iter_export_rows
from rollouthub.export.reward_cache import FinalRewardCache
from rollouthub.store.base import LightningStore
from rollouthub.store.client_server import LightningStoreServer
from rollouthub.types import Attempt, AttemptedRollout, Rollout, Span
from rollouthub.utils.server_launcher import pick_free_port
from tests.store.backends import STORE_BACKENDS

FINISHED = ExportSelection(status_in=["succeeded", "failed"])


def reward_span(rollout_id: str, attempt_id: str, sequence_id: int, value: float) -> Span:
    """A span carrying a final reward (what ``emit_reward`` records)."""
    now = time.time()
    return Span.from_attributes(
        attributes={"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": value},
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        name="agentlightning.annotation",
        start_time=now,
        end_time=now,
    )


async def finished_rollouts(store: LightningStore, rewards: List[Optional[float]]) -> List[str]:
    """One succeeded rollout per reward (``None``: a rollout whose spans carry no reward); their ids in order."""
    ids: List[str] = []
    for i, reward in enumerate(rewards):
        rollout = await store.start_rollout(input={"i": i})
        attempt_id = rollout.attempt.attempt_id
        spans = [
            Span.from_attributes(
                attributes={"step": i},
                rollout_id=rollout.rollout_id,
                attempt_id=attempt_id,
                sequence_id=1,
                name="work",
                start_time=time.time(),
                end_time=time.time(),
            )
        ]
        if reward is not None:
            spans.append(reward_span(rollout.rollout_id, attempt_id, 2, reward))
        await store.add_many_spans(spans)
        await store.update_attempt(rollout.rollout_id, attempt_id, status="succeeded")
        ids.append(rollout.rollout_id)
    return ids


async def rewards_of(
    store: LightningStore, cache: Optional[FinalRewardCache], selection: ExportSelection = FINISHED
) -> Dict[str, Optional[float]]:
    return {
        row["rollout_id"]: row["reward"] async for row in iter_export_rows(store, "rewards", selection, rewards=cache)
    }


@pytest.fixture(params=["memory", "sqlite", "postgres", "http"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[LightningStore]:
    async with STORE_BACKENDS[request.param](scan_debounce_seconds=0.0) as created:
        yield created


# ---------------------------------------------------------------------------------------------------------------------
# The cache on its own
# ---------------------------------------------------------------------------------------------------------------------


def _finished(
    rollout_id: str, attempt_id: str = "at-1", heartbeat: Optional[float] = 1.0, status: str = "succeeded"
) -> Any:
    attempt = Attempt(
        rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=1, start_time=0.0, last_heartbeat_time=heartbeat
    )
    return AttemptedRollout(rollout_id=rollout_id, input={}, start_time=0.0, status=status, attempt=attempt)  # type: ignore[arg-type]


def test_the_cache_never_holds_more_than_its_cap_and_keeps_updating_what_it_holds() -> None:
    cache = FinalRewardCache(max_entries=3)
    for i in range(10):
        cache.store(_finished(f"ro-{i}"), float(i))
        assert len(cache) <= 3
    assert len(cache) == 3
    assert [cache.lookup(_finished(f"ro-{i}")) for i in range(5)] == [
        (True, 0.0),
        (True, 1.0),
        (True, 2.0),
        (False, None),  # a full cache admits no new rollout (a scan in start-time order would evict all of them)
        (False, None),
    ]
    cache.store(_finished("ro-1", heartbeat=2.0), 5.0)  # a newer version of a held rollout replaces its entry
    assert len(cache) == 3
    assert cache.lookup(_finished("ro-1", heartbeat=2.0)) == (True, 5.0)
    assert cache.lookup(_finished("ro-1", heartbeat=1.0)) == (False, None)
    assert cache.lookup(_finished("ro-1", attempt_id="at-2", heartbeat=2.0)) == (False, None)


def test_only_finished_rollouts_with_an_attempt_are_cached() -> None:
    cache = FinalRewardCache()
    running = _finished("ro-run", status="running")
    cache.store(running, 1.0)
    cache.store(Rollout(rollout_id="ro-none", input={}, start_time=0.0, status="succeeded"), 1.0)
    assert len(cache) == 0 and cache.lookup(running) == (False, None)
    for status in ("succeeded", "failed", "cancelled"):
        cache.store(_finished(f"ro-{status}", status=status), None)
        assert cache.lookup(_finished(f"ro-{status}", status=status)) == (True, None)  # "no reward" is cached too


def test_a_zero_cap_disables_the_cache_and_a_negative_one_is_rejected() -> None:
    cache = FinalRewardCache(max_entries=0)
    cache.store(_finished("ro-1"), 1.0)
    assert len(cache) == 0 and cache.lookup(_finished("ro-1")) == (False, None)
    with pytest.raises(ValueError, match="max_entries must be >= 0"):
        FinalRewardCache(max_entries=-1)


# ---------------------------------------------------------------------------------------------------------------------
# On the real stores
# ---------------------------------------------------------------------------------------------------------------------


async def test_a_refresh_reads_only_what_changed_and_shows_late_spans_and_retries(store: LightningStore) -> None:
    ids = await finished_rollouts(store, [0.0, 0.5, None, 1.0])
    cache = FinalRewardCache()
    expected = dict(zip(ids, [0.0, 0.5, None, 1.0], strict=True))
    assert await rewards_of(store, cache) == expected
    assert (cache.hits, cache.misses, len(cache)) == (0, 4, 4)

    assert await rewards_of(store, cache) == expected  # steady state: no span is read
    assert (cache.hits, cache.misses) == (4, 4)

    # A late reward span on a finished rollout (e.g. an exporter flushing after the attempt ended) ...
    late = await store.get_rollout_by_id(ids[2])
    assert isinstance(late, AttemptedRollout)
    await store.add_span(reward_span(ids[2], late.attempt.attempt_id, 3, 0.75))
    # ... and a retried one: a new attempt that ends with another reward.
    retry = await store.start_attempt(ids[1], worker_id="w")
    await store.add_span(reward_span(ids[1], retry.attempt.attempt_id, 5, 0.25))
    hits_before, misses_before = cache.hits, cache.misses
    expected.update({ids[2]: 0.75, ids[1]: 0.25})
    assert await rewards_of(store, cache, ExportSelection(status_in=["running", "preparing", "succeeded"])) == expected
    assert (cache.hits - hits_before, cache.misses - misses_before) == (2, 2)  # only the two changed rollouts
    await store.update_attempt(ids[1], retry.attempt.attempt_id, status="succeeded")
    assert await rewards_of(store, cache) == expected
    # The running rollout was not cached (a running attempt's version changes all the time); the late one was.
    assert (cache.hits - hits_before, cache.misses - misses_before) == (5, 3)

    # A failed retry without a reward span: the rollout's final reward is gone (None), not the cached 0.25.
    retry = await store.start_attempt(ids[1], worker_id="w")
    await store.update_attempt(ids[1], retry.attempt.attempt_id, status="failed")
    expected[ids[1]] = None
    assert await rewards_of(store, cache) == expected
    assert await rewards_of(store, None) == expected  # what an export without a cache reads from the spans


async def test_a_new_attempt_is_noticed_even_when_the_clock_did_not_move(
    store: LightningStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry's version holds the latest attempt's id: a retry whose heartbeat reads the same clock value as the
    previous attempt's (a coarse or frozen clock) still invalidates the cached reward."""

    frozen = float(int(time.time()))
    monkeypatch.setattr(time, "time", lambda: frozen)
    (rollout_id,) = await finished_rollouts(store, [1.0])
    cache = FinalRewardCache()
    assert await rewards_of(store, cache) == {rollout_id: 1.0}
    retry = await store.start_attempt(rollout_id, worker_id="w")
    await store.add_span(reward_span(rollout_id, retry.attempt.attempt_id, 5, 0.5))
    await store.update_attempt(rollout_id, retry.attempt.attempt_id, status="succeeded")
    latest = await store.get_rollout_by_id(rollout_id)
    assert isinstance(latest, AttemptedRollout) and latest.attempt.last_heartbeat_time == frozen
    assert await rewards_of(store, cache) == {rollout_id: 0.5}


async def test_rewards_beyond_the_cap_are_read_from_the_spans(store: LightningStore) -> None:
    values: List[Optional[float]] = [i / 10 for i in range(7)]
    ids = await finished_rollouts(store, values)
    cache = FinalRewardCache(max_entries=3)
    for _ in range(3):
        assert await rewards_of(store, cache) == dict(zip(ids, values, strict=True))
        assert len(cache) == 3
    assert cache.hits == 2 * 3  # the same three rollouts stay cached: the others are read again


async def test_every_export_feeds_the_cache(store: LightningStore) -> None:
    ids = await finished_rollouts(store, [1.0, 0.0])
    cache = FinalRewardCache()
    summary_rows = [row async for row in iter_export_rows(store, "triplets", FINISHED, rewards=cache)]
    assert summary_rows == []  # no LLM call in these rollouts; their final rewards were still computed
    assert await rewards_of(store, cache) == dict(zip(ids, [1.0, 0.0], strict=True))
    assert (cache.hits, cache.misses) == (2, 0)


# ---------------------------------------------------------------------------------------------------------------------
# Through the store server, as the dashboard calls it
# ---------------------------------------------------------------------------------------------------------------------


async def _curve(session: aiohttp.ClientSession, server: LightningStoreServer) -> Dict[str, Optional[float]]:
    url = f"{server.endpoint}/v1/agl/export?format=rewards&status_in=succeeded&status_in=failed"
    async with session.get(url) as response:
        assert response.status == 200
        lines = (await response.text()).splitlines()
    return {row["rollout_id"]: row["reward"] for row in map(json.loads, lines)}


@asynccontextmanager
async def _serve(kind: str) -> AsyncIterator[Tuple[LightningStore, LightningStoreServer]]:
    async with STORE_BACKENDS[kind](scan_debounce_seconds=0.0) as store:
        server = LightningStoreServer(store, "127.0.0.1", pick_free_port(), launch_mode="asyncio")
        await server.start()
        try:
            yield store, server
        finally:
            await server.stop()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_the_servers_learning_curve_sees_late_spans_and_retries_within_its_cap(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUTHUB_REWARD_CACHE_ENTRIES", "3")
    async with _serve(kind) as (store, server), aiohttp.ClientSession() as session:
        ids = await finished_rollouts(store, [0.0, 1.0, 0.5, None, 0.25])
        expected = dict(zip(ids, [0.0, 1.0, 0.5, None, 0.25], strict=True))
        assert await _curve(session, server) == expected
        cache = server.app.state.reward_cache
        assert isinstance(cache, FinalRewardCache) and cache.max_entries == 3 and len(cache) == 3
        assert await _curve(session, server) == expected
        assert cache.hits == 3
        first = await store.get_rollout_by_id(ids[0])
        assert isinstance(first, AttemptedRollout)
        await store.add_span(reward_span(ids[0], first.attempt.attempt_id, 9, 0.9))
        retry = await store.start_attempt(ids[1], worker_id="w")
        await store.add_span(reward_span(ids[1], retry.attempt.attempt_id, 9, 0.1))
        await store.update_attempt(ids[1], retry.attempt.attempt_id, status="succeeded")
        expected.update({ids[0]: 0.9, ids[1]: 0.1})
        assert await _curve(session, server) == expected
        assert len(cache) == 3


async def test_a_bad_cache_size_stops_the_server_with_the_variable_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from rollouthub.store.memory import InMemoryLightningStore

    for value, message in (("-1", "must be 0 .no cache. or a positive number"), ("many", "must be an integer")):
        monkeypatch.setenv("ROLLOUTHUB_REWARD_CACHE_ENTRIES", value)
        with pytest.raises(ValueError, match=f"ROLLOUTHUB_REWARD_CACHE_ENTRIES {message}"):
            LightningStoreServer(InMemoryLightningStore(), "127.0.0.1", pick_free_port(), launch_mode="asyncio")
