"""Child process of ``test_pg_fast_path_property.py``: runs one operation sequence on a ``SqlLightningStore``.

Run as ``python -m tests.store._fast_path_child <database url> <pg schema> <worker name> <operations as JSON>``
(the fast path is chosen by ``ROLLOUTHUB_PG_FAST_PATH`` in the environment); prints one JSON object on stdout:
``{"claimed": [input tags of the rollouts this process claimed]}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Dict, List

from rollouthub.store.sql import SqlLightningStore
from rollouthub.types import Span


async def finish(store: SqlLightningStore, claimed: Any) -> None:
    """Add the number of spans the claimed rollout's input names (store-allocated sequence ids), then end its
    attempt with the outcome its input names."""
    rollout_id, attempt_id = claimed.rollout_id, claimed.attempt.attempt_id
    for index in range(claimed.input["spans"]):
        sequence_id = await store.get_next_span_sequence_id(rollout_id, attempt_id)
        span = Span.from_attributes(
            attributes={"index": index}, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id
        )
        await store.add_span(span)
    await store.update_attempt(rollout_id, attempt_id, status=claimed.input["outcome"])


async def run(url: str, schema: str, worker: str, operations: List[Dict[str, Any]]) -> List[str]:
    """Run ``operations`` in order; return the tags of the rollouts claimed."""
    store = SqlLightningStore(url, schema=schema, scan_debounce_seconds=3600.0)
    claimed_tags: List[str] = []
    try:
        for operation in operations:
            kind = operation["kind"]
            if kind == "enqueue":
                for tag, outcome, spans in operation["rollouts"]:
                    await store.enqueue_rollout({"tag": tag, "outcome": outcome, "spans": spans})
            elif kind == "work":
                for _ in range(operation["claims"]):
                    claimed = await store.dequeue_rollout(worker_id=worker)
                    if claimed is None:
                        break
                    claimed_tags.append(claimed.input["tag"])
                    await finish(store, claimed)
            elif kind == "resources":
                await store.add_resources({"llm": {"resource_type": "llm", "endpoint": "http://x", "model": "m"}})
            else:
                raise ValueError(f"unknown operation kind {kind!r}")
    finally:
        await store.close()
    return claimed_tags


def main() -> None:
    """Parse the command line, run, print the result."""
    url, schema, worker, operations = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    claimed = asyncio.run(run(url, schema, worker, operations))
    sys.stdout.write(json.dumps({"claimed": claimed}) + "\n")


if __name__ == "__main__":
    main()
