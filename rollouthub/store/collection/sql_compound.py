"""PostgreSQL: the compound reads of :class:`~.base.LightningCollections` in the units of :mod:`.sql_batch`.

Each is one statement -- or none, in an optimistic unit, when the process remembers the rows (:mod:`.sql_caches`):

* :func:`dequeue_rollouts`: in a transaction, pop with ``FOR UPDATE SKIP LOCKED``, lock the rollouts and count their
  attempts; in an optimistic unit, a *claim*: the head of the queue (read, or from the queue mirror), deleted by the
  unit's write statement under guards;
* :func:`get_rollout_and_attempts`: a rollout, its latest attempt and a named one;
* :func:`latest_resources`: the latest resources snapshot.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, List, Optional

from .base import PoppedRollout, RolloutAttempts
from .sql_batch import STATEMENTS, ClaimedHead, WriteBatch
from .sql_caches import CachedResources, CachedRollout
from .sql_dialect_postgres import (
    claim_rollouts_sql,
    dequeue_rollouts_sql,
    latest_resources_sql,
    rollout_and_attempts_sql,
)
from .sql_schema import TableSpec

if TYPE_CHECKING:
    from .sql_engine import Unit

__all__ = ["dequeue_rollouts", "get_rollout_and_attempts", "latest_resources"]


async def dequeue_rollouts(unit: Unit, rollouts: TableSpec, limit: int) -> List[PoppedRollout]:
    """Pop up to ``limit`` ids (``FOR UPDATE SKIP LOCKED``: concurrent claimers never wait for each other), lock
    their rollouts and count their attempts -- one statement, in a write transaction.

    In an optimistic unit, a *claim read* instead (:func:`_claim_rollouts`): nothing is popped until the unit's
    write statement, which deletes the entries under the guard that they (and the rollouts read) did not change."""
    if unit.optimistic and unit.batch is not None:
        return await _claim_rollouts(unit, unit.batch, rollouts, limit)
    if unit.batch is not None:
        await unit.batch.before_statement(unit, ("rollout_queue", "rollouts", "attempts"), True)
    key = ("dequeue_rollouts", limit == 1)
    sql = STATEMENTS.get(key)
    if sql is None:
        sql = STATEMENTS[key] = dequeue_rollouts_sql(rollouts.column_names, limit == 1)
    out: List[PoppedRollout] = []
    rows = await unit.fetch_sql(sql, [] if limit == 1 else [limit])
    for row in rows:
        rollout = rollouts.from_row(tuple(row)[3:-1]) if row[2] else None
        out.append(PoppedRollout(row[0], rollout, int(row[1])))
    mirror = unit.backend.queue_mirror
    if mirror.entries and rows:
        mirror.discard([row[-1] for row in rows])  # (should the transaction roll back, the mirror is resynced later)
    return out


async def _claim_rollouts(unit: Unit, batch: WriteBatch, rollouts: TableSpec, limit: int) -> List[PoppedRollout]:
    """The optimistic claim: read the head of the queue with the rollouts (and their versions) and attempt counts,
    without locking or deleting anything (one statement, no transaction); the unit's write statement then deletes
    the entries, guarded by their existence and the rollouts' versions. A concurrent claim of the same entry makes
    one of the two write statements find its guard broken (nothing written): that unit runs again in a transaction.

    Entries this process is claiming right now in other units are skipped (so that local claimers do not collide;
    they are released when their unit ends): the head is read again, further, when they hid what was asked for.

    A claim of one rollout takes the first entry of the process' :class:`~.sql_caches.QueueMirror` instead of reading,
    when the mirror is in sync with the queue: no statement at all; the write statement also checks that no other
    entry precedes it."""
    await batch.before_statement(unit, ("rollout_queue", "rollouts", "attempts"), False)
    if not unit.optimistic:  # the unit had to start its transaction: pop in it
        return await dequeue_rollouts(unit, rollouts, limit)
    backend = unit.backend
    claiming = backend.claiming
    mirror = backend.queue_mirror
    if limit == 1 and mirror.entries:
        found = mirror.head(claiming)
        if found is not None and found[1] is not None:
            seq, (rollout, version) = found[0], found[1]
            rollout_id = rollout.rollout_id
            batch.guard(rollouts, (rollout_id,), version)  # a rollout created by its enqueue: no attempt yet
            batch.head = ClaimedHead(seq, sorted(s for s in claiming if s < seq))
            batch.cached = True
            batch.seen[rollout_id] = CachedRollout(rollout, version)
            claiming.add(seq)
            unit.claims = [*(unit.claims or ()), seq]
            await batch.pop(unit, [seq])
            return [PoppedRollout(rollout_id, rollout, 0)]
    while True:
        read = limit + len(claiming)
        key = ("claim_rollouts", read == 1)
        sql = STATEMENTS.get(key)
        if sql is None:
            sql = STATEMENTS[key] = claim_rollouts_sql(rollouts.column_names, read == 1)
        rows = await unit.fetch_sql(sql, [] if read == 1 else [read])
        free = [row for row in rows if row[0] not in claiming]
        if len(free) >= limit or len(rows) < read:
            if mirror.entries:
                mirror.saw_head(free[0][0] if free else None, claiming)
            break  # enough, or the whole queue was read
    out: List[PoppedRollout] = []
    seqs: List[int] = []
    for row in free[:limit]:
        seq = row[0]
        values = tuple(row)[4:]
        rollout = None
        if row[3]:
            batch.guard_rows(rollouts, [values])
            rollout = rollouts.from_row(values[:-1])
            if row[2] == 0:  # no attempt yet: the claim's own attempt will be the latest
                batch.seen[row[1]] = CachedRollout(rollout, values[-1])
        out.append(PoppedRollout(row[1], rollout, int(row[2])))
        seqs.append(seq)
    if seqs:
        claiming.update(seqs)
        unit.claims = [*(unit.claims or ()), *seqs]
        await batch.pop(unit, seqs)
    return out


async def latest_resources(unit: Unit, resources: TableSpec) -> Optional[Any]:
    """The latest resources snapshot, in an optimistic unit: from the process' cache when it has one, else read
    (with its version) and cached. Either way the unit's write statement only writes when the latest snapshot still
    has that version (or there is still none), so an answer made stale by any process -- another store on the same
    database included -- never reaches the database: the unit then runs again in a transaction, which reads it.
    Local writes of resources drop the cache (:class:`~.sql_primitives.SqlCollection`), as does any guard conflict."""
    batch = unit.batch
    assert batch is not None and unit.optimistic
    backend = unit.backend
    cached = backend.latest_resources_cache
    if cached is not None:
        batch.cached = True
    else:
        await batch.before_statement(unit, ("resources",), False)
        key = ("latest_resources",)
        sql = STATEMENTS.get(key)
        if sql is None:
            sql = STATEMENTS[key] = latest_resources_sql(resources.column_names)
        rows = await unit.fetch_sql(sql, [])
        cached = (
            CachedResources(resources.from_row(tuple(rows[0])[:-1]), rows[0][-1])
            if rows
            else CachedResources(None, None)
        )
        backend.latest_resources_cache = cached
    batch.latest = cached.version
    return cached.resources


async def get_rollout_and_attempts(
    unit: Unit, rollouts: TableSpec, attempts: TableSpec, rollout_id: str, attempt_id: Optional[str]
) -> RolloutAttempts:
    """The rollout, its latest attempt and attempt ``attempt_id`` in one statement (locked in a transaction;
    remembered with their versions in an optimistic unit).

    An optimistic unit answers from the process' cache instead when it knows the rollout and its latest attempt (and
    ``attempt_id`` is that one): what this process last read or wrote of them, with their versions, which the unit's
    write statement checks like those of rows it read -- a change by anyone in between (another process included)
    writes nothing and runs the unit again in a transaction. What the unit read is cached after its writes."""
    batch = unit.batch
    if batch is not None:
        await batch.before_statement(unit, ("rollouts", "attempts"), False)
    optimistic = unit.optimistic
    if optimistic and batch is not None:
        entry = unit.backend.rollout_cache.get(rollout_id)
        if entry is not None and (
            attempt_id is None or (entry.latest is not None and entry.latest.attempt_id == attempt_id)
        ):
            latest = entry.latest
            batch.guard(rollouts, (rollout_id,), entry.version)
            if latest is not None:
                batch.guard(attempts, (rollout_id, latest.attempt_id), entry.latest_version)
            batch.seen[rollout_id] = dataclasses.replace(entry)
            batch.cached = True
            return RolloutAttempts(entry.rollout, latest, latest if attempt_id is not None else None)
    key = ("get_rollout_and_attempts", unit.for_update, optimistic)
    sql = STATEMENTS.get(key)
    if sql is None:
        sql = STATEMENTS[key] = rollout_and_attempts_sql(
            rollouts.column_names, attempts.column_names, unit.for_update, optimistic
        )
    rows = await unit.fetch_sql(sql, [rollout_id, attempt_id])
    row = tuple(rows[0])
    width_r = len(rollouts.column_names) + (1 if optimistic else 0)
    width_a = len(attempts.column_names) + (1 if optimistic else 0)
    parts = (row[3 : 3 + width_r], row[3 + width_r : 3 + width_r + width_a], row[3 + width_r + width_a :])
    found: List[Any] = []
    for present, spec, values in zip(row[:3], (rollouts, attempts, attempts), parts, strict=True):
        if not present:
            found.append(None)
            continue
        if optimistic and batch is not None:
            batch.guard_rows(spec, [values])
            found.append(spec.from_row(values[:-1]))
        else:
            found.append(spec.from_row(values))
    if optimistic and batch is not None and found[0] is not None:
        latest_version = parts[1][-1] if found[1] is not None else None
        batch.seen[rollout_id] = CachedRollout(found[0], parts[0][-1], found[1], latest_version)
    return RolloutAttempts(found[0], found[1], found[2] if attempt_id is not None else None)
