"""``rollouthub inspect`` (:mod:`rollouthub.export.overview`) on a real store, from the database file and through a
running server: counts, recent rollouts and the final reward per resources version, tables and ``--json``, one-line
errors and exit codes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Dict

import pytest

from rollouthub.store.sql import SqlLightningStore

from .conftest import PROMPT_PLAN, PromptsDb, run_cli, serve_store

pytestmark = pytest.mark.timeout(300)


async def _truth(db: Path) -> Dict[str, Any]:
    """What the store holds, read straight from it."""
    store = SqlLightningStore(f"sqlite:///{db}")
    try:
        rollouts = list((await store.query_rollouts()).items)
        return {
            "rollouts": {r.rollout_id: r for r in rollouts},
            "statistics": await store.statistics(),
            "resources": [r.resources_id for r in (await store.query_resources(sort_by="create_time")).items],
        }
    finally:
        await store.close()


def _json(result: Any) -> Dict[str, Any]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_inspect_shows_counts_recent_rollouts_and_rewards_per_version(prompts_db: PromptsDb) -> None:
    truth = asyncio.run(_truth(prompts_db.path))
    ids = prompts_db.rollout_ids
    report = _json(run_cli("inspect", "--db", str(prompts_db.path), "--recent", "2", "--json"))
    assert report["source"] == f"SQLite file {prompts_db.path}"
    counts = report["counts"]
    assert counts["rollouts"] == len(PROMPT_PLAN) == counts["rollouts_by_status"]["succeeded"]
    assert sum(counts["rollouts_by_status"].values()) == len(PROMPT_PLAN)
    assert counts["spans"] == truth["statistics"]["total_spans"] > 0
    assert counts["attempts"] == len(PROMPT_PLAN) and counts["resources"] == 3
    assert counts["workers"] == 1 and sum(counts["workers_by_status"].values()) == 1

    # The two latest rollouts by start time, newest first, with their final rewards (yes, no, yes, no, yes).
    assert [item["rollout_id"] for item in report["recent"]] == [ids[4], ids[3]]
    for item in report["recent"]:
        rollout = truth["rollouts"][item["rollout_id"]]
        assert (item["status"], item["mode"], item["resources_id"]) == ("succeeded", "train", rollout.resources_id)
        assert (item["start_time"], item["end_time"]) == (rollout.start_time, rollout.end_time)
        assert item["duration"] == pytest.approx(rollout.end_time - rollout.start_time)
    assert [item["reward"] for item in report["recent"]] == [1.0, 0.0]

    # Rewards per resources version in first-seen order: v1 (rollouts 0 and 4), v1-again (1), v2 (2 and 3).
    v1, v1_again, v2 = truth["resources"]
    assert report["rewards_by_resources"] == [
        {"resources_id": v1, "rollouts": 2, "rewarded": 2, "mean": 1.0, "min": 1.0, "max": 1.0},
        {"resources_id": v1_again, "rollouts": 1, "rewarded": 1, "mean": 0.0, "min": 0.0, "max": 0.0},
        {"resources_id": v2, "rollouts": 2, "rewarded": 2, "mean": 0.5, "min": 0.0, "max": 1.0},
    ]
    assert report["rewards_mode_in"] is None
    only_val = _json(run_cli("inspect", "--db", str(prompts_db.path), "--mode", "val", "--json", "--recent", "0"))
    assert only_val["rewards_by_resources"] == [] and only_val["recent"] == []

    # The same as tables.
    result = run_cli("inspect", "--db", f"sqlite:///{prompts_db.path}", "--recent", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"SQLite file {prompts_db.path}"
    assert any("rollouts" in line and "5 succeeded" in line for line in lines)
    assert any(ids[4] in line and "succeeded" in line and "1.000" in line for line in lines)
    assert any(v2 in line and "0.500" in line and "0.000" in line and "1.000" in line for line in lines)
    for heading in ("Counts", "Recent rollouts (2)", "Final reward per resources version"):
        assert heading in result.stdout


async def test_inspect_through_the_server_reads_the_same(prompts_db: PromptsDb) -> None:
    direct = _json(await asyncio.to_thread(run_cli, "inspect", "--db", str(prompts_db.path), "--json"))
    server = await serve_store(prompts_db.path, token="secret")
    try:
        url = server.endpoint + "/v1/agl"
        through = _json(await asyncio.to_thread(run_cli, "inspect", "--store", url, "--api-token", "secret", "--json"))
        assert through["source"] == f"store server {server.endpoint}"
        assert {k: v for k, v in through.items() if k != "source"} == {k: v for k, v in direct.items() if k != "source"}
        refused = await asyncio.to_thread(run_cli, "inspect", "--store", url, "--json")
        assert refused.returncode == 1 and refused.stdout == "" and refused.stderr.count("\n") == 1
        assert refused.stderr.startswith(f"rollouthub inspect: error: cannot read the store server {server.endpoint}: ")
    finally:
        await server.stop()


def test_inspect_errors_are_one_line_with_truthful_exit_codes(prompts_db: PromptsDb, tmp_path: Path) -> None:
    for args, code, message in (
        (["--db", str(tmp_path / "missing.db")], 1, f"no database at {tmp_path / 'missing.db'}"),
        ([], 1, "no database at ./rollouthub.db; pass --db PATH or --store URL"),
        (["--db", str(prompts_db.path), "--store", "127.0.0.1:9"], 2, "give either --store or --db, not both"),
        (["--db", str(prompts_db.path), "--recent", "-1"], 2, "--recent must be 0 or more"),
        (["--store", "127.0.0.1:99999"], 1, "store URL '127.0.0.1:99999' has an invalid port"),
    ):
        result = run_cli("inspect", *args, cwd=tmp_path)
        assert (result.returncode, result.stderr) == (code, f"rollouthub inspect: error: {message}\n"), args
        assert result.stdout == ""
    result = run_cli("inspect", "--store", "http://127.0.0.1:9", "--json")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("rollouthub inspect: error: cannot read the store server http://127.0.0.1:9: ")


def test_inspect_shows_unfinished_rollouts_as_such(tmp_path: Path) -> None:
    db = tmp_path / "live.db"

    async def fill() -> Dict[str, str]:
        store = SqlLightningStore(f"sqlite:///{db}")
        try:
            queued = await store.enqueue_rollout(input={"q": 1}, mode="val")
            running = await store.start_rollout(input={"q": 2}, mode="train", worker_id="w-1")
            return {"queued": queued.rollout_id, "running": running.rollout_id}
        finally:
            await store.close()

    ids = asyncio.run(fill())
    report = _json(run_cli("inspect", "--db", str(db), "--json"))
    by_status = report["counts"]["rollouts_by_status"]
    assert (by_status["queuing"], by_status["running"] + by_status["preparing"], report["counts"]["rollouts"]) == (
        1,
        1,
        2,
    )
    recent = {item["rollout_id"]: item for item in report["recent"]}
    assert set(recent) == set(ids.values())
    for item in recent.values():  # not ended: the duration runs to now
        assert item["end_time"] is None and item["duration"] >= 0 and item["reward"] is None
    assert report["rewards_by_resources"] == []
    result = run_cli("inspect", "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert "(running)" in result.stdout and "No finished rollouts: no rewards to show." in result.stdout
