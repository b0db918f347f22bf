"""``rollouthub.export`` on real stores: every format checked against the spans, Parquet read back with pyarrow, the
CLI, and the same rows through the server's streaming route."""

from __future__ import annotations

import ast
import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import aiohttp
import pytest

from rollouthub.emitter import find_final_reward
from rollouthub.export import ExportSelection, export, iter_export_rows
from rollouthub.store.sql import SqlLightningStore
from rollouthub.types import Span

from .conftest import ADD_TOOL, QUESTIONS, RUNS_PER_QUESTION, run_cli, serve_store

pytestmark = pytest.mark.timeout(300)


def _read_jsonl(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _spans_by_rollout(db: Path) -> Dict[str, Tuple[Any, List[Span]]]:
    """rollout id → (rollout, spans of its latest attempt in sequence order), read straight from the store."""
    store = SqlLightningStore(f"sqlite:///{db}")
    try:
        out: Dict[str, Tuple[Any, List[Span]]] = {}
        for rollout in await store.query_rollouts():
            spans = sorted(await store.query_spans(rollout.rollout_id, "latest"), key=lambda s: s.sequence_id)
            out[rollout.rollout_id] = (rollout, spans)
        return out
    finally:
        await store.close()


def _llm_spans(spans: List[Span]) -> List[Span]:
    return [s for s in spans if s.name == "openai.chat.completion"]


# ---------------------------------------------------------------------------------------------------------------------
# Formats against the spans
# ---------------------------------------------------------------------------------------------------------------------


def test_messages_of_the_quickstart_match_the_spans(quickstart_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    summary = export("messages", str(out), database=str(quickstart_db))
    rows = _read_jsonl(out)
    truth = asyncio.run(_spans_by_rollout(quickstart_db))
    assert summary.rows == len(rows) == len(truth) == summary.rollouts_exported and not summary.skipped
    starts = [truth[r["rollout_id"]][0].start_time for r in rows]
    assert starts == sorted(starts)  # deterministic: rollout start-time order
    for row in rows:
        rollout, spans = truth[row["rollout_id"]]
        [llm] = _llm_spans(spans)
        assert row["messages"] == [
            {"role": "user", "content": llm.attributes["gen_ai.prompt.0.content"]},
            {"role": "assistant", "content": llm.attributes["gen_ai.completion.0.content"]},
        ]
        assert row["reward"] == find_final_reward(spans) is not None
        assert (row["resources_id"], row["mode"], row["input"]) == (rollout.resources_id, rollout.mode, rollout.input)
        assert row["attempt_id"] == rollout.attempt.attempt_id and row["conversation"] == 0 and row["tools"] is None
    # Selection by reward and mode: exactly the matching rollouts.
    best = tmp_path / "best.jsonl"
    summary = export("messages", str(best), database=str(quickstart_db), min_reward=1.0, mode_in=["val"])
    expected = [r for r in rows if r["reward"] >= 1.0 and r["mode"] == "val"]
    assert _read_jsonl(best) == expected and summary.rows == len(expected)
    assert summary.skipped == {
        "final reward outside the selected range": sum(r["mode"] == "val" for r in rows) - len(expected)
    }


def test_messages_and_triplets_of_a_tool_calling_agent(agent_db: Path, tmp_path: Path) -> None:
    truth = asyncio.run(_spans_by_rollout(agent_db))
    assert len(truth) == len(QUESTIONS) * RUNS_PER_QUESTION
    export("messages", str(tmp_path / "m.jsonl"), database=str(agent_db), status_in=["succeeded"])
    for row in _read_jsonl(tmp_path / "m.jsonl"):
        rollout, spans = truth[row["rollout_id"]]
        question = rollout.input["question"]
        first, second = _llm_spans(spans)
        call_id = first.attributes["gen_ai.completion.0.tool_calls.0.id"]
        arguments = first.attributes["gen_ai.completion.0.tool_calls.0.arguments"]
        # The two calls chain into one conversation: system, user, tool call, tool result, answer.
        assert row["messages"] == [
            {"role": "system", "content": "You add numbers with the add tool."},
            {"role": "user", "content": question},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": "add", "arguments": arguments}}
                ],
            },
            {"role": "tool", "content": str(sum(json.loads(arguments).values())), "tool_call_id": call_id},
            {"role": "assistant", "content": second.attributes["gen_ai.completion.0.content"]},
        ]
        assert row["tools"] == [ADD_TOOL]
        assert row["reward"] == find_final_reward(spans)

    export("triplets", str(tmp_path / "t.jsonl"), database=str(agent_db))
    triplets = _read_jsonl(tmp_path / "t.jsonl")
    assert len(triplets) == 2 * len(truth)
    for row in triplets:
        _, spans = truth[row["rollout_id"]]
        span = _llm_spans(spans)[row["step"]]
        assert "response" not in row and "response_token_ids" not in row  # TRL's prompt-completion names
        assert row["prompt_token_ids"] == span.attributes["prompt_token_ids"]
        assert row["completion_token_ids"] == span.attributes.get("response_token_ids")  # none for the tool call
        assert row["response_id"] == span.attributes["gen_ai.response.id"] and row["model"] == "mock-adder"
        assert row["final_reward"] == find_final_reward(spans)
        # The reward span follows the answer: it is matched to the second call only.
        assert row["reward"] == (find_final_reward(spans) if row["step"] == 1 else None)
        [answer] = row["completion"]
        if row["step"] == 0:  # the tool call, as the assistant message that made it
            assert answer["role"] == "assistant" and answer["content"] is None
            assert answer["tool_calls"][0]["function"] == {
                "name": "add",
                "arguments": span.attributes["gen_ai.completion.0.tool_calls.0.arguments"],
            }
        else:
            assert answer == {"role": "assistant", "content": span.attributes["gen_ai.completion.0.content"]}
            assert row["prompt"][2]["tool_calls"][0]["function"]["name"] == "add"

    # The earlier field names on request: the answer as text in "response".
    export("triplets", str(tmp_path / "r.jsonl"), database=str(agent_db), triplet_fields="response")
    legacy = _read_jsonl(tmp_path / "r.jsonl")
    assert [r["rollout_id"] for r in legacy] == [r["rollout_id"] for r in triplets]
    for old, new in zip(legacy, triplets, strict=True):
        assert "completion" not in old and "completion_token_ids" not in old
        assert old["response"] == (new["completion"][0]["content"] or "")
        assert old["response_token_ids"] == new["completion_token_ids"] and old["prompt"] == new["prompt"]


