"""The SQL dialect layer: every statement or expression that differs between SQLite and PostgreSQL has a name here.

:class:`SqlDialect` lists the named operations (with the parts both databases share); one module per database
implements them (:mod:`.sql_dialect_sqlite`: :class:`~.sql_dialect_sqlite.SqliteDialect`,
:mod:`.sql_dialect_postgres`: :class:`~.sql_dialect_postgres.PostgresDialect`). The primitives, the schema and the
unit of work call the backend's dialect object by name (``backend.sql_dialect.text_contains(...)``) instead of
testing which database they run on. See "Where a statement lives" in ``docs/sql-backend.md``.

This module imports nothing else of the package (the schema, the filters and the primitives import it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

import sqlalchemy as sa
from pydantic_core import to_json
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["ParamBinder", "SqlDialect", "UrlOptions", "json_dumps"]


def json_dumps(value: Any) -> str:
    """Compact JSON used for every JSON column (deterministic for a given Python value)."""
    return to_json(value).decode()


class ParamBinder(Protocol):
    """What the dialect needs of the filter compiler's binder (:class:`~.sql_filters.Binder`)."""

    dry: bool
    """Dry mode: parameters are numbered and collected, no clause is built."""

    def p(self, value: Any, type_: Any = None) -> Any:
        """Bind ``value`` as the next parameter; the bind parameter (``None`` in dry mode)."""


UrlOptions = Tuple[URL, Dict[str, str], Optional[str], int, int]
"""What :meth:`SqlDialect.take_url_options` returns: the URL without the options it took, the connections' session
settings, the schema, the pool size and the pool overflow."""


