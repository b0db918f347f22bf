"""Export rows trainers accept, without the training stack: every chat field a non-empty list of messages, preference
pairs only between answers to one prompt, TRL's field names, ``--dedupe``, output extensions, and the sources named
as everywhere else (``--db`` paths and URLs, ``--store`` with any URL the server prints)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, Dict, List

import pytest

from rollouthub.export import export
from rollouthub.export.dedupe import RowDeduper
from rollouthub.export.preferences import split_pair

from .conftest import PROMPT_PLAN, PromptsDb, run_cli, serve_store

pytestmark = pytest.mark.timeout(300)

CHAT_FIELDS = ("prompt", "completion", "chosen", "rejected", "messages")
"""The fields TRL reads as conversations (``trl.data_utils.is_conversational`` looks at whichever of them a row has
first, in an order that depends on the hash seed: each must be a non-empty list of messages)."""


def _read_jsonl(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _assert_conversational(row: Dict[str, Any]) -> None:
    present = [key for key in CHAT_FIELDS if key in row]
    assert present, row
    for key in present:
        value = row[key]
        assert isinstance(value, list) and value, (key, row)
        assert all(isinstance(m, dict) and m.get("role") in ("system", "user", "assistant", "tool") for m in value)


# ---------------------------------------------------------------------------------------------------------------------
# Preference pairs
# ---------------------------------------------------------------------------------------------------------------------


def test_pairs_are_answers_to_one_prompt_of_one_input(prompts_db: PromptsDb, tmp_path: Path) -> None:
    ids = prompts_db.rollout_ids
    export("messages", str(tmp_path / "m.jsonl"), database=str(prompts_db.path))
    messages = {row["rollout_id"]: row for row in _read_jsonl(tmp_path / "m.jsonl")}
    # The agent ran the plan in queue order; the model answered each prompt yes, no, yes, ...
    assert [messages[i]["reward"] for i in ids] == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert messages[ids[0]]["messages"][:-1] == messages[ids[1]]["messages"][:-1]  # two versions, one prompt
    assert messages[ids[0]]["messages"][:-1] != messages[ids[2]]["messages"][:-1]
    assert messages[ids[0]]["resources_id"] != messages[ids[1]]["resources_id"]

    summary = export("preferences", str(tmp_path / "p.jsonl"), database=str(prompts_db.path))
    pairs = _read_jsonl(tmp_path / "p.jsonl")
    # Same input and same prompt: rollouts 0/1 (v1 and v1-again render the same prompt) and 2/3 (v2). Not 0/3 or 2/1
    # (same input, different prompts), not 4 (same prompt as 0, another input).
    assert [(p["chosen_rollout_id"], p["rejected_rollout_id"]) for p in pairs] == [(ids[0], ids[1]), (ids[2], ids[3])]
    assert (
        summary.describe() == "2 pairs from 4 of 5 selected rollouts; skipped 1: 1 no other answer to the same prompt"
    )
    for pair in pairs:
        chosen, rejected = messages[pair["chosen_rollout_id"]], messages[pair["rejected_rollout_id"]]
        assert [m["role"] for m in pair["prompt"]] == ["system", "user"]
        assert pair["chosen"] == [{"role": "assistant", "content": "yes"}]
        assert pair["rejected"] == [{"role": "assistant", "content": "no"}]
        assert pair["prompt"] + pair["chosen"] == chosen["messages"]
        assert pair["prompt"] + pair["rejected"] == rejected["messages"]
        assert pair["input"] == chosen["input"] == rejected["input"] == PROMPT_PLAN[0][1]
        assert (pair["chosen_resources_id"], pair["rejected_resources_id"]) == (
            chosen["resources_id"],
            rejected["resources_id"],
        )
        _assert_conversational(pair)

    # Restricted to one resources version: only the pair of that version.
    v2 = messages[ids[2]]["resources_id"]
    export("preferences", str(tmp_path / "v2.jsonl"), database=str(prompts_db.path), resources_id_in=[v2])
    assert [(p["chosen_rollout_id"], p["rejected_rollout_id"]) for p in _read_jsonl(tmp_path / "v2.jsonl")] == [
        (ids[2], ids[3])
    ]


def test_the_shared_prompt_ends_before_an_answer_of_each() -> None:
    system = {"role": "system", "content": "Use the tool."}
    user = {"role": "user", "content": "2+3?"}

    def call(call_id: str, a: int) -> Dict[str, Any]:
        function = {"name": "add", "arguments": json.dumps({"a": a, "b": 3})}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }

    def tool(call_id: str, value: str) -> Dict[str, Any]:
        return {"role": "tool", "content": value, "tool_call_id": call_id}

    answer_5, answer_6 = {"role": "assistant", "content": "5"}, {"role": "assistant", "content": "6"}
    # Same tool call, different final answers: the prompt holds the tool turn.
    a = [system, user, call("c1", 2), tool("c1", "5"), answer_5]
    b = [system, user, call("c1", 2), tool("c1", "5"), answer_6]
    assert split_pair(a, b) == (a[:4], [answer_5], [answer_6])
    # Different tool calls (the tool results differ too): the answers start at the first assistant message.
    c = [system, user, call("c2", 3), tool("c2", "6"), answer_6]
    assert split_pair(a, c) == (a[:2], a[2:], c[2:])
    # One conversation continuing where the other stopped: both sides still start with an assistant message.
    assert split_pair([system, user, answer_5], [system, user, answer_5, user, answer_6]) == (
        [system, user],
        [answer_5],
        [answer_5, user, answer_6],
    )
    # Identical conversations (different rewards, same words) teach no preference.
    assert split_pair(a, [dict(m) for m in a]) is None


# ---------------------------------------------------------------------------------------------------------------------
# Rows of every format: chat fields TRL can read, TRL's names
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["quickstart_db", "agent_db", "prompts_db"])
def test_every_chat_field_is_a_non_empty_list_of_messages(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    found = request.getfixturevalue(fixture)
    db = found.path if isinstance(found, PromptsDb) else found
    counts = {}
    for kind in ("messages", "triplets", "preferences"):
        export(kind, str(tmp_path / f"{kind}.jsonl"), database=str(db))
        rows = _read_jsonl(tmp_path / f"{kind}.jsonl")
        counts[kind] = len(rows)
        for row in rows:
            _assert_conversational(row)
    assert counts["messages"] > 0 and counts["triplets"] > 0
    assert counts["preferences"] == {"quickstart_db": 0, "agent_db": 3, "prompts_db": 2}[fixture]


def test_triplets_use_trl_names_and_keep_the_old_ones_on_request(prompts_db: PromptsDb, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    result = run_cli("export", "triplets", "--db", str(prompts_db.path), "-o", str(out), "-q")
    assert result.returncode == 0, result.stderr
    rows = _read_jsonl(out)
    assert len(rows) == len(PROMPT_PLAN)
    for row in rows:
        assert {"prompt", "completion", "prompt_token_ids", "completion_token_ids"} <= set(row)
        assert "response" not in row and "response_token_ids" not in row
        assert row["completion"] in (
            [{"role": "assistant", "content": "yes"}],
            [{"role": "assistant", "content": "no"}],
        )
        assert row["reward"] == row["final_reward"] == (1.0 if row["completion"][0]["content"] == "yes" else 0.0)
    result = run_cli("export", "triplets", "--db", str(prompts_db.path), "--triplet-fields", "response", "-q")
    assert result.returncode == 0, result.stderr
    legacy = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["response"] for r in legacy] == [r["completion"][0]["content"] for r in rows]
    assert all("completion" not in r and "response_token_ids" in r for r in legacy)


# ---------------------------------------------------------------------------------------------------------------------
# --dedupe
# ---------------------------------------------------------------------------------------------------------------------


def _identity(row: Dict[str, Any], fields: List[str]) -> str:
    return json.dumps([row.get(f) for f in fields], sort_keys=True)


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        ("messages", ["messages", "tools"]),
        ("triplets", ["prompt", "completion", "prompt_token_ids", "completion_token_ids"]),
        ("trajectories", ["prompt_ids", "response_ids", "response_mask"]),
    ],
)
def test_dedupe_keeps_the_first_of_each_distinct_row(
    quickstart_db: Path, tmp_path: Path, kind: str, fields: List[str]
) -> None:
    export(kind, str(tmp_path / "all.jsonl"), database=str(quickstart_db))
    rows = _read_jsonl(tmp_path / "all.jsonl")
    out = tmp_path / "unique.jsonl"
    result = run_cli("export", kind, "--db", str(quickstart_db), "--dedupe", "-o", str(out))
    assert result.returncode == 0, result.stderr
    unique = _read_jsonl(out)
    expected: Dict[str, Dict[str, Any]] = {}
    for row in rows:
        expected.setdefault(_identity(row, fields), row)
    # The quickstart's mock answers each prompt the same way every time: many repeats.
    assert len(unique) == len(expected) < len(rows)
    assert unique == list(expected.values())  # first occurrences, in export order
    dropped = len(rows) - len(unique)
    assert f"{len(unique)} rows from {len(rows)} of {len(rows)} selected rollouts; dropped {dropped}: " in result.stderr
    assert f"{dropped} duplicate rows" in result.stderr


def test_dedupe_of_pairs_and_where_it_does_not_apply(prompts_db: PromptsDb, agent_db: Path, tmp_path: Path) -> None:
    summary = export("preferences", str(tmp_path / "p.jsonl"), database=str(prompts_db.path), dedupe=True)
    # Both pairs are "yes" over "no", but to different prompts: both stay.
    assert summary.rows == 2 and not summary.dropped
    result = run_cli("export", "rewards", "--db", str(agent_db), "--dedupe")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "rollouthub export: error: dedupe applies to messages, triplets, preferences, trajectories rows, not to "
        "rewards rows\n"
    )


def test_a_trajectory_is_its_token_ids_and_mask() -> None:
    deduper = RowDeduper("trajectories")
    row = {
        "rollout_id": "ro-1",
        "prompt_ids": [1, 2],
        "response_ids": [3, 4, 5],
        "response_mask": [1, 0, 1],
        "response_logprobs": [-0.5, 0.0, -0.25],
        "reward": 1.0,
        "policy_version": 3,
    }
    assert deduper.first_time(row)
    # Another rollout sampling the same tokens, scored and served differently: the same training content.
    assert not deduper.first_time(
        {**row, "rollout_id": "ro-2", "response_logprobs": None, "reward": 0.0, "policy_version": 4}
    )
    # The same tokens with another one spliced in instead of sampled (or another prompt) are another sample.
    assert deduper.first_time({**row, "response_mask": [1, 1, 1]})
    assert deduper.first_time({**row, "prompt_ids": [1, 2, 3], "response_ids": [4, 5]})


# ---------------------------------------------------------------------------------------------------------------------
# Output file formats
# ---------------------------------------------------------------------------------------------------------------------


def test_the_output_extension_selects_the_format_or_is_an_error(agent_db: Path, tmp_path: Path) -> None:
    for name, hint in (
        ("out.csv", ""),
        ("out.json", " (the rows are JSON Lines, one object per line: name it .jsonl)"),
    ):
        result = run_cli("export", "messages", "--db", str(agent_db), "-o", str(tmp_path / name))
        assert result.returncode == 2, result.stderr
        assert result.stderr == (
            f"rollouthub export: error: cannot tell the file format of {str(tmp_path / name)!r} from its extension"
            f"{hint}; use .jsonl, .ndjson, .parquet, .pq or give --file-format jsonl|parquet\n"
        )
        assert list(tmp_path.iterdir()) == []  # nothing written, not even a .part file
    # Checked before the source is read: the Python API says the same about a database that does not exist.
    with pytest.raises(ValueError, match="cannot tell the file format of"):
        export("messages", str(tmp_path / "x.csv"), database=str(tmp_path / "missing.db"))

    expected = _read_jsonl_stdout(run_cli("export", "messages", "--db", str(agent_db), "-q"))
    for name, extra in (("upper.JSONL", ()), ("lines.ndjson", ()), ("data.txt", ("--file-format", "jsonl"))):
        result = run_cli("export", "messages", "--db", str(agent_db), "-q", "-o", str(tmp_path / name), *extra)
        assert result.returncode == 0, result.stderr
        assert _read_jsonl(tmp_path / name) == expected


def _read_jsonl_stdout(result: Any) -> List[Dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows
    return rows


# ---------------------------------------------------------------------------------------------------------------------
# Sources: --db and --store named as everywhere
# ---------------------------------------------------------------------------------------------------------------------


def test_db_accepts_paths_and_sqlite_urls(agent_db: Path, tmp_path: Path) -> None:
    expected = _read_jsonl_stdout(run_cli("export", "rewards", "--db", str(agent_db), "-q"))
    relative = os.path.relpath(agent_db, tmp_path)  # from the test's directory: ../agentN/agent.db
    for form in (f"sqlite:///{agent_db}", f"sqlite:///{relative}", relative, f"sqlite+aiosqlite:///{agent_db}"):
        assert _read_jsonl_stdout(run_cli("export", "rewards", "--db", form, "-q", cwd=tmp_path)) == expected, form
    for form, message in (
        (str(tmp_path / "nowhere" / "x.db"), f"no database at {tmp_path / 'nowhere' / 'x.db'}"),
        ("mysql://db/x", "unsupported backend 'mysql://' in 'mysql://db/x'"),
        ("memory", "'memory' is not a database here"),
    ):
        result = run_cli("export", "rewards", "--db", form, "-q")
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"rollouthub export: error: {message}"), result.stderr
    # A PostgreSQL URL is a database too: one line naming it when it cannot be reached.
    result = run_cli("export", "rewards", "--db", "postgresql://rh@127.0.0.1:1/none", "-q")
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("rollouthub export: error: cannot read the PostgreSQL postgresql://rh@127.0.0.1:1/")


async def test_store_accepts_every_url_the_server_prints(agent_db: Path) -> None:
    server = await serve_store(agent_db)
    try:
        port = server.endpoint.rsplit(":", 1)[1]
        forms = [server.endpoint, server.endpoint + "/", server.endpoint + "/v1/agl", f"127.0.0.1:{port}"]
        results = [await asyncio.to_thread(run_cli, "export", "rewards", "--store", form, "-q") for form in forms]
        expected = _read_jsonl_stdout(
            await asyncio.to_thread(run_cli, "export", "rewards", "--db", str(agent_db), "-q")
        )
        for form, result in zip(forms, results, strict=True):
            assert _read_jsonl_stdout(result) == expected, form
        result = await asyncio.to_thread(run_cli, "export", "rewards", "--store", f"ftp://127.0.0.1:{port}", "-q")
        assert result.returncode == 1
        assert result.stderr == (
            f"rollouthub export: error: store URL 'ftp://127.0.0.1:{port}' is not http(s): write http://host:port\n"
        )
    finally:
        await server.stop()
