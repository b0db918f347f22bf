"""The quickstart's inputs (issue 29, item 6): every bad one is one line on stderr with the right exit code and no
traceback, before any work; the URL forms of ``--db`` are accepted; the log is never written beside ``--db``."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Dict, List

import pytest

from rollouthub.testing import MockOpenAIServer
from tests.quickstart.helpers import run_quickstart

pytestmark = pytest.mark.timeout(120)


def _assert_one_line(result: object, code: int, message: str) -> None:
    stderr: str = result.stderr  # type: ignore[attr-defined]
    assert result.returncode == code, stderr  # type: ignore[attr-defined]
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    assert stderr.startswith(("rollouthub quickstart: error:", "python -m rollouthub.quickstart: error:")), stderr
    assert message in stderr, stderr


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--db", "missing-dir/x.db"], 2, "the directory {tmp}/missing-dir does not exist"),
        (["--db", "sqlite:///missing-dir/x.db"], 2, "cannot use the SQLite file {tmp}/missing-dir/x.db"),
        (["--db", "memory"], 2, "'memory' is not a database here"),
        (["--runners", "0"], 2, "argument --runners: 0 is too small"),
        (["--rounds", "x"], 2, "argument --rounds: invalid number 'x'"),
        (["--port", "99999"], 2, "argument --port: invalid port 99999"),
        (["--fresh", "--db", "postgresql://nobody@127.0.0.1:1/x"], 2, "--fresh deletes a SQLite file"),
        (["--log", "missing-dir/q.log"], 2, "--log: the directory {tmp}/missing-dir does not exist"),
        (["--db", "postgresql://nobody@127.0.0.1:1/x"], 1, "the store server could not start: Cannot open the store"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: List[str], code: int, message: str) -> None:
    result = run_quickstart(tmp_path, *args)
    _assert_one_line(result, code, message.format(tmp=tmp_path))
    assert not (tmp_path / "missing-dir").exists() and not (tmp_path / "rollouthub-quickstart.db").exists()


def test_an_endpoint_that_lists_models_but_cannot_chat_fails_the_check_with_one_line(tmp_path: Path) -> None:
    def no_such_model(request: Dict[str, Any]) -> Dict[str, Any]:
        return {"status_code": 404, "content": f"The model `{request.get('model')}` does not exist."}

    with MockOpenAIServer(reply=no_such_model) as llm:  # type: ignore[arg-type]
        result = run_quickstart(tmp_path, "--llm-endpoint", llm.base_url, OPENAI_API_KEY="k")
        calls = [(r["path"], r["body"].get("model")) for r in llm.requests]
        assert calls == [("/v1/chat/completions", "gpt-4.1-mini")]  # one real chat call, nothing more
    _assert_one_line(result, 1, f"the LLM endpoint {llm.base_url} failed a chat completion with model 'gpt-4.1-mini'")
    assert "HTTP 404: The model `gpt-4.1-mini` does not exist." in result.stderr
    assert not (tmp_path / "rollouthub-quickstart.db").exists()


@pytest.mark.timeout(200)
def test_an_absolute_sqlite_url_is_accepted_and_the_log_is_not_written_beside_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "run.log").write_text("the user's own file\n")
    result = run_quickstart(tmp_path, "--db", f"sqlite:///{data}/run.db", "--runners", "2", "--rounds", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(os.listdir(data)) == ["run.db", "run.log"]  # no -wal/-shm left, no log of ours
    assert (data / "run.log").read_text() == "the user's own file\n"
    log = tmp_path / "rollouthub-quickstart.log"
    assert log.exists() and "Store backend: SQLite file" in log.read_text()
    out = " ".join(result.stdout.split())
    assert f"Data: {data}/run.db (SQLite; log: {log})" in out
    with sqlite3.connect(data / "run.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM rollouts").fetchone()[0] > 8
