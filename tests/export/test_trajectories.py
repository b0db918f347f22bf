"""``rollouthub export trajectories`` on real stores: the quickstart's (its mock LLM's token ids are the UTF-8 bytes of
the text, so every row decodes back to the call's prompt and answer), a tool-calling agent's, Parquet, the CLI and the
server's route."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Dict, List

import aiohttp
import pytest

from rollouthub.adapter import input_group_id
from rollouthub.export import export
from rollouthub.testing import prompt_text

from .conftest import serve_store
from .test_export import _cli, _llm_spans, _read_jsonl, _spans_by_rollout

pytestmark = pytest.mark.timeout(300)


def test_quickstart_trajectories_decode_to_each_calls_prompt_and_answer(quickstart_db: Path, tmp_path: Path) -> None:
    summary = export("trajectories", str(tmp_path / "t.jsonl"), database=str(quickstart_db))
    rows = _read_jsonl(tmp_path / "t.jsonl")
    truth = asyncio.run(_spans_by_rollout(quickstart_db))
    assert len(rows) == len(truth) == summary.rows == summary.rollouts_exported and not summary.skipped
    assert summary.notes == {"calls without logprobs": len(rows)}  # the mock reports no log-probabilities
    export("messages", str(tmp_path / "m.jsonl"), database=str(quickstart_db))
    conversations = {row["rollout_id"]: row for row in _read_jsonl(tmp_path / "m.jsonl")}
    for row in rows:
        rollout, spans = truth[row["rollout_id"]]
        [llm] = _llm_spans(spans)
        prompt, answer = conversations[row["rollout_id"]]["messages"]
        # Token ids are the mock's: the UTF-8 bytes of the prompt as it renders it, and of the answer.
        assert bytes(row["prompt_ids"]).decode() == prompt_text({"messages": [prompt]}) == prompt["content"]
        assert bytes(row["response_ids"]).decode() == answer["content"] == llm.attributes["gen_ai.completion.0.content"]
        assert rollout.input["review"] in prompt["content"]
        assert row["response_mask"] == [1] * len(row["response_ids"]) and row["response_logprobs"] is None
        assert row["call_ranges"] == [[0, len(row["response_ids"])]] and row["span_ids"] == [llm.span_id]
        assert row["reward"] == row["call_rewards"][0] == conversations[row["rollout_id"]]["reward"]
        assert (row["input_id"], row["resources_id"], row["mode"]) == (
            input_group_id(rollout.input),
            rollout.resources_id,
            rollout.mode,
        )
        assert (row["level"], row["sample"], row["policy_version"]) == ("trajectory", 0, None)


def test_calls_without_token_ids_are_counted_in_the_summary(agent_db: Path, tmp_path: Path) -> None:
    # The tool-calling agent's first call answers with a tool call only: the mock reports no answer ids for it.
    truth = asyncio.run(_spans_by_rollout(agent_db))
    summary = export("trajectories", str(tmp_path / "t.jsonl"), database=str(agent_db))
    rows = _read_jsonl(tmp_path / "t.jsonl")
    assert summary.notes == {"calls without token ids": len(truth), "calls without logprobs": len(truth)}
    assert f"; {len(truth)} calls without token ids" in summary.describe()
    assert len(rows) == len(truth)
    for row in rows:
        _, spans = truth[row["rollout_id"]]
        second = _llm_spans(spans)[1]
        assert row["prompt_ids"] == second.attributes["prompt_token_ids"]
        assert row["response_ids"] == second.attributes["response_token_ids"]
        assert row["span_ids"] == [second.span_id] and row["call_rewards"] == [row["reward"]]
    # input_id is the key preference pairs group by (with the prompt): both sides of every pair share it.
    export("preferences", str(tmp_path / "p.jsonl"), database=str(agent_db))
    input_ids = {row["rollout_id"]: row["input_id"] for row in rows}
    pairs = _read_jsonl(tmp_path / "p.jsonl")
    assert pairs
    for pair in pairs:
        assert (
            input_ids[pair["chosen_rollout_id"]]
            == input_ids[pair["rejected_rollout_id"]]
            == input_group_id(pair["input"])
        )
    transitions = export("trajectories", str(tmp_path / "x.jsonl"), database=str(agent_db), level="transition")
    assert _read_jsonl(tmp_path / "x.jsonl") == [{**row, "level": "transition"} for row in rows]
    assert transitions.notes == summary.notes
    with pytest.raises(ValueError, match="unknown trajectory level 'turn'"):
        export("trajectories", str(tmp_path / "y.jsonl"), database=str(agent_db), level="turn")  # type: ignore[arg-type]
    assert not (tmp_path / "y.jsonl").exists()


def test_cli_level_and_parquet_read_back_like_jsonl(quickstart_db: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq  # the [parquet] extra, part of [dev]

    jsonl, parquet = tmp_path / "t.jsonl", tmp_path / "t.parquet"
    for out in (jsonl, parquet):
        result = _cli("trajectories", "--level", "transition", "--db", str(quickstart_db), "-o", str(out))
        assert result.returncode == 0, result.stderr
        assert f"Exported to {out}: " in result.stderr and "calls without logprobs" in result.stderr
    rows = _read_jsonl(jsonl)
    table = pq.read_table(parquet)
    assert table.column_names == list(rows[0]) and table.to_pylist() == rows
    assert {row["level"] for row in rows} == {"transition"}
    result = _cli("messages", "--level", "transition", "--db", str(quickstart_db))
    assert result.returncode == 2 and "--level applies to the trajectories format only" in result.stderr
    result = _cli("trajectories", "--level", "turn", "--db", str(quickstart_db))
    assert result.returncode == 2 and "invalid choice: 'turn'" in result.stderr


async def test_route_streams_trajectories_and_checks_the_level(agent_db: Path, tmp_path: Path) -> None:
    expected: Dict[str, List[Any]] = {}
    for level in ("trajectory", "transition"):
        path = tmp_path / f"{level}.jsonl"
        await asyncio.to_thread(export, "trajectories", str(path), database=str(agent_db), level=level)
        expected[level] = _read_jsonl(path)
    unique = tmp_path / "unique.jsonl"
    await asyncio.to_thread(export, "trajectories", str(unique), database=str(agent_db), dedupe=True)
    expected["dedupe"] = _read_jsonl(unique)
    server = await serve_store(agent_db)
    try:
        async with aiohttp.ClientSession() as session:
            for query, level in (("", "trajectory"), ("&level=transition", "transition"), ("&dedupe=true", "dedupe")):
                async with session.get(f"{server.endpoint}/v1/agl/export?format=trajectories{query}") as response:
                    assert response.status == 200
                    rows = [json.loads(line) for line in (await response.text()).splitlines()]
                assert rows == expected[level] and rows
            for query, message in (
                ("format=trajectories&level=turn", "must be one of transition, trajectory"),
                ("format=messages&level=transition", "applies to format=trajectories only"),
                ("format=trajectories&level=trajectory&level=transition", "given more than once"),
            ):
                async with session.get(f"{server.endpoint}/v1/agl/export?{query}") as response:
                    assert response.status == 400, query
                    assert (await response.json())["detail"] == f"Invalid query parameter level: {message}", query
    finally:
        await server.stop()
