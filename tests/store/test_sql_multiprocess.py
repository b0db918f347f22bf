"""SQL backend shared by several processes: durability across ``kill -9``, exactly-once claims, unique sequence ids,
and cross-process ``wait_for_rollouts`` latency (SQLite file and PostgreSQL database)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Dict, List

import pytest

from rollouthub.types import EnqueueRolloutRequest, Rollout
from tests.store.helpers import wait_until
from tests.store.sql_backends import open_target_store, sql_target

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgres", "postgres_plain"])
async def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[str, str]]:
    """A fresh database; ``postgres_plain``: PostgreSQL with the fast path off in this process and its children."""
    if request.param == "postgres_plain":
        monkeypatch.setenv("ROLLOUTHUB_PG_FAST_PATH", "0")
    async with sql_target(request.param.removesuffix("_plain")) as created:
        yield created


class Child:
    """A ``tests.store._sql_child`` process whose stdout is read line by line (JSON objects)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[dict[str, Any]] = []

    @classmethod
    async def start(cls, *args: str) -> Child:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.store._sql_child",
            *args,
            cwd=str(ROOT),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def read(self, timeout: float = 60.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        if not line:
            stderr = await self.proc.stderr.read() if self.proc.stderr else b""
            raise AssertionError(f"child exited early: {stderr.decode()[-2000:]}")
        item = json.loads(line)
        self.lines.append(item)
        return item

    async def read_until(self, kind: str, timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            item = await self.read(max(deadline - time.monotonic(), 0.1))
            if item["kind"] == kind:
                return item

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def finish(self, timeout: float = 120.0) -> None:
        rc = await asyncio.wait_for(self.proc.wait(), timeout)
        if rc != 0:
            stderr = await self.proc.stderr.read() if self.proc.stderr else b""
            raise AssertionError(f"child failed ({rc}): {stderr.decode()[-2000:]}")


async def test_kill_9_keeps_every_acknowledged_write(target: tuple[str, str]) -> None:
    url, schema = target
    timeout_seconds = 1.0
    child = await Child.start("load", url, schema, str(timeout_seconds))
    try:
        # Let it run until a few hundred writes were acknowledged, then kill it in the middle of its loop.
        while sum(1 for line in child.lines if line["kind"] == "span") < 60:
            await child.read()
    finally:
        await child.kill()
    # Drain what was printed before the kill (it is acknowledged too).
    assert child.proc.stdout is not None
    for raw in (await child.proc.stdout.read()).splitlines():
        if raw.strip():
            try:
                child.lines.append(json.loads(raw))
            except json.JSONDecodeError:  # a torn last line: that write was not acknowledged
                pass
    enqueued = [line["rollout_id"] for line in child.lines if line["kind"] == "enqueued"]
    dequeued = {line["rollout_id"] for line in child.lines if line["kind"] == "dequeued"}
    spans = [
        (line["rollout_id"], line["attempt_id"], line["span_id"]) for line in child.lines if line["kind"] == "span"
    ]

    store = open_target_store(url, schema, scan_debounce_seconds=0.0)
    try:
        stored = await store.query_rollouts(rollout_id_in=enqueued)
        assert {r.rollout_id for r in stored} == set(enqueued)
        for rollout_id, attempt_id, span_id in spans:
            found = await store.query_spans(rollout_id, attempt_id, span_id=span_id)
            assert [s.span_id for s in found] == [span_id]
        # Rollouts the child never claimed are still queued (in FIFO order); the killed worker's in-flight attempts
        # time out after `timeout_seconds` and are requeued by the watchdog (max_attempts=2, retry on timeout), so
        # eventually every acknowledged rollout is claimed again here -- exactly once.
        never_claimed = [r for r in enqueued if r not in dequeued]
        claims: dict[str, int] = {}
        order: list[str] = []

        async def everything_reclaimed() -> bool:
            for rollout in await store.dequeue_many_rollouts(limit=50, worker_id="survivor"):
                assert rollout.rollout_id not in claims, "claimed twice"
                claims[rollout.rollout_id] = rollout.attempt.sequence_id
                order.append(rollout.rollout_id)
                # Finish it right away: our own claim must not time out (and be requeued) while we wait for the
                # killed child's attempts to time out.
                await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
            return set(enqueued) <= set(claims)

        await wait_until(everything_reclaimed, timeout=timeout_seconds + 30, interval=0.1)
        assert all(claims[r] == 2 for r in dequeued)
        # The child may have been killed after its last dequeue committed but before it printed the acknowledgement:
        # that one rollout is requeued by the watchdog as well. Every other unclaimed rollout is served first-time,
        # in enqueue order.
        reclaimed_unacked = [r for r in never_claimed if claims[r] != 1]
        assert len(reclaimed_unacked) <= 1 and all(claims[r] == 2 for r in reclaimed_unacked)
        fresh = [r for r in never_claimed if claims[r] == 1]
        assert [r for r in order if r in set(fresh)] == fresh
    finally:
        await store.close()


async def _run_to_done(children: List[Child]) -> List[Dict[str, Any]]:
    """Start the children together (all ready first) and collect their "done" reports; kill them in any case."""
    try:
        for child in children:
            await child.read_until("ready")
        results = [await child.read_until("done", timeout=180) for child in children]
        for child in children:
            await child.finish()
        return results
    finally:
        for child in children:
            await child.kill()


def _claimed_once_each(results: List[Dict[str, Any]], created: List[Rollout]) -> List[str]:
    """The rollout ids the children claimed, checked: none twice, none missed."""
    claims = [rid for result in results for rid in result["claimed"]]
    assert len(claims) == len(set(claims)), "a rollout was claimed twice"
    assert set(claims) == {r.rollout_id for r in created}, "a rollout was never claimed"
    return claims


async def test_processes_claim_each_rollout_once_and_share_sequence_ids(target: tuple[str, str]) -> None:
    url, schema = target
    store = open_target_store(url, schema, scan_debounce_seconds=3600.0)
    try:
        shared = await store.start_rollout({"shared": True})
        created = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(90)])
        children = [
            await Child.start("drain", url, schema, shared.rollout_id, shared.attempt.attempt_id, "10")
            for _ in range(3)
        ]
        results = await _run_to_done(children)
        _claimed_once_each(results, created)
        sequence_ids = [s for result in results for s in result["sequence_ids"]]
        batch_ids = [s for result in results for s in result["batch_ids"]]
        everything = sequence_ids + batch_ids
        assert len(everything) == len(set(everything)), "a sequence id was issued twice"
        assert sorted(everything) == list(range(1, len(everything) + 1))
        spans = await store.query_spans(shared.rollout_id)
        assert sorted(s.sequence_id for s in spans) == sorted(sequence_ids), "a span was lost"
        assert (
            await store.get_next_span_sequence_id(shared.rollout_id, shared.attempt.attempt_id) == len(everything) + 1
        )
    finally:
        await store.close()


