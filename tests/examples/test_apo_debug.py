"""``examples/apo_debug.py``: each mode shows what its docstring promises, in-process and as a script."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
from typing import Any, List

import pytest

from rollouthub.algorithm.fast import Baseline
from rollouthub.emitter import find_final_reward
from rollouthub.instrumentation.openai import CHAT_SPAN_NAME
from rollouthub.testing import MockOpenAIServer

from .conftest import EXAMPLES_DIR, load_example

pytestmark = pytest.mark.timeout(180)

REWARD_SPAN = "agentlightning.annotation"


@pytest.fixture()
def debug() -> Any:
    return load_example("apo_debug")


def _script(mode: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "AGL_SERVER_PORT")}
    return subprocess.run(
        [sys.executable, os.path.join(EXAMPLES_DIR, "apo_debug.py"), "--mode", mode],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
    )


def test_runner_mode_traces_both_llm_calls(debug: Any, mock_llm: MockOpenAIServer) -> None:
    result, store = asyncio.run(debug.debug_with_runner())
    assert result.status == "succeeded"
    spans = sorted(asyncio.run(store.query_spans(result.rollout_id)), key=lambda s: s.sequence_id)
    # The agent makes two OpenAI calls (answer, judge): OtelTracer traces them, then the reward span.
    assert [s.name for s in spans] == [CHAT_SPAN_NAME, CHAT_SPAN_NAME, REWARD_SPAN]
    assert spans[0].attributes["gen_ai.prompt.0.content"] == "You are a helpful assistant. Why is the sky blue?"
    assert find_final_reward(spans) == 0.7


def test_hook_mode_prints_every_hook_call(
    debug: Any, mock_llm: MockOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = debug.DebugHook()
    result, _ = asyncio.run(debug.debug_with_runner([hook]))
    assert result.status == "succeeded"
    # on_trace_end runs before the runner writes the reward span: the hook sees the two LLM calls.
    assert [s.name for s in hook.seen] == [CHAT_SPAN_NAME, CHAT_SPAN_NAME]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[hook]")]
    calls = [line.split(":")[0] for line in lines if not line.startswith("[hook]   ")]
    assert calls == ["[hook] on_rollout_start", "[hook] on_trace_start", "[hook] on_trace_end", "[hook] on_rollout_end"]
    assert lines.count(f"[hook]   span {CHAT_SPAN_NAME}") == 2


def test_trainer_mode_reports_how_long_each_rollout_ran(
    debug: Any, mock_llm: MockOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="rollouthub.algorithm.fast"):
        trainer = debug.debug_with_trainer()
    rollouts = list(asyncio.run(trainer.store.query_rollouts()))
    assert {(r.mode, r.status) for r in rollouts} == {("train", "succeeded")} and len(rollouts) == 2
    assert "Attribute keys" in caplog.text and "Adapted data" in caplog.text
    for rollout in rollouts:
        [attempt] = asyncio.run(trainer.store.query_attempts(rollout.rollout_id))
        reported = re.search(
            rf"\[Rollout {rollout.rollout_id}\] Finished with status succeeded in ([\d.]+) seconds", caplog.text
        )
        assert reported is not None, caplog.text
        # The time the attempt ran in the store, not the time the algorithm took to notice.
        assert reported.group(1) == f"{attempt.end_time - attempt.start_time:.2f}"


@pytest.mark.parametrize("mode", ["runner", "hook", "trainer"])
def test_script_modes(mode: str) -> None:
    proc = _script(mode)
    assert proc.returncode == 0, proc.stderr[-3000:]
    spans_line = f"spans: ['{CHAT_SPAN_NAME}', '{CHAT_SPAN_NAME}', '{REWARD_SPAN}']"
    if mode == "runner":
        assert spans_line in proc.stdout
        assert "[hook]" not in proc.stdout
    elif mode == "hook":
        assert spans_line in proc.stdout
        hook_lines: List[str] = [line for line in proc.stdout.splitlines() if line.startswith("[hook]")]
        assert len(hook_lines) == 6, proc.stdout
    else:
        durations = [float(d) for d in re.findall(r"Finished with status succeeded in ([\d.]+) seconds", proc.stderr)]
        assert len(durations) == 2, proc.stderr[-3000:]
        # Each rollout is two mock LLM calls: far below the Baseline's polling interval, which used to be reported.
        assert all(d < Baseline().polling_interval for d in durations), durations
    assert "WARNING" not in proc.stderr, proc.stderr[-3000:]
