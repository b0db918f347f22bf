"""The PostgreSQL fast path: a commit unit's writes sent as ONE statement, optimistic units, and their invariants.

The fast path is on by default and switched off with ``SqlLightningCollections(pg_fast_path=False)`` or
``ROLLOUTHUB_PG_FAST_PATH=0``; off, every commit unit is a plain transaction (``BEGIN``, reads locked with
``FOR UPDATE``, the writes, ``COMMIT``), as on SQLite. On PostgreSQL every statement -- ``BEGIN`` and ``COMMIT``
included -- is a client/server round trip, and the round trips dominate the cost of a store call
(``docs/sql-backend.md`` has the counts and the A/B against the plain path). On the fast path the business logic's
read-modify-write units (``execute(commit=True)``) run like this:

* **Deferred writes.** ``insert``, ``write_update``/``write_upsert`` (the writes whose caller needs no result),
  ``update``/``upsert`` without ``update_fields``, ``delete``, queue appends, counter raises and ``NOTIFY``s are
  collected in the unit's :class:`WriteBatch` and sent when the unit ends, as one statement of data-modifying CTEs
  (``WITH w0 AS (INSERT ...), w1 AS (UPDATE ... FROM (...) AS v ...) ... SELECT ...``; one row binds scalars,
  several rows ``unnest`` one array per column; the text is built once per shape, by the named statements of
  :mod:`.sql_dialect_postgres` -- this module keeps the data, the parameters and their order). A statement that must
  run right away (a read of a table with pending writes, a write whose result is needed) sends the pending writes
  first, and two writes of one row never share a statement (PostgreSQL cannot update a row twice in one).
* **Optimistic first.** The unit's reads run without a transaction and every row read is remembered with its version
  (the ``xmin`` system column). The final statement locks those rows (``FOR UPDATE``), checks that their versions
  did not change and only then applies the writes (all in one statement, hence atomically): a unit is one round trip
  per (compound) read plus one for all its writes, without ``BEGIN``/``COMMIT``. When a statement must run right
  away, the unit starts its transaction there (:meth:`~.sql_engine.Unit.start_transaction`): the rows read so far
  are locked and checked in the statement that sends the pending writes, and the unit goes on as a transaction.
  When a check fails, nothing was written: :class:`GuardConflict`, and ``execute()`` runs the unit again, in a
  transaction from its start.
* **Caches** (:mod:`.sql_caches`) answer some compound reads from what the process remembers, with the versions it
  remembers; the write statement checks them like the versions of rows read, plus the version of the latest
  resources snapshot and that a claimed queue entry is the head of the queue.

Invariants (what makes the fast path equivalent to the plain path; ``tests/store/test_pg_fast_path_property.py``
runs the same random operation sequences from several processes on both and compares the outcomes):

1. No row a unit read (or took from a cache) changes between the read and the unit's writes: the write statement
   locks and checks every such row's version, or the transaction holds its ``FOR UPDATE`` lock.
2. A unit's writes are all or nothing: they are one statement, or statements of one transaction.
3. A cache only saves reads: nothing is written on the strength of a cached answer unless the write statement (or the
   transaction-starting statement) found its version unchanged. A failed check drops the cache entry concerned.
4. Rows that were not read are not locked (phantoms): as on the plain path, a rule that depends on the absence of
   rows relies on a row that is read -- e.g. every new attempt also writes its rollout's row.
5. A callback of ``execute(commit=True)`` may run more than once (as for serialization conflicts): it must be
   re-runnable, and only its last run's writes are stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

from .base import DuplicatedPrimaryKeyError
from .sql_caches import (
    CACHED_TABLES,
    CachedRollout,
    QueuedRollout,
    WrittenRows,
    cache_rollouts,
    follow_writes,
    merged,
)
from .sql_dialect_postgres import (
    GUARD_OK,
    deferred_delete_sql,
    deferred_enqueue_sql,
    deferred_insert_sql,
    deferred_notify_sql,
    deferred_queue_delete_sql,
    deferred_raise_counters_sql,
    deferred_set_counter_sql,
    deferred_update_sql,
    deferred_upsert_sql,
    guard_ok_cte_sql,
    guard_result_sql,
    latest_resources_check_sql,
    queue_head_check_sql,
    row_guard_check_sql,
    row_guard_cte_sql,
    write_cte_sql,
    write_rows_sql,
    write_statement_sql,
    written_version_sql,
)
from .sql_schema import TableSpec

if TYPE_CHECKING:
    from .sql_engine import Unit

__all__ = [
    "NO_GUARD",
    "GuardConflict",
    "WriteBatch",
    "STATEMENTS",
    "QUEUE",
]


_NOTIFY_PAYLOAD_LIMIT = 7900


class _CounterSpec(NamedTuple):
    """A table that is not a collection (the key-value table, the queue) as guards and row claims see it: name,
    primary key and the kinds of its columns."""

    name: str
    primary_keys: Tuple[str, ...]
    key_kinds: Tuple[str, ...] = ("str",)


_COUNTERS: Any = _CounterSpec("span_sequence_ids", ("key",))
QUEUE: Any = _CounterSpec("rollout_queue", ("seq",), ("int",))


class GuardConflict(Exception):
    """A row read by an optimistic unit changed before its writes: nothing was written; run the unit again."""


def _source_params(records: Sequence[Sequence[Any]], single: bool) -> List[Any]:
    """The parameters of a values source (:func:`~.sql_dialect_postgres.values_source_sql`) from its rows
    (``records``: the values of each row, in column order): the one row's values, or one list per column."""
    return list(records[0]) if single else [list(column) for column in zip(*records, strict=True)]