class SqlDialect(ABC):
    """The named SQL operations of one database. Subclasses set the capability flags and implement the abstract
    methods; the concrete methods here are what both databases share."""

    name: str = ""
    """SQLAlchemy's name of the database (``"sqlite"``, ``"postgresql"``)."""

    embedded: bool = False
    """The database runs inside this process (SQLite through :mod:`.sql_sqlite`'s driver): one writer per database
    file at a time (write units take the process-local write lock and open with :attr:`BEGIN_WRITE`), bulk writes
    run as ``executemany`` on the driver connection. ``False``: a database server reached through asyncpg. Only the
    dialect layer and the unit of work (:class:`~.sql_engine.Unit`, which picks the driver API) read it."""

    has_fast_path: bool = False
    """Commit units may run on the fast path (deferred writes, optimistic units: :mod:`.sql_batch`)."""

    conditional_upsert_locks_row: bool = False
    """An ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` whose condition is false still locks the row (PostgreSQL):
    the key-value ``raise_to`` reads first instead."""

    BEGIN_WRITE = "BEGIN"
    """The statement opening a write transaction on an embedded database's driver connection."""

    BEGIN_READ = "BEGIN"
    """The statement opening a read (snapshot) transaction on an embedded database's driver connection."""

    SAVEPOINT_INSERT = "SAVEPOINT rh_insert"
    """Savepoint around a bulk insert run as ``executemany`` (undone as a whole when a key exists)."""

    ROLLBACK_TO_INSERT = "ROLLBACK TO rh_insert"
    """Undo the bulk insert since :attr:`SAVEPOINT_INSERT`."""

    RELEASE_INSERT = "RELEASE rh_insert"
    """Forget :attr:`SAVEPOINT_INSERT` (keeping or after undoing its rows)."""

    # --- schema types ---------------------------------------------------------------------------------------------

    @abstractmethod
    def text_type(self) -> Any:
        """The column type of text fields and keys."""

    @abstractmethod
    def json_type(self) -> Any:
        """The column type of JSON fields."""

    def extra_columns(self) -> List[sa.Column[Any]]:
        """Columns every collection table gets besides its fields (none by default)."""
        return []

    @abstractmethod
    def insertion_order(self, table: sa.Table) -> Any:
        """The expression ordering a collection table's rows by insertion."""

    def schema_lock_statements(self) -> List[str]:
        """Statements run first in the transaction that creates or migrates the schema (none by default)."""
        return []

    @abstractmethod
    def open_schema_work(self, schema: Optional[str]) -> List[str]:
        """Statements opening the connection's schema work on first use (``schema``: the database schema to use and
        create when missing)."""

    # --- statements -----------------------------------------------------------------------------------------------

    @abstractmethod
    def insert(self, table: sa.Table) -> Any:
        """An ``INSERT`` construct for ``table`` that supports ``on_conflict_do_update`` and ``excluded``."""

    @abstractmethod
    def larger_of(self, left: Any, right: Any) -> Any:
        """The larger of two numbers (the SQL function of two arguments)."""

    @abstractmethod
    def text_contains(self, haystack: Any, needle: Any) -> Any:
        """Whether the text ``needle`` occurs in the text ``haystack``."""

    @abstractmethod
    def json_param_type(self) -> Any:
        """The type a JSON value is bound with."""

    def json_value(self, param: Any) -> Any:
        """A bound JSON text as a comparable JSON value (the parameter itself by default)."""
        return param

    def json_param(self, b: ParamBinder, value: Any) -> Any:
        """Bind ``value`` as JSON; the comparable JSON value (the bind parameter in dry mode)."""
        param = b.p(json_dumps(value), self.json_param_type())
        if b.dry:
            return param
        return self.json_value(param)

    def json_equals(self, column: Any, value: Any) -> Any:
        """Whether the JSON ``column`` equals the JSON ``value`` (from :meth:`json_param`)."""
        return column == value

    @abstractmethod
    def json_contains(self, b: ParamBinder, column: Any, expected: Any, category: str) -> Any:
        """Python's ``expected in value`` for the JSON ``column``: an array element, an object key or a substring of
        a JSON string. ``category`` is ``"bool"``, ``"num"``, ``"str"`` or ``"other"`` (the kind of ``expected``).
        Binds its parameters in a fixed order; returns the clause, or ``None`` in dry mode."""

    @abstractmethod
    def json_key_present(self, column: Any, key: str) -> Any:
        """Whether the JSON object ``column`` has a non-null value under ``key``."""

    def lock_claimed_rows(self, select: Any) -> Any:
        """The queue-claim ``SELECT`` as the database runs it (unchanged by default)."""
        return select

    def queue_pop(self, table: sa.Table, limit: Any) -> Any:
        """The queue-claim statement: delete the first ``limit`` entries by ``seq``, returning their ``seq`` and
        ``value`` (see :meth:`lock_claimed_rows`)."""
        head = sa.select(table.c.seq).order_by(table.c.seq).limit(limit)
        head = self.lock_claimed_rows(head)
        return sa.delete(table).where(table.c.seq.in_(head.scalar_subquery())).returning(table.c.seq, table.c.value)

    def row_version(self, table_name: str) -> Any:
        """The row version column of ``table_name`` (read by optimistic units; only where :attr:`has_fast_path`)."""
        raise NotImplementedError(f"{self.name} has no row versions")

    def insert_skipping_conflicts(
        self, table_name: str, columns: Sequence[str], kinds: Mapping[str, str], primary_keys: Sequence[str]
    ) -> str:
        """A bulk insert of one array parameter per column that skips existing keys and returns the inserted keys
        (only where the database is not :attr:`embedded`)."""
        raise NotImplementedError(f"{self.name} inserts in bulk with executemany")

    def enqueue_many(self) -> str:
        """Append the values of one array parameter to the queue in order (only where not :attr:`embedded`)."""
        raise NotImplementedError(f"{self.name} enqueues with executemany")

    def notify(self) -> str:
        """The statement sending a notification (parameters: channel, payload)."""
        raise NotImplementedError(f"{self.name} has no notifications")

    # --- connections ----------------------------------------------------------------------------------------------

    def take_url_options(self, url: URL, schema: Optional[str], pool_size: int, max_overflow: int) -> UrlOptions:
        """Read the options the URL may carry (none by default): see :data:`UrlOptions`."""
        return url, {}, schema, pool_size, max_overflow

    @abstractmethod
    def engine_connect_args(self, busy_timeout: float, server_settings: Mapping[str, str]) -> Dict[str, Any]:
        """``connect_args`` of the SQLAlchemy engine used for schema work."""

    def prepare_engine(self, engine: AsyncEngine, busy_timeout: float, synchronous: str) -> None:
        """Set up every connection ``engine`` opens (nothing by default)."""

    @abstractmethod
    def driver_factory(
        self, url: URL, busy_timeout: float, synchronous: str, inline: bool, server_settings: Mapping[str, str]
    ) -> Callable[[], Awaitable[Any]]:
        """A coroutine function opening one driver connection of the unit-of-work pool."""

    def write_lock_key(self, url: URL) -> str:
        """The key of the process-local write lock of this database (one for all by default)."""
        return ""

    async def after_close(self, url: URL, busy_timeout: float) -> None:
        """Run once the backend closed its connections of the running loop (nothing by default)."""
