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
