"""Conformance: ``sort_by`` must name a field that has an order, on every store backend and every query."""

from __future__ import annotations

from typing import Any

from tests.store.backends import BackendTraits


async def test_sort_by_a_field_without_an_order_raises_a_value_error_naming_it(
    store: Any, traits: BackendTraits
) -> None:
    rollout = await store.start_rollout(input={"q": 1}, metadata={"k": 1})
    await store.enqueue_rollout(input={"q": 2}, metadata={"k": [1]})
    await store.update_worker("w", heartbeat_stats={"cpu": 1})
    rollout_id = rollout.rollout_id
    queries = [
        ("config", lambda: store.query_rollouts(sort_by="config")),
        ("metadata", lambda: store.query_rollouts(sort_by="metadata", sort_order="desc")),
        ("input", lambda: store.query_rollouts(sort_by="input")),
        ("metadata", lambda: store.query_attempts(rollout_id, sort_by="metadata")),
        ("attributes", lambda: store.query_spans(rollout_id, sort_by="attributes")),
        ("heartbeat_stats", lambda: store.query_workers(sort_by="heartbeat_stats")),
        ("resources", lambda: store.query_resources(sort_by="resources")),
    ]
    for field, query in queries:
        with traits.raises(ValueError, match=f"^Failed to sort items by '{field}': field has no order on "):
            await query()
    # The fields that have an order still sort.
    assert [r.rollout_id for r in await store.query_rollouts(sort_by="status")][0] == rollout_id  # preparing < queuing