async def test_concurrent_claimers_in_several_processes_claim_each_rollout_once(target: tuple[str, str]) -> None:
    """Claimers racing within a process and across processes (on PostgreSQL: optimistic claims that lose a race
    run again in a transaction) claim every rollout exactly once, with exactly one attempt each."""
    url, schema = target
    store = open_target_store(url, schema, scan_debounce_seconds=3600.0)
    try:
        created = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(150)])
        children = [await Child.start("claim", url, schema, "4") for _ in range(3)]
        results = await _run_to_done(children)
        claims = _claimed_once_each(results, created)
        for rollout_id in claims:
            attempts = await store.query_attempts(rollout_id)
            assert [a.sequence_id for a in attempts] == [1], f"{rollout_id} has attempts {attempts}"
        assert await store.dequeue_rollout() is None
    finally:
        await store.close()


async def test_enqueue_uses_the_latest_resources_written_by_another_process(target: tuple[str, str]) -> None:
    """An enqueue takes the latest resources snapshot even when another process wrote it after this process last
    looked (PostgreSQL keeps the latest snapshot cached and checks it in the enqueue's write statement)."""
    url, schema = target
    store = open_target_store(url, schema, scan_debounce_seconds=3600.0)

    async def in_child(change: str) -> str:
        child = await Child.start("resources", url, schema, change)
        try:
            result = await child.read_until("resources")
            await child.finish()
        finally:
            await child.kill()
        return str(result["resources_id"])

    async def enqueued_with() -> str | None:
        rollout = await store.enqueue_rollout({"x": 1})
        stored = await store.get_rollout_by_id(rollout.rollout_id)
        assert stored is not None and stored.resources_id == rollout.resources_id
        return rollout.resources_id

    try:
        assert await enqueued_with() is None
        first = await in_child("-")
        assert await enqueued_with() == first
        assert await enqueued_with() == first
        second = await in_child("-")
        assert await enqueued_with() == second
        assert await in_child(first) == first  # updating the first snapshot makes it the latest again
        assert await enqueued_with() == first
        started = await store.start_rollout({"x": 2})
        assert started.resources_id == first
        local = await store.add_resources({"m": {"resource_type": "llm", "endpoint": "http://c", "model": "m"}})
        assert await enqueued_with() == local.resources_id
    finally:
        await store.close()