def test_preferences_pair_answers_to_one_prompt_by_reward(agent_db: Path, quickstart_db: Path, tmp_path: Path) -> None:
    export("messages", str(tmp_path / "m.jsonl"), database=str(agent_db))
    conversations = {r["rollout_id"]: r for r in _read_jsonl(tmp_path / "m.jsonl")}
    summary = export("preferences", str(tmp_path / "p.jsonl"), database=str(agent_db))
    pairs = _read_jsonl(tmp_path / "p.jsonl")
    # The mock answers right, then wrong: every question has one rollout of each reward.
    assert len(pairs) == len(QUESTIONS) == summary.rows
    for pair in pairs:
        chosen, rejected = conversations[pair["chosen_rollout_id"]], conversations[pair["rejected_rollout_id"]]
        assert chosen["input"] == rejected["input"] == pair["input"]
        assert (pair["chosen_reward"], pair["rejected_reward"]) == (chosen["reward"], rejected["reward"]) == (1.0, 0.0)
        assert pair["prompt"] + pair["chosen"] == chosen["messages"]
        assert pair["prompt"] + pair["rejected"] == rejected["messages"]
        assert len(pair["prompt"]) == 4 and pair["chosen"][0]["role"] == "assistant"  # the shared prompt and tool turn
        assert pair["rejected"][0]["role"] == "assistant" and pair["tools"] == [ADD_TOOL]

    # The quickstart's mock LLM answers one prompt the same way every time: an input evaluated under several prompt
    # versions got different rewards for different prompts, which is no preference pair. No pairs, and the summary
    # says why.
    summary = export("preferences", str(tmp_path / "qp.jsonl"), database=str(quickstart_db))
    assert _read_jsonl(tmp_path / "qp.jsonl") == [] and summary.rows == 0
    assert "0 pairs from 0 of" in summary.describe()
    assert "(no input has two answers to one prompt with different rewards)" in summary.describe()
    assert sum(summary.skipped.values()) == summary.rollouts_selected > 0