def _missing(spec: TableSpec, keys: Sequence[Tuple[Any, ...]], found: Iterable[Any]) -> None:
    present = {tuple(row) for row in found or ()}
    for key in keys:
        if key not in present:
            raise ValueError(
                "Item does not exist with primary key(s): "
                + ", ".join(f"{k}={v!r}" for k, v in zip(spec.primary_keys, key, strict=False))
            )


class _Op:
    """One deferred write: a CTE of the batch's statement. The SQL text depends on :attr:`shape` only (it is built
    once per shape); :meth:`params` are its parameters; ``reports`` ops add a value to the final ``SELECT``."""

    __slots__ = ("shape",)
    shape: Tuple[Any, ...]
    reports = False

    def cte(self, first: int, ok: str) -> str:
        """The statement (one of :mod:`.sql_dialect_postgres`'s ``deferred_..._sql``), with parameters ``$first,
        $first+1, ...``; ``ok``: the guard condition (``""``: none)."""
        raise NotImplementedError()

    def params(self) -> List[Any]:
        """The parameter values."""
        raise NotImplementedError()

    def check(self, value: Any) -> None:
        """Check the reported value (ops with ``reports``)."""


class _Insert(_Op):
    __slots__ = ("spec", "rows")

    def __init__(self, spec: TableSpec, rows: List[Dict[str, Any]]) -> None:
        self.shape = ("insert", spec.name, len(rows) == 1)
        self.spec = spec
        self.rows = rows

    def cte(self, first: int, ok: str) -> str:
        """:func:`~.sql_dialect_postgres.deferred_insert_sql` of the rows."""
        return deferred_insert_sql(self.spec, self.shape[2], first, ok)

    def params(self) -> List[Any]:
        cols = self.spec.column_names
        return _source_params([[row[c] for c in cols] for row in self.rows], self.shape[2])


