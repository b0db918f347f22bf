"""The SQLite driver of the SQL backend (:mod:`rollouthub.store.collection.sql_sqlite`), in both modes."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from functools import partial
from pathlib import Path

import pytest

from rollouthub.store.collection.sql_dialect_sqlite import sqlite_pragmas
from rollouthub.store.collection.sql_sqlite import SqliteDriver, make_driver_factory


@pytest.fixture(params=[True, False], ids=["inline", "thread"])
def inline(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


async def _open(path: Path, inline: bool, busy_timeout: float = 5.0) -> SqliteDriver:
    return await make_driver_factory(
        str(path), busy_timeout, partial(sqlite_pragmas, synchronous="NORMAL"), inline=inline
    )()


async def test_only_a_thread_mode_connection_waits_inside_sqlite(tmp_path: Path, inline: bool) -> None:
    # Inline, SQLite's own busy timeout is 0 (the pragmas must not raise it back): a lock held by another process
    # is waited for with asyncio.sleep, never by blocking the event loop.
    driver = await _open(tmp_path / "d.db", inline, busy_timeout=3.0)
    assert (await driver.run("PRAGMA busy_timeout", [], True))[0] == [(0 if inline else 3000,)]
    assert (await driver.run("PRAGMA journal_mode", [], True))[0] == [("wal",)]
    await driver.close()


async def test_statements_transactions_and_close(tmp_path: Path, inline: bool) -> None:
    driver = await _open(tmp_path / "d.db", inline)
    assert not driver.is_closed()
    await driver.run("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)", [], False)
    # A pending BEGIN starts the transaction together with the next statement; rollback undoes it.
    driver.pending_begin = "BEGIN IMMEDIATE"
    rows, count = await driver.run("INSERT INTO t (v) VALUES (?)", ["a"], False)
    assert (rows, count) == ([], 1)
    await driver.rollback()
    assert (await driver.run("SELECT count(*) FROM t", [], True))[0] == [(0,)]
    # call() runs several statements in one go, inside the pending transaction; commit keeps them.
    driver.pending_begin = "BEGIN IMMEDIATE"
    await driver.call(lambda db: db.executemany("INSERT INTO t (v) VALUES (?)", [("x",), ("y",)]))
    await driver.commit()
    assert (await driver.run("SELECT v FROM t ORDER BY k", [], True))[0] == [("x",), ("y",)]
    # Without an open transaction, commit and rollback have nothing to do.
    await driver.commit()
    await driver.rollback()
    await driver.close()
    assert driver.is_closed()
    with pytest.raises(sqlite3.ProgrammingError):
        await driver.run("SELECT 1", [], True)


async def test_thread_mode_runs_in_one_worker_thread(tmp_path: Path) -> None:
    driver = await _open(tmp_path / "d.db", inline=False)
    loop_thread = threading.get_ident()
    threads = {await driver.call(lambda db: threading.get_ident()) for _ in range(5)}
    assert len(threads) == 1 and loop_thread not in threads
    assert driver.run_now("SELECT 1", [], True) is None  # thread mode never runs on the loop thread
    driver.terminate()
    assert driver.is_closed()


async def test_inline_mode_waits_for_another_writer_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    driver = await _open(path, inline=True)
    await driver.run("CREATE TABLE t (v TEXT)", [], False)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        assert driver.run_now("SELECT count(*) FROM t", [], True) == ([(0,)], -1)  # WAL readers never wait
        driver.pending_begin = "BEGIN IMMEDIATE"
        assert driver.run_now("INSERT INTO t VALUES ('a')", [], False) is None  # the lock is taken: must wait
        waiting = asyncio.ensure_future(driver.run("INSERT INTO t VALUES ('a')", [], False))
        ticks = 0
        while not waiting.done() and ticks < 20:  # the loop keeps running while the writer waits
            await asyncio.sleep(0)
            ticks += 1
        assert ticks == 20 and not waiting.done()
        holder.execute("COMMIT")
        assert (await asyncio.wait_for(waiting, 10))[1] == 1
        await driver.commit()
    finally:
        holder.close()
    assert (await driver.run("SELECT count(*) FROM t", [], True))[0] == [(1,)]
    await driver.close()


async def test_inline_mode_gives_up_after_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    driver = await _open(path, inline=True, busy_timeout=0.05)
    await driver.run("CREATE TABLE t (v TEXT)", [], False)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        driver.pending_begin = "BEGIN IMMEDIATE"
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await asyncio.wait_for(driver.run("INSERT INTO t VALUES ('a')", [], False), 10)
    finally:
        holder.close()
        await driver.close()
