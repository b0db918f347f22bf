"""The PostgreSQL fast path (deferred writes, optimistic units, caches) against the plain path (transactions): the
same random operation sequences, run by several processes at once on each, end in the same store.

Each example draws one operation sequence per process (enqueue rollouts, claim and finish rollouts, add resources),
runs the processes concurrently on a fresh schema with the fast path on, then again with it off, and drains the
queue. What may depend on the interleaving (which process claimed which rollout, timestamps) is left out of the
comparison; what may not is compared: every rollout's final status, its attempts and their statuses, its spans'
sequence ids, the number of resource snapshots -- and no rollout is claimed twice."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, List, Tuple

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rollouthub.store.sql import SqlLightningStore
from tests.store._fast_path_child import finish
from tests.store.sql_backends import drop_pg_schema, postgres_url

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 3

_operation = st.one_of(
    st.builds(
        lambda rollouts: {"kind": "enqueue", "rollouts": rollouts},
        st.lists(st.tuples(st.sampled_from(["succeeded", "failed"]), st.integers(0, 2)), min_size=1, max_size=3),
    ),
    st.builds(lambda claims: {"kind": "work", "claims": claims}, st.integers(1, 3)),
    st.just({"kind": "resources"}),
)
_plans = st.lists(st.lists(_operation, min_size=1, max_size=6), min_size=PROCESSES, max_size=PROCESSES)


def _with_tags(plans: List[List[Dict[str, Any]]]) -> List[List[Dict[str, Any]]]:
    """The plans with a unique tag for every rollout enqueued (``p<process>-<operation>-<index>``): each rollout
    is ``[tag, outcome, number of spans]``."""
    tagged: List[List[Dict[str, Any]]] = []
    for process, plan in enumerate(plans):
        ops: List[Dict[str, Any]] = []
        for index, op in enumerate(plan):
            if op["kind"] == "enqueue":
                rollouts = [
                    [f"p{process}-{index}-{k}", outcome, spans] for k, (outcome, spans) in enumerate(op["rollouts"])
                ]
                ops.append({"kind": "enqueue", "rollouts": rollouts})
            else:
                ops.append(dict(op))
        tagged.append(ops)
    return tagged


def _run_processes(url: str, schema: str, plans: List[List[Dict[str, Any]]], fast_path: bool) -> List[str]:
    """Run one child per plan, all at once; the tags they claimed, together."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROLLOUTHUB_PG_FAST_PATH": "1" if fast_path else "0"}
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.store._fast_path_child", url, schema, f"proc-{index}", json.dumps(plan)],
            cwd=str(ROOT),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index, plan in enumerate(plans)
    ]
    claimed: List[str] = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err[-3000:]
        claimed.extend(json.loads(out.strip().splitlines()[-1])["claimed"])
    return claimed


async def _drain_and_describe(store: SqlLightningStore) -> Tuple[List[str], Dict[str, Any]]:
    """Claim and finish what is still queued (in this process); then what the store holds, by rollout tag."""
    drained: List[str] = []
    while (claimed := await store.dequeue_rollout(worker_id="drain")) is not None:
        drained.append(claimed.input["tag"])
        await finish(store, claimed)
    rollouts: Dict[str, Any] = {}
    for rollout in (await store.query_rollouts()).items:
        attempts = (await store.query_attempts(rollout.rollout_id)).items
        spans_found = (await store.query_spans(rollout.rollout_id)).items
        rollouts[rollout.input["tag"]] = {
            "status": rollout.status,
            "attempts": [(a.sequence_id, a.status) for a in attempts],
            "span_sequence_ids": sorted(s.sequence_id for s in spans_found),
        }
    stats = await store.statistics()
    return drained, {"rollouts": rollouts, "resources": stats["total_resources"], "spans": stats["total_spans"]}


def _outcome(url: str, plans: List[List[Dict[str, Any]]], fast_path: bool) -> Dict[str, Any]:
    """Run the plans on a fresh schema with the fast path on or off; what the store holds at the end."""
    schema = f"rh_prop_{uuid.uuid4().hex[:12]}"

    async def body() -> Tuple[List[str], Dict[str, Any]]:
        store = SqlLightningStore(url, schema=schema, scan_debounce_seconds=3600.0, pg_fast_path=fast_path)
        try:
            await store.initialize()
            claimed = await asyncio.to_thread(_run_processes, url, schema, plans, fast_path)
            drained, described = await _drain_and_describe(store)
            return claimed + drained, described
        finally:
            await store.close()
            await drop_pg_schema(url, schema)

    claimed, described = asyncio.run(body())
    assert len(claimed) == len(set(claimed)), f"a rollout was claimed twice (fast path {fast_path}): {claimed}"
    assert sorted(claimed) == sorted(described["rollouts"]), "every rollout is claimed exactly once"
    return described


# Each example starts 2 x PROCESSES processes: few examples, fixed seed, no shrinking (a failure prints its plans).
@settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
@given(plans=_plans)
def test_fast_and_plain_paths_end_in_the_same_store(plans: List[List[Dict[str, Any]]]) -> None:
    """Several processes, the same operations: the fast path's store equals the plain path's."""
    url = postgres_url()
    tagged = _with_tags(plans)
    fast = _outcome(url, tagged, fast_path=True)
    plain = _outcome(url, tagged, fast_path=False)
    assert fast == plain
    expected = {
        tag: (outcome, spans)
        for plan in tagged
        for op in plan
        if op["kind"] == "enqueue"
        for tag, outcome, spans in op["rollouts"]
    }
    for tag, rollout in fast["rollouts"].items():  # and both are what the operations say
        outcome, spans = expected[tag]
        assert rollout["status"] == outcome and rollout["attempts"] == [(1, outcome)]
        assert rollout["span_sequence_ids"] == list(range(1, spans + 1))
