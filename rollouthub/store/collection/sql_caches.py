"""PostgreSQL: what a store process remembers of the rows its units read and wrote, to skip reads.

Optimistic commit units (:mod:`.sql_batch`) guard every row they read with its version (``xmin``); the write
statement writes nothing when one changed. So a unit may as well take a row from memory -- with the version it had
when this process last read or wrote it -- instead of reading it: when anybody (another process included) changed it
since, the guard fails and the unit runs again in a transaction, which reads it. These caches only save reads; what
is written never depends on them without that check.

* the latest resources snapshot (enqueues): :func:`.sql_compound.latest_resources`;
* rollouts with their latest attempt (attempt updates): :func:`cache_rollouts` after each optimistic write
  statement, used by :func:`.sql_compound.get_rollout_and_attempts`;
* the queue entries this process appended (claims): :class:`QueueMirror`, used by
  :func:`.sql_compound.dequeue_rollouts`.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, insort
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from pydantic_core import from_json

from .sql_schema import TableSpec

__all__ = ["QueueMirror", "merged", "cache_rollouts", "CACHED_TABLES"]

CACHED_TABLES = ("rollouts", "attempts")
"""The tables whose deferred writes :func:`cache_rollouts` follows."""

_ROLLOUT_CACHE_SIZE = 4096


def merged(spec: TableSpec, old: Any, row: Dict[str, Any]) -> Any:
    """The model stored after writing the column values ``row`` (driver values, as sent) over ``old`` (the stored
    model; ``None``: a new row), decoded as a read would decode them."""
    kinds = spec.kinds
    if old is not None and all(kinds[name] != "json" for name in row):
        return old.model_copy(update=row)  # scalar columns: the values are the model's own (validated) ones
    data = dict(old.__dict__) if old is not None else {}
    for name, value in row.items():
        if value is not None and kinds[name] == "json":
            value = from_json(value)
        data[name] = value
    return spec.model.__pydantic_validator__.validate_python(data)


def cache_rollouts(cache: Dict[str, List[Any]], seen: Dict[str, List[Any]], written: List[Any], version: str) -> None:
    """After an optimistic unit's write statement succeeded: cache the rollouts it read (``seen``: ``rollout_id ->
    [rollout, version, latest attempt or None, version]``) as they are now -- the unit's writes (``written``: ``(kind,
    spec, keys, rows)``) applied, written rows at the statement's version (``version``). A write this cannot follow
    (an upsert, a delete, a rollout insert, unknown columns) leaves the rollout uncached. The latest attempt is the
    one with the highest ``sequence_id`` (the first inserted among equals), as the compound read reads it."""
    for kind, spec, keys, rows in written:
        for key, row in zip(keys, rows or [None] * len(keys), strict=True):
            entry = seen.get(key[0])
            if entry is None:
                continue
            if kind in ("s", "d") or (spec.has_extra and row is not None and "extra" in row):
                del seen[key[0]]
            elif spec.name == "rollouts":
                if kind == "i":
                    del seen[key[0]]
                else:
                    entry[0] = merged(spec, entry[0], row)
                    entry[1] = version
            elif kind == "i":
                if entry[2] is None or row["sequence_id"] > entry[2].sequence_id:
                    entry[2] = merged(spec, None, row)
                    entry[3] = version
            elif entry[2] is not None and entry[2].attempt_id == key[1]:
                entry[2] = merged(spec, entry[2], row)
                entry[3] = version
    for rollout_id, entry in seen.items():
        cache.pop(rollout_id, None)
        cache[rollout_id] = entry
    while len(cache) > _ROLLOUT_CACHE_SIZE:
        try:
            del cache[next(iter(cache))]
        except (StopIteration, KeyError, RuntimeError):  # emptied or changed by another thread meanwhile
            break


class QueueMirror:
    """The queue entries this process appended (``seq -> [rollout, version]``; ``None`` for an entry whose rollout
    the appending unit did not insert), in ``seq`` order, while they may still be queued.

    A claim takes the first one that no local claim is taking (:meth:`head`) without reading the queue, guarded by:
    the entry still exists (and is deleted by the claim's statement), no other entry is before it (but those local
    claims are taking), and its rollout's version. The mirror is *trusted* while claim reads find its first entry at
    the head of the queue: entries that other processes append before ours, or that others claim, make a guard fail
    (the claim then runs again in a transaction) and the mirror untrusted until a claim read finds it in sync
    again (:meth:`saw_head`). Safe to use from several threads (a store may be)."""

    def __init__(self, limit: int = 4096) -> None:
        self.entries: Dict[int, Optional[List[Any]]] = {}
        self.order: List[int] = []
        self.trusted = True
        self.limit = limit
        self.full = False  # entries were not recorded (over the limit): record none until the mirror is empty
        self._lock = threading.Lock()

    def add(self, seq: int, entry: Optional[List[Any]]) -> None:
        """Record an entry this process appended (committed)."""
        with self._lock:
            if self.full or len(self.entries) >= self.limit:
                self.full = True
                return
            self.entries[seq] = entry
            insort(self.order, seq)

    def discard(self, seqs: Iterable[int]) -> None:
        """Forget entries (claimed)."""
        with self._lock:
            self._discard(seqs)

    def _discard(self, seqs: Iterable[int]) -> None:
        entries, order = self.entries, self.order
        for seq in seqs:
            if entries.pop(seq, False) is not False:
                del order[bisect_left(order, seq)]
        if not entries:
            self.full = False

    def head(self, claiming: Set[int]) -> Optional[Tuple[int, Optional[List[Any]]]]:
        """The first entry no local claim is taking (when the mirror is trusted), or ``None``."""
        with self._lock:
            if not self.trusted:
                return None
            for seq in self.order:
                if seq not in claiming:
                    return seq, self.entries[seq]
            return None

    def saw_head(self, head: Optional[int], claiming: Set[int]) -> None:
        """A claim read found ``head`` first in the queue among the entries no local claim is taking (``None``: no
        such entry): the mirror's entries before it are gone; the mirror is in sync when ``head`` is its next."""
        with self._lock:
            gone = [seq for seq in self.order if (head is None or seq < head) and seq not in claiming]
            if gone:
                self._discard(gone)
            self.trusted = head is None or head in self.entries