async def test_attempt_updates_see_what_another_process_wrote(target: tuple[str, str]) -> None:
    """This process' updates of an attempt it claimed and updated before (on PostgreSQL answered from what the
    process remembers, checked by the write) see the changes another process made in between: its metadata change
    and the new attempt it started (which is then the latest)."""
    url, schema = target
    store = open_target_store(url, schema, scan_debounce_seconds=3600.0)
    try:
        await store.enqueue_rollout({"x": 1})
        claimed = await store.dequeue_rollout(worker_id="parent")
        assert claimed is not None
        rollout_id, first = claimed.rollout_id, claimed.attempt.attempt_id
        running = await store.update_attempt(rollout_id, first, status="running")
        assert running.status == "running"
        beat = await store.update_attempt(rollout_id, "latest", last_heartbeat_time=123.0)
        assert beat.attempt_id == first and beat.status == "running"
        child = await Child.start("touch", url, schema, rollout_id, first)
        try:
            touched = await child.read_until("touched")
            await child.finish()
        finally:
            await child.kill()
        again = await store.update_attempt(rollout_id, first, last_heartbeat_time=124.0)
        assert again.metadata == {"child": True} and again.last_heartbeat_time == 124.0
        latest = await store.update_attempt(rollout_id, "latest", status="running")
        assert latest.attempt_id == touched["attempt_id"] and latest.sequence_id == 2
        done = await store.update_attempt(rollout_id, "latest", status="succeeded")
        assert done.attempt_id == touched["attempt_id"]
        rollout = await store.get_rollout_by_id(rollout_id)
        assert rollout is not None and rollout.status == "succeeded"
        stored = {a.attempt_id: a for a in await store.query_attempts(rollout_id)}
        assert stored[first].metadata == {"child": True} and stored[first].last_heartbeat_time == 124.0
        assert stored[touched["attempt_id"]].status == "succeeded"
    finally:
        await store.close()


async def test_wait_for_rollouts_sees_other_processes_within_250ms(target: tuple[str, str]) -> None:
    url, schema = target
    store = open_target_store(url, schema, scan_debounce_seconds=3600.0)
    try:
        rollouts = [await store.start_rollout({"i": i}) for i in range(3)]
        child = await Child.start("finish", url, schema, "0.5", *[r.rollout_id for r in rollouts])
        try:
            await child.read_until("ready")
            latencies = []
            for rollout in rollouts:
                result = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=30)
                returned_at = time.time()
                assert [r.rollout_id for r in result] == [rollout.rollout_id]
                finished = await child.read_until("finished")
                assert finished["rollout_id"] == rollout.rollout_id
                latencies.append(returned_at - finished["at"])
            await child.finish()
        finally:
            await child.kill()
        assert max(latencies) <= 0.25, latencies
    finally:
        await store.close()


async def test_waiting_dequeue_claims_rollouts_queued_by_another_process(target: tuple[str, str]) -> None:
    """A waiting dequeue is woken by this process' enqueues at once; another process' enqueues are found by the
    queue poll (every 0.5 s)."""
    url, schema = target
    store = open_target_store(url, schema, scan_debounce_seconds=3600.0)
    try:
        await store.initialize()
        child = await Child.start("enqueue", url, schema, "0.7", "3")
        try:
            await child.read_until("ready")
            latencies = []
            for _ in range(3):
                claimed = await store.dequeue_rollout_or_wait(worker_id="parent", timeout=30.0)
                claimed_at = time.time()
                assert claimed is not None
                enqueued = await child.read_until("enqueued")
                assert claimed.rollout_id == enqueued["rollout_id"]
                latencies.append(claimed_at - enqueued["at"])
            await child.finish()
        finally:
            await child.kill()
        assert max(latencies) <= 1.0, latencies
    finally:
        await store.close()