class _Update(_Op):
    """``UPDATE ... FROM`` the new values, by primary key; reports the keys found (each must exist, else
    ``ValueError``)."""

    __slots__ = ("spec", "names", "keys", "rows")
    reports = True

    def __init__(
        self, spec: TableSpec, names: Tuple[str, ...], keys: List[Tuple[Any, ...]], rows: List[Dict[str, Any]]
    ) -> None:
        self.shape = ("update", spec.name, names, len(rows) == 1)
        self.spec = spec
        self.names = names
        self.keys = keys
        self.rows = rows

    def cte(self, first: int, ok: str) -> str:
        """:func:`~.sql_dialect_postgres.deferred_update_sql` of the columns :attr:`names`."""
        return deferred_update_sql(self.spec, self.names, self.shape[3], first, ok)

    def params(self) -> List[Any]:
        names = self.names
        records = [[*key, *[row[n] for n in names]] for key, row in zip(self.keys, self.rows, strict=True)]
        return _source_params(records, self.shape[3])

    def check(self, value: Any) -> None:
        _missing(self.spec, self.keys, value)


class _Upsert(_Op):
    __slots__ = ("spec", "rows")

    def __init__(self, spec: TableSpec, names: Tuple[str, ...], rows: List[Dict[str, Any]]) -> None:
        self.shape = ("upsert", spec.name, names, len(rows) == 1)
        self.spec = spec
        self.rows = rows

    def cte(self, first: int, ok: str) -> str:
        """:func:`~.sql_dialect_postgres.deferred_upsert_sql` (existing rows get the columns of the shape)."""
        return deferred_upsert_sql(self.spec, self.shape[2], self.shape[3], first, ok)

    def params(self) -> List[Any]:
        cols = self.spec.column_names
        return _source_params([[row[c] for c in cols] for row in self.rows], self.shape[3])


class _Delete(_Op):
    """``DELETE ... USING`` the keys; reports the keys found (each must exist)."""

    __slots__ = ("spec", "keys")
    reports = True

    def __init__(self, spec: TableSpec, keys: List[Tuple[Any, ...]]) -> None:
        self.shape = ("delete", spec.name, len(keys) == 1)
        self.spec = spec
        self.keys = keys

    def cte(self, first: int, ok: str) -> str:
        """:func:`~.sql_dialect_postgres.deferred_delete_sql` of the keys."""
        return deferred_delete_sql(self.spec, self.shape[2], first, ok)

    def params(self) -> List[Any]:
        return _source_params(self.keys, self.shape[2])

    def check(self, value: Any) -> None:
        _missing(self.spec, self.keys, value)


class _Enqueue(_Op):
    """Queue appends (all of a unit's, in call order: one op keeps their FIFO order); reports their ``seq``s."""

    __slots__ = ("values", "seqs")
    reports = True

    def __init__(self) -> None:
        self.values: List[str] = []
        self.seqs: List[int] = []
        self.shape = ("enqueue", False)

    def extend(self, values: Sequence[str]) -> None:
        """Append values (in call order)."""
        self.values.extend(values)
        self.shape = ("enqueue", len(self.values) == 1)

    def cte(self, first: int, ok: str) -> str:
        """:func:`~.sql_dialect_postgres.deferred_enqueue_sql` of the values."""
        return deferred_enqueue_sql(self.shape[1], first, ok)

    def params(self) -> List[Any]:
        return [self.values[0] if len(self.values) == 1 else self.values]

    def check(self, value: Any) -> None:
        self.seqs = sorted(row[0] for row in value or ())  # assigned in insertion order


