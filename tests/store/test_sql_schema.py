"""SQL backend: URLs, schema creation, versioning, migrations and version-mismatch errors."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa

from rollouthub.store.collection import sql_schema
from rollouthub.store.collection.sql_schema import (
    SCHEMA_TABLE,
    SCHEMA_VERSION,
    SchemaVersionError,
    normalize_database_url,
)
from rollouthub.types import Span
from tests.store.sql_backends import open_target_store, sql_target


@pytest.fixture(params=["sqlite", "postgres"])
async def target(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, str]]:
    async with sql_target(request.param) as created:
        yield created


async def _run_sql(url: str, schema: str, statement: str) -> Any:
    """Execute one statement outside the store (SQLite file or the PostgreSQL test schema)."""
    if schema == "-":
        path = sa.engine.make_url(url).database
        conn = sqlite3.connect(path)
        try:
            rows = conn.execute(statement).fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()
    import asyncpg

    dsn = sa.engine.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        return await conn.fetch(statement)
    finally:
        await conn.close()


def test_url_normalization() -> None:
    url, dialect = normalize_database_url("sqlite:///tmp/x.db")
    assert (url.drivername, dialect) == ("sqlite+aiosqlite", "sqlite")
    url, dialect = normalize_database_url("postgresql://u:secret@h:5432/db")
    assert (url.drivername, dialect) == ("postgresql+asyncpg", "postgresql")
    assert normalize_database_url("postgresql+asyncpg://h/db")[1] == "postgresql"
    with pytest.raises(ValueError, match="In-memory SQLite"):
        normalize_database_url("sqlite:///:memory:")
    with pytest.raises(ValueError, match="Unsupported database URL"):
        normalize_database_url("mysql://h/db")


def test_url_fallbacks(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from rollouthub.store.sql import resolve_database_url

    monkeypatch.delenv("ROLLOUTHUB_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert resolve_database_url() == f"sqlite:///{tmp_path}/rollouthub.db"
    monkeypatch.setenv("DATABASE_URL", "sqlite:///b.db")
    assert resolve_database_url() == "sqlite:///b.db"
    monkeypatch.setenv("ROLLOUTHUB_DATABASE_URL", "sqlite:///a.db")
    assert resolve_database_url() == "sqlite:///a.db"
    assert resolve_database_url("sqlite:///c.db") == "sqlite:///c.db"


async def test_password_is_hidden(tmp_path: Any) -> None:
    store = open_target_store("postgresql://user:hunter2@127.0.0.1:1/db", "-")
    assert "hunter2" not in store.database_url and "***" in store.database_url


async def test_schema_created_on_first_use_and_reopened(target: tuple[str, str]) -> None:
    url, schema = target
    store = open_target_store(url, schema, scan_debounce_seconds=0.0)
    try:
        rollout = await store.enqueue_rollout({"q": 1})
        caps = store.capabilities
        assert caps["thread_safe"] and caps["async_safe"] and caps["zero_copy"] and not caps["otlp_traces"]
    finally:
        await store.close()
    rows = await _run_sql(url, schema, f"SELECT id, version FROM {SCHEMA_TABLE}")
    assert [tuple(r) for r in rows] == [(1, SCHEMA_VERSION)]
    reopened = open_target_store(url, schema, scan_debounce_seconds=0.0)
    try:
        again = await reopened.get_rollout_by_id(rollout.rollout_id)
        assert again is not None and again.input == {"q": 1}
        stats = await reopened.statistics()
        assert stats["name"] == "SqlLightningStore" and stats["total_rollouts"] == 1
    finally:
        await reopened.close()


async def test_typed_columns_and_indexes(target: tuple[str, str]) -> None:
    url, schema = target
    store = open_target_store(url, schema)
    try:
        await store.initialize()
    finally:
        await store.close()
    if schema == "-":
        cols = {r[1]: r[2] for r in await _run_sql(url, schema, "PRAGMA table_info(spans)")}
        assert cols["sequence_id"] == "BIGINT" and cols["start_time"] == "DOUBLE" and cols["attributes"] == "TEXT"
        indexes = {
            r[1]
            for table in ("spans", "attempts", "rollouts")
            for r in await _run_sql(url, schema, f"PRAGMA index_list({table})")
        }
    else:
        cols = {
            r["column_name"]: r["data_type"]
            for r in await _run_sql(
                url,
                schema,
                f"SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = '{schema}' "
                "AND table_name = 'spans'",
            )
        }
        assert cols["sequence_id"] == "bigint" and cols["start_time"] == "double precision"
        assert cols["attributes"] == "jsonb"
        indexes = {
            r["indexname"]
            for r in await _run_sql(url, schema, f"SELECT indexname FROM pg_indexes WHERE schemaname = '{schema}'")
        }
    assert {"ix_rollouts_status", "ix_rollouts_start_time"} <= indexes
    # Attempts and spans keep only their primary-key index (schema version 2).
    assert not {name for name in indexes if name.startswith(("ix_attempts", "ix_spans"))}


_V1_INDEXES = (
    "CREATE INDEX ix_attempts_rollout_id_sequence_id ON attempts (rollout_id, sequence_id)",
    "CREATE INDEX ix_attempts_status ON attempts (status)",
    "CREATE INDEX ix_attempts_worker_id ON attempts (worker_id)",
    "CREATE INDEX ix_spans_rollout_id_sequence_id ON spans (rollout_id, sequence_id)",
)


async def test_version_1_database_is_migrated(target: tuple[str, str]) -> None:
    """A database written by schema version 1 (secondary indexes on attempts and spans) opens, loses those indexes,
    keeps its data and reports version 2."""
    url, schema = target
    store = open_target_store(url, schema)
    try:
        rollout = await store.start_rollout(input={"q": 1})
        span = Span.from_attributes(
            attributes={"k": "v"}, rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id, sequence_id=1
        )
        await store.add_span(span)
    finally:
        await store.close()
    for statement in _V1_INDEXES:
        await _run_sql(url, schema, statement)
    await _run_sql(url, schema, f"UPDATE {SCHEMA_TABLE} SET version = 1")
    migrated = open_target_store(url, schema)
    try:
        spans = await migrated.query_spans(rollout.rollout_id, attempt_id="latest")
        assert [s.span_id for s in spans] == [span.span_id]
    finally:
        await migrated.close()
    assert (await _run_sql(url, schema, f"SELECT version FROM {SCHEMA_TABLE}"))[0][0] == SCHEMA_VERSION == 2
    if schema == "-":
        names = {r[0] for r in await _run_sql(url, schema, "SELECT name FROM sqlite_master WHERE type = 'index'")}
    else:
        rows = await _run_sql(url, schema, f"SELECT indexname FROM pg_indexes WHERE schemaname = '{schema}'")
        names = {r["indexname"] for r in rows}
    assert not names & {statement.split()[2] for statement in _V1_INDEXES}
    assert "ix_rollouts_status" in names


async def test_newer_schema_version_fails_with_clear_message(target: tuple[str, str]) -> None:
    url, schema = target
    store = open_target_store(url, schema)
    try:
        await store.initialize()
    finally:
        await store.close()
    await _run_sql(url, schema, f"UPDATE {SCHEMA_TABLE} SET version = {SCHEMA_VERSION + 41}")
    newer = open_target_store(url, schema)
    try:
        with pytest.raises(SchemaVersionError) as info:
            await newer.enqueue_rollout({"q": 1})
    finally:
        await newer.close()
    message = str(info.value)
    assert f"schema version {SCHEMA_VERSION + 41}" in message
    assert f"schema version {SCHEMA_VERSION} at most" in message
    if schema == "-":
        assert sa.engine.make_url(url).database in message
    else:
        assert "127.0.0.1" in message or "localhost" in message


async def test_foreign_tables_without_version_table_are_refused(target: tuple[str, str]) -> None:
    url, schema = target
    await _run_sql(url, schema, "CREATE TABLE rollouts (id INTEGER)")
    store = open_target_store(url, schema)
    try:
        with pytest.raises(SchemaVersionError, match="no rollouthub_schema table"):
            await store.initialize()
    finally:
        await store.close()


async def test_forward_migration_runs_once(target: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, schema = target
    store = open_target_store(url, schema)
    try:
        rollout = await store.enqueue_rollout({"q": 1})
    finally:
        await store.close()
    calls: list[int] = []

    async def to_v2(conn: Any, sql_schema_obj: Any) -> None:
        calls.append(1)
        await conn.exec_driver_sql("CREATE TABLE rollouthub_migration_probe (x INTEGER)")

    monkeypatch.setattr(sql_schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setitem(sql_schema.MIGRATIONS, SCHEMA_VERSION, to_v2)
    for _ in range(2):
        upgraded = open_target_store(url, schema)
        try:
            assert (await upgraded.get_rollout_by_id(rollout.rollout_id)) is not None
        finally:
            await upgraded.close()
    assert calls == [1]
    rows = await _run_sql(url, schema, f"SELECT version FROM {SCHEMA_TABLE}")
    assert rows[0][0] == SCHEMA_VERSION + 1
    assert (await _run_sql(url, schema, "SELECT count(*) FROM rollouthub_migration_probe"))[0][0] == 0


async def test_missing_migration_fails(target: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, schema = target
    store = open_target_store(url, schema)
    try:
        await store.initialize()
    finally:
        await store.close()
    monkeypatch.setattr(sql_schema, "SCHEMA_VERSION", SCHEMA_VERSION + 2)
    store = open_target_store(url, schema)
    try:
        with pytest.raises(SchemaVersionError, match=f"no migration to version {SCHEMA_VERSION + 1}"):
            await store.initialize()
    finally:
        await store.close()
