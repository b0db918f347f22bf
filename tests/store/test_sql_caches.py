"""The PostgreSQL store's queue mirror (``rollouthub.store.collection.sql_caches.QueueMirror``) on its own: which
entry a claim takes, and how claim reads bring it back in sync (the database side is in ``test_sql_batch.py``)."""

from __future__ import annotations

from rollouthub.store.collection.sql_caches import QueueMirror


def test_head_skips_local_claims_and_follows_seq_order() -> None:
    mirror = QueueMirror()
    for seq in (7, 3, 5):  # committed out of order by concurrent units
        mirror.add(seq, [f"r{seq}", "x"])
    assert mirror.head(set()) == (3, ["r3", "x"])
    assert mirror.head({3}) == (5, ["r5", "x"])
    assert mirror.head({3, 5, 7}) is None
    mirror.discard([3, 42])
    assert mirror.order == [5, 7] and set(mirror.entries) == {5, 7}


def test_claim_reads_resync_the_mirror() -> None:
    mirror = QueueMirror()
    for seq in (1, 2, 3, 4):
        mirror.add(seq, None)
    mirror.trusted = False  # a mirror claim failed its check
    assert mirror.head(set()) is None
    mirror.saw_head(10, {2})  # the head is 10, not ours: ours before it are gone, but for 2 (a local claim)
    assert mirror.order == [2] and not mirror.trusted
    mirror.add(12, None)
    mirror.saw_head(12, set())  # the head is ours again
    assert mirror.order == [12] and mirror.trusted
    mirror.saw_head(None, set())  # nothing free in the queue
    assert mirror.order == [] and mirror.trusted


def test_a_full_mirror_records_nothing_until_it_is_empty() -> None:
    mirror = QueueMirror(limit=2)
    for seq in (1, 2, 3):
        mirror.add(seq, None)
    assert mirror.order == [1, 2] and mirror.full
    mirror.discard([1])
    mirror.add(4, None)  # 3 was not recorded: 4 must not be either (the mirror would have a hole)
    assert mirror.order == [2]
    mirror.discard([2])
    mirror.add(5, None)
    assert mirror.order == [5] and not mirror.full


def test_follow_writes_leaves_what_the_unit_read_unchanged_until_the_statement_succeeded() -> None:
    from rollouthub.store.collection.sql_caches import (
        WRITTEN,
        CachedRollout,
        WrittenRows,
        cache_rollouts,
        follow_writes,
    )
    from rollouthub.store.collection.sql_dialect_postgres import PostgresDialect
    from rollouthub.store.collection.sql_schema import SqlSchema
    from rollouthub.types import Attempt, Rollout

    specs = SqlSchema(PostgresDialect()).specs
    rollout = Rollout(rollout_id="ro-1", input={"q": 1}, start_time=1.0, status="running")
    attempt = Attempt(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, start_time=1.0, status="running")
    other = Rollout(rollout_id="ro-2", input=None, start_time=2.0, status="running")
    seen = {"ro-1": CachedRollout(rollout, "100", attempt, "101"), "ro-2": CachedRollout(other, "200")}
    written = [
        WrittenRows("update", specs["attempts"], [("ro-1", "at-1")], [{"status": "succeeded", "end_time": 5.0}]),
        WrittenRows("update", specs["rollouts"], [("ro-1",)], [{"status": "succeeded", "end_time": 5.0}]),
        WrittenRows("upsert", specs["rollouts"], [("ro-2",)], [None]),  # an upsert: not followed
    ]
    after = follow_writes(seen, written)
    # what the unit read is untouched (the statement may still fail: its rollouts are then dropped from the cache)
    assert seen["ro-1"] == CachedRollout(rollout, "100", attempt, "101") and rollout.status == "running"
    assert set(after) == {"ro-1"}
    entry = after["ro-1"]
    new_rollout, version, new_attempt, attempt_version = (
        entry.rollout,
        entry.version,
        entry.latest,
        entry.latest_version,
    )
    assert (new_rollout.status, new_rollout.end_time, new_rollout.input) == ("succeeded", 5.0, {"q": 1})
    assert (new_attempt.status, new_attempt.end_time) == ("succeeded", 5.0)
    assert version is WRITTEN and attempt_version is WRITTEN
    assert {"status", "end_time"} <= new_rollout.model_fields_set

    stale = CachedRollout(other, "1")
    cache = {"ro-2": stale}
    cache_rollouts(cache, after, "300")
    assert cache["ro-1"] == CachedRollout(new_rollout, "300", new_attempt, "300")
    assert cache["ro-2"] is stale  # only the followed rollouts are written to the cache
