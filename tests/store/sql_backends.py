"""SQL entries of the backend registries (``sqlite``: a temporary file per test; ``postgres``: a fresh schema per test).

PostgreSQL tests need ``ROLLOUTHUB_TEST_POSTGRES_URL`` (for example
``postgresql://postgres@127.0.0.1:5432/test``); without it they are skipped with a message saying so.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

POSTGRES_ENV = "ROLLOUTHUB_TEST_POSTGRES_URL"
POSTGRES_SKIP_REASON = (
    f"PostgreSQL tests are disabled: set {POSTGRES_ENV} to a database URL to enable them, e.g. "
    f"{POSTGRES_ENV}=postgresql://postgres@127.0.0.1:5432/test"
)


def postgres_url() -> str:
    """The test PostgreSQL URL, or skip the running test."""
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(POSTGRES_SKIP_REASON)
    return url


async def drop_pg_schema(url: str, schema: str) -> None:
    """Drop a per-test schema (and everything in it)."""
    import asyncpg
    from sqlalchemy.engine import make_url

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@asynccontextmanager
async def sqlite_store(*, scan_debounce_seconds: float = 0.0, **kwargs: Any) -> AsyncIterator[Any]:
    """A ``SqlLightningStore`` on a fresh SQLite file."""
    from rollouthub.store.sql import SqlLightningStore

    with tempfile.TemporaryDirectory(prefix="rollouthub-sqlite-") as tmp:
        store = SqlLightningStore(f"sqlite:///{tmp}/store.db", scan_debounce_seconds=scan_debounce_seconds, **kwargs)
        try:
            yield store
        finally:
            await store.close()


@asynccontextmanager
async def postgres_store(*, scan_debounce_seconds: float = 0.0, **kwargs: Any) -> AsyncIterator[Any]:
    """A ``SqlLightningStore`` on a fresh PostgreSQL schema (dropped afterwards)."""
    url = postgres_url()
    from rollouthub.store.sql import SqlLightningStore

    schema = f"rh_test_{uuid.uuid4().hex[:12]}"
    store = SqlLightningStore(url, scan_debounce_seconds=scan_debounce_seconds, schema=schema, **kwargs)
    try:
        await store.initialize()
        yield store
    finally:
        await store.close()
        await drop_pg_schema(url, schema)


@asynccontextmanager
async def sqlite_collections(**kwargs: Any) -> AsyncIterator[Any]:
    """``SqlLightningCollections`` on a fresh SQLite file."""
    from rollouthub.store.collection.sql import SqlLightningCollections

    kwargs.pop("lock_type", None)
    with tempfile.TemporaryDirectory(prefix="rollouthub-sqlite-") as tmp:
        collections = SqlLightningCollections(f"sqlite:///{tmp}/collections.db", **kwargs)
        try:
            yield collections
        finally:
            await collections.close()


@asynccontextmanager
async def postgres_collections(**kwargs: Any) -> AsyncIterator[Any]:
    """``SqlLightningCollections`` on a fresh PostgreSQL schema (dropped afterwards)."""
    url = postgres_url()
    from rollouthub.store.collection.sql import SqlLightningCollections

    kwargs.pop("lock_type", None)
    schema = f"rh_test_{uuid.uuid4().hex[:12]}"
    collections = SqlLightningCollections(url, schema=schema, **kwargs)
    try:
        yield collections
    finally:
        await collections.close()
        await drop_pg_schema(url, schema)


@asynccontextmanager
async def postgres_plain_store(**kwargs: Any) -> AsyncIterator[Any]:
    """:func:`postgres_store` on the plain path (``pg_fast_path=False``: no deferred writes, optimistic units or
    caches)."""
    async with postgres_store(pg_fast_path=False, **kwargs) as store:
        yield store


@asynccontextmanager
async def postgres_plain_collections(**kwargs: Any) -> AsyncIterator[Any]:
    """:func:`postgres_collections` on the plain path."""
    async with postgres_collections(pg_fast_path=False, **kwargs) as collections:
        yield collections


def register(
    store_backends: dict[str, Callable[..., Any]],
    traits: dict[str, Any],
    collection_backends: dict[str, Callable[..., Any]],
    traits_cls: type,
) -> None:
    """Add the ``sqlite``, ``postgres`` and ``postgres_plain`` (the PostgreSQL fast path off) entries to the
    registries of ``tests/store/backends.py``."""
    store_backends["sqlite"] = sqlite_store
    store_backends["postgres"] = postgres_store
    store_backends["postgres_plain"] = postgres_plain_store
    for name in ("sqlite", "postgres", "postgres_plain"):
        traits[name] = traits_cls(name=name, thread_safe=True, statistics_name="SqlLightningStore")
    collection_backends["sqlite"] = sqlite_collections
    collection_backends["postgres"] = postgres_collections
    collection_backends["postgres_plain"] = postgres_plain_collections


@asynccontextmanager
async def sql_target(kind: str) -> AsyncIterator[tuple[str, str]]:
    """``(database url, PostgreSQL schema or '-')`` of a fresh, empty database of the given kind."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="rollouthub-sqlite-") as tmp:
            yield f"sqlite:///{tmp}/shared.db", "-"
        return
    url = postgres_url()
    schema = f"rh_test_{uuid.uuid4().hex[:12]}"
    try:
        yield url, schema
    finally:
        await drop_pg_schema(url, schema)


def open_target_store(url: str, schema: str, **kwargs: Any) -> Any:
    """A ``SqlLightningStore`` on a :func:`sql_target`."""
    from rollouthub.store.sql import SqlLightningStore

    if schema != "-":
        kwargs["schema"] = schema
    return SqlLightningStore(url, **kwargs)
