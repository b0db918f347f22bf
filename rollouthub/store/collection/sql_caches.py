"""PostgreSQL: what a store process remembers of the rows its units read and wrote, to skip reads.

Optimistic commit units (:mod:`.sql_batch`) guard every row they read with its version (``xmin``); the write
statement writes nothing when one changed. So a unit may as well take a row from memory -- with the version it had
when this process last read or wrote it -- instead of reading it: when anybody (another process included) changed it
since, the guard fails and the unit runs again in a transaction, which reads it. These caches only save reads; what
is written never depends on them without that check.

* the latest resources snapshot (enqueues): :func:`.sql_compound.latest_resources`;
* rollouts with their latest attempt (attempt updates): :func:`follow_writes` while each optimistic write
  statement runs, :func:`cache_rollouts` once it succeeded, used by :func:`.sql_compound.get_rollout_and_attempts`;
* the queue entries this process appended (claims): :class:`QueueMirror`, used by
  :func:`.sql_compound.dequeue_rollouts`.
"""

from __future__ import annotations

import dataclasses
import threading
from bisect import bisect_left, insort
from typing import Any, Dict, Iterable, List, Literal, NamedTuple, Optional, Set, Tuple

from pydantic_core import from_json

from .base import model_with
from .sql_schema import TableSpec

__all__ = [
    "QueueMirror",
    "CachedRollout",
    "CachedResources",
    "QueuedRollout",
    "merged",
    "follow_writes",
    "cache_rollouts",
    "CACHED_TABLES",
    "WRITTEN",
]

CACHED_TABLES = ("rollouts", "attempts")
"""The tables whose deferred writes :func:`cache_rollouts` follows."""

_ROLLOUT_CACHE_SIZE = 4096


def merged(spec: TableSpec, old: Any, row: Dict[str, Any]) -> Any:
    """The model stored after writing the column values ``row`` (driver values, as sent) over ``old`` (the stored
    model; ``None``: a new row), decoded as a read would decode them."""
    kinds = spec.kinds
    if old is not None and all(kinds[name] != "json" for name in row):
        return model_with(old, row)  # scalar columns: the values are the model's own (validated) ones
    data = dict(old.__dict__) if old is not None else {}
    for name, value in row.items():
        if value is not None and kinds[name] == "json":
            value = from_json(value)
        data[name] = value
    return spec.model.__pydantic_validator__.validate_python(data)


@dataclasses.dataclass
class CachedRollout:
    """A rollout and its latest attempt as this process last read or wrote them, each with its row version (the
    ``xmin`` system column, as text; :data:`WRITTEN` while the statement writing it is on its way)."""

    rollout: Any
    version: Any
    latest: Optional[Any] = None
    """The attempt with the highest ``sequence_id`` (``None``: the rollout has no attempt)."""
    latest_version: Any = None


class CachedResources(NamedTuple):
    """The latest resources snapshot as last read (``resources is None``: there was none) and its row version."""

    resources: Any
    version: Optional[str]


class QueuedRollout(NamedTuple):
    """A queue entry's rollout as the appending unit inserted it, with its row version."""

    rollout: Any
    version: str


WriteKind = Literal["insert", "update", "upsert", "delete"]
"""The kind of a deferred write of an optimistic unit."""


class WrittenRows(NamedTuple):
    """One deferred write of an optimistic unit, as :func:`follow_writes` replays it on the cached rollouts."""

    kind: WriteKind
    spec: TableSpec
    keys: List[Tuple[Any, ...]]
    """The primary keys of the rows written."""
    rows: List[Any]
    """The rows written (column -> value), one per key; empty for a delete."""


WRITTEN = object()
"""The version of a row in :func:`follow_writes`'s entries that the write statement wrote (its version is the
statement's, known once it answered)."""


def follow_writes(seen: Dict[str, CachedRollout], written: List[WrittenRows]) -> Dict[str, CachedRollout]:
    """The rollouts an optimistic unit read (``seen``) as they will be once its writes (``written``: :class:`WrittenRows`) are applied, the rows it
    writes at version :data:`WRITTEN`: new entries, ``seen`` is left as it is. Pure, so that it can run while the
    write statement is on its way (its result decides whether :func:`cache_rollouts` keeps them). A write this cannot
    follow (an upsert, a delete, a rollout insert, unknown columns) leaves the rollout out. The latest attempt is the
    one with the highest ``sequence_id`` (the first inserted among equals), as the compound read reads it."""
    after = {rollout_id: dataclasses.replace(entry) for rollout_id, entry in seen.items()}
    for kind, spec, keys, rows in written:
        for key, row in zip(keys, rows or [None] * len(keys), strict=True):
            entry = after.get(key[0])
            if entry is None:
                continue
            if kind in ("upsert", "delete") or (spec.has_extra and row is not None and "extra" in row):
                del after[key[0]]
            elif spec.name == "rollouts":
                if kind == "insert":
                    del after[key[0]]
                else:
                    entry.rollout = merged(spec, entry.rollout, row)
                    entry.version = WRITTEN
            elif kind == "insert":
                if entry.latest is None or row["sequence_id"] > entry.latest.sequence_id:
                    entry.latest = merged(spec, None, row)
                    entry.latest_version = WRITTEN
            elif entry.latest is not None and entry.latest.attempt_id == key[1]:
                entry.latest = merged(spec, entry.latest, row)
                entry.latest_version = WRITTEN
    return after


def cache_rollouts(cache: Dict[str, CachedRollout], after: Dict[str, CachedRollout], version: str) -> None:
    """After an optimistic unit's write statement succeeded: cache the rollouts :func:`follow_writes` followed
    (``after``), the rows written at the statement's version (``version``)."""
    for rollout_id, entry in after.items():
        if entry.version is WRITTEN:
            entry.version = version
        if entry.latest_version is WRITTEN:
            entry.latest_version = version
        cache.pop(rollout_id, None)
        cache[rollout_id] = entry
    while len(cache) > _ROLLOUT_CACHE_SIZE:
        try:
            del cache[next(iter(cache))]
        except (StopIteration, KeyError, RuntimeError):  # emptied or changed by another thread meanwhile
            break


class QueueMirror:
    """The queue entries this process appended (``seq -> QueuedRollout``; ``None`` for an entry whose rollout the
    appending unit did not insert), in ``seq`` order, while they may still be queued.

    A claim takes the first one that no local claim is taking (:meth:`head`) without reading the queue, guarded by:
    the entry still exists (and is deleted by the claim's statement), no other entry is before it (but those local
    claims are taking), and its rollout's version. The mirror is *trusted* while claim reads find its first entry at
    the head of the queue: entries that other processes append before ours, or that others claim, make a guard fail
    (the claim then runs again in a transaction) and the mirror untrusted until a claim read finds it in sync
    again (:meth:`saw_head`). Safe to use from several threads (a store may be)."""

    def __init__(self, limit: int = 4096) -> None:
        self.entries: Dict[int, Optional[QueuedRollout]] = {}
        self.order: List[int] = []
        self.trusted = True
        self.limit = limit
        self.full = False  # entries were not recorded (over the limit): record none until the mirror is empty
        self._lock = threading.Lock()

    def add(self, seq: int, entry: Optional[QueuedRollout]) -> None:
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

    def head(self, claiming: Set[int]) -> Optional[Tuple[int, Optional[QueuedRollout]]]:
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
