"""Classification of store exceptions that are not the store's own (database drivers, network): whose fault, and
whether retrying can help. Used by the server's error mapping (``server_app.error_payload``) and the OTLP handler."""

from __future__ import annotations

__all__ = ["sqlstate", "is_data_error", "is_retryable_error"]

_DRIVER_MODULES = ("asyncpg", "sqlite3", "sqlalchemy", "aiosqlite")
_UNAVAILABLE_SQLSTATES = ("08", "53", "57P0")
"""SQLSTATE prefixes of a database that cannot serve now: 08 connection exception, 53 insufficient resources (e.g.
too many connections), 57P0x operator intervention (shutting down, cannot connect now)."""
_UNAVAILABLE_NAMES = frozenset({"ConnectionDoesNotExistError", "CannotConnectNowError", "TooManyConnectionsError"})


def sqlstate(exc: BaseException) -> str:
    """The SQLSTATE of a database error (asyncpg, or a SQLAlchemy ``DBAPIError`` wrapping one), else ``""``."""
    code = getattr(exc, "sqlstate", None) or getattr(getattr(exc, "orig", None), "sqlstate", None)
    return code if isinstance(code, str) else ""


def is_data_error(exc: BaseException) -> bool:
    """The database refused a value of the request (SQLSTATE class 22, "data exception"): the caller's fault."""
    return sqlstate(exc).startswith("22")


def is_retryable_error(exc: BaseException) -> bool:
    """Not the caller's fault, and retrying may help: the network or the database is unreachable or overloaded, or a
    serialization conflict / deadlock / SQLite lock outlived the store's own retries."""
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if not type(exc).__module__.startswith(_DRIVER_MODULES):
        return False
    from .collection.sql_engine import is_transient_error

    return (
        is_transient_error(exc)
        or sqlstate(exc).startswith(_UNAVAILABLE_SQLSTATES)
        or type(exc).__name__ in _UNAVAILABLE_NAMES
    )
