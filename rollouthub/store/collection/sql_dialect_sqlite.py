"""SQLite's named SQL operations (see :class:`~.sql_dialect.SqlDialect` for what each one is).

JSON lives as text in TEXT-affinity columns and the JSON1 functions work on it; rows keep their insertion order in
``rowid``; one writer at a time per database file (``BEGIN IMMEDIATE``); connections run the pragmas of
:func:`sqlite_pragmas`.
"""

from __future__ import annotations

import asyncio
import os
from functools import partial
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Tuple

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from .sql_dialect import ParamBinder, SqlDialect
from .sql_sqlite import checkpoint_and_truncate, engine_connect_args, install_engine_pragmas, make_driver_factory

__all__ = ["SqliteDialect", "WAL_CHECKPOINT_TRUNCATE", "sqlite_pragmas"]

WAL_CHECKPOINT_TRUNCATE = "PRAGMA wal_checkpoint(TRUNCATE)"
"""Copy every committed page of the write-ahead log into the database file and empty the log."""


def sqlite_pragmas(busy_timeout: float, synchronous: str) -> Tuple[str, ...]:
    """The pragmas every connection runs when it opens: the busy timeout (milliseconds), the write-ahead log, and the
    ``synchronous`` mode."""
    return (
        f"PRAGMA busy_timeout={int(busy_timeout * 1000)}",
        "PRAGMA journal_mode=WAL",
        f"PRAGMA synchronous={synchronous}",
    )


class SqliteDialect(SqlDialect):
    """SQLite (a file, in this process)."""

    name = "sqlite"
    embedded = True
    BEGIN_WRITE = "BEGIN IMMEDIATE"

    def text_type(self) -> Any:
        """Plain ``TEXT``."""
        return sa.String()

    def json_type(self) -> Any:
        """JSON text in a TEXT-affinity column (a column declared JSON would get NUMERIC affinity and turn the text
        ``'5'`` into the integer 5)."""
        return sa.Text()

    def insertion_order(self, table: sa.Table) -> Any:
        """The ``rowid``."""
        return sa.literal_column(f"{table.name}.rowid")

    def open_schema_work(self, schema: Optional[str]) -> List[str]:
        """Take the write lock (``schema`` does not apply)."""
        return [self.BEGIN_WRITE]

    def insert(self, table: sa.Table) -> Any:
        """SQLite's ``INSERT`` construct."""
        return sqlite_dialect.insert(table)

    def larger_of(self, left: Any, right: Any) -> Any:
        """``max(a, b)`` (the scalar function)."""
        return sa.func.max(left, right)

    def text_contains(self, haystack: Any, needle: Any) -> Any:
        """``instr(haystack, needle) > 0``."""
        return sa.func.instr(haystack, needle) > 0

    def json_param_type(self) -> Any:
        """Text."""
        return sa.Text()

    def json_value(self, param: Any) -> Any:
        """``json(param)`` (normalized JSON text)."""
        return sa.func.json(param)

    def json_equals(self, column: Any, value: Any) -> Any:
        """``json(column) = value``."""
        return sa.func.json(column) == value

    def json_contains(self, b: ParamBinder, column: Any, expected: Any, category: str) -> Any:
        """``json_each`` over an array or an object's keys, ``instr`` in a JSON string."""
        if category == "bool":
            elem_value = None
        elif category == "other":
            elem_value = self.json_param(b, expected)
        else:
            elem_value = b.p(expected)
        key = b.p(expected) if category == "str" else None
        sub = b.p(expected) if category == "str" else None
        if b.dry:
            return None
        each = sa.func.json_each(column).table_valued("key", "value", "type")
        if category == "bool":
            elem = each.c.type == ("true" if expected else "false")
        elif category == "num":
            elem = sa.and_(each.c.type.in_(["integer", "real"]), each.c.value == elem_value)
        elif category == "str":
            elem = sa.and_(each.c.type == "text", each.c.value == elem_value)
        else:
            elem = sa.func.json(each.c.value) == elem_value
        typ = sa.func.json_type(column)
        conds = [sa.and_(typ == "array", sa.exists(sa.select(1).select_from(each).where(elem)))]
        if category == "str":
            keys = sa.func.json_each(column).table_valued("key")
            conds.append(sa.and_(typ == "object", sa.exists(sa.select(1).select_from(keys).where(keys.c.key == key))))
            conds.append(sa.and_(typ == "text", self.text_contains(sa.func.json_extract(column, "$"), sub)))
        return sa.or_(*conds)

    def json_key_present(self, column: Any, key: str) -> Any:
        """``json_extract(column, '$.key') IS NOT NULL``."""
        return sa.func.json_extract(column, f"$.{key}").is_not(None)

    def engine_connect_args(self, busy_timeout: float, server_settings: Mapping[str, str]) -> Dict[str, Any]:
        """Autocommit ``sqlite3`` mode, the busy timeout and a larger statement cache."""
        return engine_connect_args(busy_timeout)

    def prepare_engine(self, engine: AsyncEngine, busy_timeout: float, synchronous: str) -> None:
        """Run :func:`sqlite_pragmas` on every connection."""
        install_engine_pragmas(engine, sqlite_pragmas(busy_timeout, synchronous))

    def driver_factory(
        self, url: URL, busy_timeout: float, synchronous: str, inline: bool, server_settings: Mapping[str, str]
    ) -> Callable[[], Awaitable[Any]]:
        """:class:`~.sql_sqlite.SqliteDriver` connections to the database file."""
        return make_driver_factory(
            str(url.database), busy_timeout, partial(sqlite_pragmas, synchronous=synchronous), inline=inline
        )

    def write_lock_key(self, url: URL) -> str:
        """The database file's absolute path."""
        return os.path.abspath(str(url.database))

    async def after_close(self, url: URL, busy_timeout: float) -> None:
        """Fold the write-ahead log into the database file: the ``.db`` alone then holds every committed write
        (closing the last connection usually does it too, but not while another loop or process holds one)."""
        await asyncio.to_thread(checkpoint_and_truncate, str(url.database), WAL_CHECKPOINT_TRUNCATE, busy_timeout)