def test_parquet_reads_back_like_jsonl(agent_db: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    for kind in ("messages", "triplets", "preferences", "rewards"):
        export(kind, str(tmp_path / f"{kind}.jsonl"), database=str(agent_db))
        export(kind, str(tmp_path / f"{kind}.parquet"), database=str(agent_db))
        rows = _read_jsonl(tmp_path / f"{kind}.jsonl")
        table = pq.read_table(tmp_path / f"{kind}.parquet").to_pylist()
        assert len(table) == len(rows) > 0, kind
        for row, back in zip(rows, table, strict=True):
            for key, value in row.items():
                if key == "input":
                    assert json.loads(back[key]) == value
                elif key in ("messages", "prompt", "completion", "chosen", "rejected"):
                    assert [m["content"] for m in back[key]] == [m["content"] for m in value], (kind, key)
                    assert [m["role"] for m in back[key]] == [m["role"] for m in value]
                elif key == "tools":
                    assert (back[key] is None) == (value is None)
                    if value:
                        assert json.loads(back[key][0]["function"]["parameters"]) == value[0]["function"]["parameters"]
                else:
                    assert back[key] == value, (kind, key)


def test_selection_is_validated_with_the_field_named() -> None:
    for fields, field in (
        ({"min_reward": 1, "max_reward": 0}, "min_reward"),
        ({"since": 2, "until": 1}, "since"),
        ({"status_in": ["done"]}, "status_in"),
        ({"min_reward": float("nan")}, "min_reward"),
        ({"rollout_id_in": ["a\x00b"]}, "rollout_id_in"),
        ({"colour": "red"}, "colour"),
    ):
        with pytest.raises(ValueError, match=field):
            ExportSelection(**fields)


# ---------------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------------


def _cli(*args: str, cwd: Optional[Path] = None, code: str = "") -> subprocess.CompletedProcess[str]:
    return run_cli("export", *args, cwd=cwd, code=code)


def test_cli_writes_the_file_and_a_summary(agent_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "pairs.jsonl"
    result = _cli("preferences", "--db", str(agent_db), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"Exported to {out}: 3 pairs from 6 of 6 selected rollouts." in result.stderr
    assert len(_read_jsonl(out)) == 3 and not (tmp_path / "pairs.jsonl.part").exists()
    # stdout, quiet: the rows only.
    result = _cli("rewards", "--db", str(agent_db), "-q", "--min-reward", "1")
    assert result.returncode == 0 and result.stderr == ""
    assert [json.loads(line)["reward"] for line in result.stdout.splitlines()] == [1.0] * len(QUESTIONS)


def test_cli_errors_are_one_line(agent_db: Path, tmp_path: Path) -> None:
    result = _cli("messages", "--db", str(tmp_path / "missing.db"))
    assert (
        result.returncode == 1
        and result.stderr.strip() == f"rollouthub export: error: no database at {tmp_path / 'missing.db'}"
    )
    result = _cli("messages", cwd=tmp_path)
    assert result.returncode == 1 and "no database at ./rollouthub.db; pass --db PATH or --store URL" in result.stderr
    result = _cli("messages", "--db", str(agent_db), "--min-reward", "2", "--max-reward", "1")
    assert result.returncode == 2
    assert result.stderr == "rollouthub export: error: --min-reward must not be greater than --max-reward\n"
    result = _cli("messages", "--db", str(agent_db), "--since", "yesterday")
    assert result.returncode == 2 and "neither epoch seconds nor an ISO date" in result.stderr
    result = _cli("messages", "--store", "http://127.0.0.1:9", "-q")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "cannot read the store server http://127.0.0.1:9: " in result.stderr
    # Without the [parquet] extra: one line naming it, quoted for shells; no file.
    out = tmp_path / "t.parquet"
    result = _cli(
        "triplets",
        "--db",
        str(agent_db),
        "-o",
        str(out),
        code="sys_modules = __import__('sys').modules; sys_modules['pyarrow'] = None",
    )
    assert result.returncode == 1 and not out.exists()
    assert result.stderr.strip() == (
        "rollouthub export: error: Parquet export needs the optional package 'pyarrow': pip install 'rollouthub[parquet]'"
    )


# ---------------------------------------------------------------------------------------------------------------------
# The server's streaming route
# ---------------------------------------------------------------------------------------------------------------------


async def test_route_streams_the_same_rows_and_rejects_bad_parameters(agent_db: Path, tmp_path: Path) -> None:
    server = await serve_store(agent_db, token="tok")
    auth = {"Authorization": "Bearer tok"}
    try:
        async with aiohttp.ClientSession() as session:
            for kind in ("messages", "triplets", "preferences", "rewards"):
                path = tmp_path / f"{kind}.jsonl"
                await asyncio.to_thread(export, kind, str(path), database=str(agent_db))
                url = f"{server.endpoint}/v1/agl/export?format={kind}&status_in=succeeded&status_in=failed"
                async with session.get(url, headers=auth) as response:
                    assert response.status == 200
                    assert response.headers["content-type"] == "application/x-ndjson"
                    assert response.headers["content-disposition"] == f'attachment; filename="rollouthub-{kind}.jsonl"'
                    assert [json.loads(line) for line in (await response.text()).splitlines()] == _read_jsonl(path)
            async with session.get(f"{server.endpoint}/v1/agl/export?format=rewards") as response:
                assert response.status == 401
            for query, field in (
                ("format=csv", "format"),
                ("format=messages&min_reward=high", "min_reward"),
                ("format=messages&mode_in=prod", "mode_in"),
                ("format=messages&since=5&until=1", "since"),
                ("format=messages&min_reward=nan", "min_reward"),
                ("format=messages&pairs=some", "pairs"),
                ("format=messages&dedupe=maybe", "dedupe"),
                ("format=rewards&dedupe=true", "dedupe"),
                ("format=triplets&triplet_fields=answer", "triplet_fields"),
                ("format=messages&dedupe=true&dedupe=false", "dedupe"),
                ("format=messages&limit=5", "limit"),
                ("format=messages&format=triplets", "format"),
            ):
                async with session.get(f"{server.endpoint}/v1/agl/export?{query}", headers=auth) as response:
                    assert response.status == 400, query
                    assert (await response.json())["detail"].startswith(f"Invalid query parameter {field}"), query
            # The conversation view comes from the same adapter as the messages rows.
            rows = _read_jsonl(tmp_path / "messages.jsonl")
            for row in rows:
                url = f"{server.endpoint}/v1/agl/rollouts/{row['rollout_id']}/conversation"
                async with session.get(url, headers=auth) as response:
                    view = await response.json()
                assert view["conversations"][0]["messages"] == row["messages"] and view["reward"] == row["reward"]
                assert [c["prompt_tokens"] for c in view["calls"]] == [
                    len(c["prompt"]) and c["prompt_tokens"] for c in view["calls"]
                ]
                assert all(isinstance(c["completion_tokens"], int) for c in view["calls"])
                assert view["calls"][0]["response"][0]["tool_calls"][0]["function"]["name"] == "add"
            async with session.get(f"{server.endpoint}/v1/agl/rollouts/ro-nope/conversation", headers=auth) as response:
                assert response.status == 404
    finally:
        await server.stop()


def _rollouthub_imports(module: str) -> List[str]:
    """rollouthub modules ``module`` imports, at module level or lazily in functions (``TYPE_CHECKING`` imports
    excluded), with the packages on their way."""
    root = Path(__file__).resolve().parents[2]

    def source(name: str) -> Optional[Path]:
        path = root.joinpath(*name.split("."))
        if (path / "__init__.py").is_file():
            return path / "__init__.py"
        return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None

    file = source(module)
    assert file is not None, module
    package = module if file.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: List[str] = []

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.extend(alias.name for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.append(base)
            found.extend(f"{base}.{alias.name}" for alias in node.names if source(f"{base}.{alias.name}"))

    Visitor().visit(ast.parse(file.read_text()))
    result = set()
    for name in found:
        parts = name.split(".")
        if parts[0] != "rollouthub":
            continue
        result.update(".".join(parts[:i]) for i in range(2, len(parts) + 1) if source(".".join(parts[:i])))
    return sorted(result)


def test_export_route_keeps_the_store_layer_below_runner_trainer_algorithm_and_proxy() -> None:
    """Layering: everything the server's export routes can import (transitively, lazy imports included) stays below
    the runner, trainer, algorithm and LLM proxy layers."""
    seen: set[str] = set()
    todo = ["rollouthub.store.server.export"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(_rollouthub_imports(module))
    assert {"rollouthub.export.stream", "rollouthub.adapter.messages", "rollouthub.adapter.triplet"} <= seen
    upper = ("rollouthub.runner", "rollouthub.trainer", "rollouthub.algorithm", "rollouthub.llm_proxy")
    assert sorted(m for m in seen if m.startswith(upper)) == []


def test_iter_export_rows_over_an_in_memory_store() -> None:
    """The export reads any LightningStore; a rollout without spans or attempt is skipped with its reason."""
    from rollouthub.store.memory import InMemoryLightningStore

    async def scenario() -> Tuple[List[Dict[str, Any]], Any]:
        store = InMemoryLightningStore()
        await store.enqueue_rollout(input={"q": 1})
        claimed = await store.dequeue_rollout()
        assert claimed is not None
        await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")
        from rollouthub.export import ExportSummary

        summary = ExportSummary("messages")
        rows = [r async for r in iter_export_rows(store, "messages", summary=summary)]
        return rows, summary

    rows, summary = asyncio.run(scenario())
    assert rows == [] and summary.skipped == {"no LLM call": 1} and summary.rollouts_selected == 1
    assert summary.describe() == "0 rows from 0 of 1 selected rollouts; skipped 1: 1 no LLM call"