class _RaiseTo(_Op):
    """Counter raises (``KeyValue.raise_to`` with integers): one conditional upsert per key, the largest value."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.shape = ("raise_to",)
        self.values: Dict[str, int] = {}

    def cte(self, first: int, ok: str) -> str:
        """:func:`~.sql_dialect_postgres.deferred_raise_counters_sql`."""
        return deferred_raise_counters_sql(first, ok)

    def params(self) -> List[Any]:
        return [list(self.values), list(self.values.values())]


class _SetCounter(_Op):
    """The optimistic ``inc`` of one counter: ``UPDATE ... SET num`` (its row version is guarded) or, for a counter
    that did not exist, ``INSERT`` (without ``ON CONFLICT``: a concurrent creation fails the statement)."""

    __slots__ = ("key", "value")

    def __init__(self, key: str, value: int, create: bool) -> None:
        self.shape = ("set_counter", create)
        self.key = key
        self.value = value

    def cte(self, first: int, ok: str) -> str:
        """:func:`~.sql_dialect_postgres.deferred_set_counter_sql` (creating the counter when it did not exist)."""
        return deferred_set_counter_sql(self.shape[1], first, ok)

    def params(self) -> List[Any]:
        return [self.key, self.value]


class _Pop(_Op):
    """The queue entries an optimistic claim read (:func:`dequeue_rollouts`), deleted under the guard that they are
    still there (the guard locks them: a concurrent claimer of the same entry waits, then finds it gone)."""

    __slots__ = ("seqs",)

    def __init__(self) -> None:
        self.shape = ("pop",)
        self.seqs: List[int] = []

    def cte(self, first: int, ok: str) -> str:
        """:func:`~.sql_dialect_postgres.deferred_queue_delete_sql` of the entries."""
        return deferred_queue_delete_sql(first, ok)

    def params(self) -> List[Any]:
        return [self.seqs]


class _Notify(_Op):
    """``pg_notify`` on one channel (delivered by PostgreSQL when the statement's transaction commits)."""

    __slots__ = ("channel", "payloads")
    reports = True  # a SELECT in a WITH clause only runs when referenced

    def __init__(self, channel: str) -> None:
        self.shape = ("notify",)
        self.channel = channel
        self.payloads: List[str] = []

    def cte(self, first: int, ok: str) -> str:
        """:func:`~.sql_dialect_postgres.deferred_notify_sql` on the channel."""
        return deferred_notify_sql(first, ok)

    def params(self) -> List[Any]:
        payload = ",".join(dict.fromkeys(self.payloads))
        return [self.channel, payload if len(payload) <= _NOTIFY_PAYLOAD_LIMIT else ""]  # too long: wake everybody


class ClaimedHead(NamedTuple):
    """A claim of the queue entry ``seq`` taken from the queue mirror: the write statement checks that no entry
    precedes it but those other local claims are taking (``claimed_before``)."""

    seq: int
    claimed_before: List[int]


NO_GUARD: Any = object()

STATEMENTS: Dict[Tuple[Any, ...], str] = {}
"""Statement texts built once: the batch of each shape (guarded tables, op shapes) and the compound reads."""


class WriteBatch:
    """The deferred writes and (optimistic units) the versions of the rows read, of one PostgreSQL commit unit."""

    __slots__ = (
        "ops",
        "tables",
        "touched",
        "guards",
        "_enqueue",
        "_raise",
        "_notify",
        "_pop",
        "latest",
        "cached",
        "seen",
        "written",
        "head",
    )

    def __init__(self) -> None:
        self.ops: List[_Op] = []
        self.tables: Set[str] = set()
        self.touched: Set[Tuple[str, Tuple[Any, ...]]] = set()
        self.guards: Dict[str, Tuple[TableSpec, Dict[Tuple[Any, ...], Optional[str]]]] = {}
        self._enqueue: Optional[_Enqueue] = None
        self._raise: Optional[_RaiseTo] = None
        self._notify: Dict[str, _Notify] = {}
        self._pop: Optional[_Pop] = None
        self.latest: Any = NO_GUARD
        """The version (``xmin``) of the latest resources snapshot the unit used (``None``: there was none), checked
        by the write statement (:func:`latest_resources`); ``NO_GUARD`` when the unit did not use it."""
        self.cached = False
        """Whether the unit used an answer from a cache: its statement is sent even without writes, to check it."""
        self.seen: Dict[str, CachedRollout] = {}
        """Optimistic units: the rollouts (with their latest attempt) read, as cache entries (see
        :func:`get_rollout_and_attempts`): after the write statement they are cached with the unit's writes applied."""
        self.written: List[WrittenRows] = []
        """The deferred writes of rollouts and attempts: ``(kind, spec, keys, rows)``."""
        self.head: Optional[ClaimedHead] = None
        """A claim of an entry taken from the queue mirror, which must be the head of the queue."""

    # --- reads -------------------------------------------------------------------------------------------------

    def guard(self, spec: TableSpec, key: Tuple[Any, ...], version: Optional[str]) -> None:
        """Remember a row read with its version (``None``: only its existence matters)."""
        rows = self.guards.setdefault(spec.name, (spec, {}))[1]
        if rows.get(key) is None:
            rows[key] = version

    def guard_rows(self, spec: TableSpec, rows: Iterable[Any]) -> None:
        """Remember rows selected with their ``xmin::text`` as the last column."""
        positions = spec.pk_positions
        for row in rows:
            self.guard(spec, tuple(row[i] for i in positions), row[-1])

    async def before_statement(self, unit: Unit, tables: Iterable[str], write: bool) -> None:
        """Before a statement that runs right away: an optimistic unit may only read, and only tables without pending
        writes (else it starts its transaction: :meth:`~.sql_engine.Unit.start_transaction`); a unit in a
        transaction sends its pending writes first when the statement writes or reads a table they touch."""
        if unit.optimistic:
            if write or any(t in self.tables for t in tables):
                await unit.start_transaction()
        elif self.ops and (write or any(t in self.tables for t in tables)):
            await self.flush(unit)

    # --- writes ------------------------------------------------------------------------------------------------

    async def _claim_keys(self, unit: Unit, spec: TableSpec, keys: Sequence[Tuple[Any, ...]]) -> bool:
        """Note the rows a write touches; ``False`` when the write must run right away instead (its own items repeat a
        key -- sent after the pending writes). Two writes of one row never share a statement: what is pending is sent
        first (an optimistic unit starts its transaction for that)."""
        name = spec.name
        touched = self.touched
        clash = len(keys) > 1 and len(set(keys)) != len(keys)
        if not clash:
            for key in keys:
                if (name, key) in touched:
                    clash = True
                    break
        if clash:
            if unit.optimistic:
                await unit.start_transaction()  # sends what is pending
            else:
                await self.flush(unit)
            if len(set(keys)) != len(keys):
                return False
        for key in keys:
            touched.add((name, key))
        self.tables.add(name)
        return True

    async def insert(self, unit: Unit, spec: TableSpec, keys: List[Tuple[Any, ...]], rows: List[Any]) -> bool:
        """Defer a bulk insert (a duplicate key fails the unit with :class:`DuplicatedPrimaryKeyError`); ``False``:
        run it now (see :meth:`_claim_keys`)."""
        if not await self._claim_keys(unit, spec, keys):
            return False
        if spec.name in CACHED_TABLES:
            self.written.append(WrittenRows("insert", spec, keys, rows))
        self.ops.append(_Insert(spec, rows))
        return True

    async def update(
        self, unit: Unit, spec: TableSpec, names: Tuple[str, ...], keys: List[Tuple[Any, ...]], rows: List[Any]
    ) -> bool:
        """Defer an update by primary key of the columns ``names``; the rows must exist (in an optimistic unit, a
        missing row fails the guard). ``False``: run it now (see :meth:`_claim_keys`)."""
        if not await self._claim_keys(unit, spec, keys):
            return False
        if unit.optimistic:
            for key in keys:
                self.guard(spec, key, None)
        if spec.name in CACHED_TABLES:
            self.written.append(WrittenRows("update", spec, keys, rows))
        self.ops.append(_Update(spec, names, keys, rows))
        return True

    async def upsert(
        self, unit: Unit, spec: TableSpec, names: Tuple[str, ...], keys: List[Tuple[Any, ...]], rows: List[Any]
    ) -> bool:
        """Defer an upsert (existing rows get the columns ``names``); returns like :meth:`insert`."""
        if not await self._claim_keys(unit, spec, keys):
            return False
        if spec.name in CACHED_TABLES:
            self.written.append(WrittenRows("upsert", spec, keys, rows))
        self.ops.append(_Upsert(spec, names, rows))
        return True

    async def delete(self, unit: Unit, spec: TableSpec, keys: List[Tuple[Any, ...]]) -> bool:
        """Defer a delete by primary key; the rows must exist. Returns like :meth:`insert`."""
        if not await self._claim_keys(unit, spec, keys):
            return False
        if unit.optimistic:
            for key in keys:
                self.guard(spec, key, None)
        if spec.name in CACHED_TABLES:
            self.written.append(WrittenRows("delete", spec, keys, []))
        self.ops.append(_Delete(spec, keys))
        return True

    def enqueue(self, values: Sequence[str]) -> None:
        """Defer queue appends."""
        if self._enqueue is None:
            self._enqueue = _Enqueue()
            self.ops.append(self._enqueue)
        self._enqueue.extend(values)
        self.tables.add("rollout_queue")

    def raise_to(self, key: str, value: int) -> None:
        """Defer raising counter ``key`` to at least ``value``."""
        if self._raise is None:
            self._raise = _RaiseTo()
            self.ops.append(self._raise)
        self._raise.values[key] = max(value, self._raise.values.get(key, value))
        self.tables.add("span_sequence_ids")

    async def set_counter(self, unit: Unit, key: str, value: int, version: Optional[str]) -> None:
        """Defer setting counter ``key`` to ``value`` (optimistic ``inc``): guarded by the version of the counter row
        read, or -- ``version=None``, no row was read -- created (a concurrent creation fails the statement with a
        unique violation on the counters, reported as :class:`GuardConflict`)."""
        await self._claim_keys(unit, _COUNTERS, [(key,)])
        if version is not None:
            self.guard(_COUNTERS, (key,), version)
        self.ops.append(_SetCounter(key, value, version is None))

    async def pop(self, unit: Unit, seqs: Sequence[int]) -> None:
        """Defer deleting the queue entries ``seqs`` read by an optimistic claim (guarded: they must still exist)."""
        keys = [(seq,) for seq in seqs]
        await self._claim_keys(unit, QUEUE, keys)
        for key in keys:
            self.guard(QUEUE, key, None)
        if self._pop is None:
            self._pop = _Pop()
            self.ops.append(self._pop)
        self._pop.seqs.extend(seqs)

    def notify(self, channel: str, payload: str) -> None:
        """Defer a ``NOTIFY`` (payloads of one channel are joined with commas)."""
        op = self._notify.get(channel)
        if op is None:
            op = self._notify[channel] = _Notify(channel)
            self.ops.append(op)
        op.payloads.append(payload)

    # --- sending -----------------------------------------------------------------------------------------------

    def _statement(self) -> Tuple[str, List[Any]]:
        """The statement sending the pending writes (its text is built once per shape), and its parameters."""
        guards = self.guards
        latest = self.latest
        shape = (
            tuple((name, len(rows) == 1) for name, (_, rows) in guards.items()),
            tuple(op.shape for op in self.ops),
            latest is not NO_GUARD,
            self.head is not None,
            self._versioned(),
        )
        params: List[Any] = []
        for _, rows in guards.values():
            params.extend(_source_params([(*key, version) for key, version in rows.items()], len(rows) == 1))
            params.append(len(rows))
        if latest is not NO_GUARD:
            params.append(latest)
        if self.head is not None:
            params.extend((self.head.seq, self.head.claimed_before))
        for op in self.ops:
            params.extend(op.params())
        sql = STATEMENTS.get(shape)
        if sql is None:
            if len(STATEMENTS) > 1024:
                STATEMENTS.clear()
            sql = STATEMENTS[shape] = self._build()
        return sql, params

    def _versioned(self) -> bool:
        """Whether the statement reports the version of the rows it writes (to remember them: :mod:`.sql_caches`)."""
        return bool(self.seen) or self._enqueue is not None

    def _build(self) -> str:
        """The text of :meth:`_statement` (:func:`~.sql_dialect_postgres.write_statement_sql`): the guards of the rows
        read and their checks, then one CTE per deferred write, numbering the parameters in the order
        :meth:`_statement` binds them."""
        parts: List[str] = []
        checks: List[str] = []
        n = 0
        for spec, rows in self.guards.values():
            pks = spec.primary_keys
            key_kinds = list(getattr(spec, "key_kinds", None) or ["str"] * len(pks))
            parts.append(row_guard_cte_sql(spec.name, pks, key_kinds, len(rows) == 1, n + 1))
            n += len(pks) + 2
            checks.append(row_guard_check_sql(spec.name, n))
        if self.latest is not NO_GUARD:
            n += 1
            checks.append(latest_resources_check_sql(n))
        if self.head is not None:
            n += 2
            checks.append(queue_head_check_sql(n - 1))
        ok = ""
        if checks:
            parts.append(guard_ok_cte_sql(checks))
            ok = GUARD_OK
        outputs = [guard_result_sql(ok)]
        for index, op in enumerate(self.ops):
            parts.append(write_cte_sql(index, op.cte(n + 1, ok)))
            n += len(op.params())
            if op.reports:
                outputs.append(write_rows_sql(index))
        if self._versioned():
            outputs.append(written_version_sql(ok))
        return write_statement_sql(parts, outputs)

    async def flush(self, unit: Unit, check: bool = False) -> None:
        """Send the pending writes (with the guards of an optimistic unit) as one statement, then start afresh.
        Raises :class:`GuardConflict` (nothing written) when a guarded row changed. A unit that used a cached answer
        (:func:`latest_resources`) sends the statement even without writes, to check it; ``check``: also when it
        only read rows (a unit starting its transaction locks and checks them)."""
        if not self.ops and not self.cached and not (check and (self.guards or self.latest is not NO_GUARD)):
            return
        ops = self.ops
        seen, written, head, enqueue, pop = self.seen, self.written, self.head, self._enqueue, self._pop
        sql, params = self._statement()
        self.ops = []
        self.tables = set()
        self.touched = set()
        self.guards = {}
        self._enqueue = self._raise = None
        self._notify = {}
        self._pop = None
        self.latest = NO_GUARD
        self.cached = False
        self.seen = {}
        self.written = []
        self.head = None
        backend = unit.backend
        optimistic_enqueue = enqueue is not None and unit.optimistic

        def follow() -> Tuple[Optional[Dict[str, CachedRollout]], Optional[Dict[str, Any]]]:
            """What the caches will hold now that the statement succeeded."""
            new_rollouts = None
            if optimistic_enqueue:
                spec = backend.schema.specs["rollouts"]
                new_rollouts = {
                    key[0]: merged(spec, None, values)
                    for kind, table, keys, rows_written in written
                    if kind == "insert" and table.name == "rollouts"
                    for key, values in zip(keys, rows_written, strict=True)
                }
            return (follow_writes(seen, written) if seen else None), new_rollouts

        import asyncpg

        try:
            rows = await unit.fetch_sql(sql, params)
        except asyncpg.UniqueViolationError as exc:
            if getattr(exc, "table_name", None) == "span_sequence_ids":  # a counter created concurrently
                raise GuardConflict("a counter the unit creates was created concurrently") from None
            raise DuplicatedPrimaryKeyError(f"Duplicated primary key: {exc.detail or exc}") from None
        after, new_rollouts = follow()
        row = rows[0]
        cache = backend.rollout_cache
        if not row[0]:
            for rollout_id in seen:
                cache.pop(rollout_id, None)
            if head is not None:
                backend.queue_mirror.trusted = False
            raise GuardConflict("a row read by the unit changed before its writes")
        reported = iter(row[1:])
        for op in ops:
            if op.reports:
                op.check(next(reported))
        if pop is not None:
            backend.queue_mirror.discard(pop.seqs)
        if new_rollouts is not None and enqueue is not None:  # committed: this process knows these entries
            mirror = backend.queue_mirror
            for seq, value in zip(enqueue.seqs, enqueue.values, strict=True):
                found = new_rollouts.get(value)
                mirror.add(seq, QueuedRollout(found, row[-1]) if found is not None else None)
        if after is not None:
            cache_rollouts(cache, after, row[-1])
