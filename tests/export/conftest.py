"""Real stores for the export tests: one filled by the quickstart (subprocess), one by a tool-calling agent run by a
real runner against the mock OpenAI server with token ids."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import openai
import pytest

from rollouthub.emitter import emit_reward
from rollouthub.instrumentation import instrument_openai, uninstrument_openai
from rollouthub.litagent import rollout
from rollouthub.runner import LitAgentRunner
from rollouthub.store.sql import SqlLightningStore
from rollouthub.testing import MockOpenAIServer
from rollouthub.tracer import OtelTracer, clear_active_tracer, get_active_tracer
from rollouthub.types import LLM

QUESTIONS = ["What is 2+3?", "What is 4+4?", "What is 1+6?"]
RUNS_PER_QUESTION = 2
ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}


@pytest.fixture(scope="session")
def quickstart_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store filled by ``python -m rollouthub.quickstart --rounds 1`` (62 rollouts, rewards 0 / 0.5 / 1)."""
    directory = tmp_path_factory.mktemp("quickstart")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGL_"))}
    result = subprocess.run(
        [sys.executable, "-m", "rollouthub.quickstart", "--runners", "2", "--rounds", "1", "--fresh"],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return directory / "rollouthub-quickstart.db"


def _numbers(question: str) -> List[int]:
    return [int(n) for n in question.removeprefix("What is ").rstrip("?").split("+")]


def _mock_reply_factory() -> Any:
    """Ask for the add tool on the user turn; answer after the tool result -- right, then wrong, alternately."""
    finals = itertools.count()

    def reply(request: Dict[str, Any]) -> Any:
        messages = request["messages"]
        last = messages[-1]
        if last["role"] == "user":
            a, b = _numbers(last["content"])
            call = {
                "id": f"call-{a}-{b}",
                "type": "function",
                "function": {"name": "add", "arguments": json.dumps({"a": a, "b": b})},
            }
            return {"content": None, "tool_calls": [call]}
        total = int(last["content"])
        return str(total if next(finals) % 2 == 0 else total + 1)

    return reply


@rollout
async def tool_agent(task: Dict[str, Any], llm: LLM) -> None:
    """Two LLM calls: one that calls the ``add`` tool, one that answers; reward 1 for the right sum."""
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="dummy", max_retries=0) as client:
        await _converse(client, llm.model, task["question"])


async def _converse(client: Any, model: str, question: str) -> None:
    messages: List[Any] = [
        {"role": "system", "content": "You add numbers with the add tool."},
        {"role": "user", "content": question},
    ]
    extra = {"return_token_ids": True}
    first = await client.chat.completions.create(model=model, messages=messages, tools=[ADD_TOOL], extra_body=extra)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": "add", "arguments": call.function.arguments}}
            ],  # type: ignore[union-attr]
        }
    )
    messages.append({"role": "tool", "tool_call_id": call.id, "content": str(arguments["a"] + arguments["b"])})
    second = await client.chat.completions.create(model=model, messages=messages, tools=[ADD_TOOL], extra_body=extra)
    answer = second.choices[0].message.content or ""
    emit_reward(1.0 if answer == str(sum(_numbers(question))) else 0.0)


async def _fill(database_url: str, llm: MockOpenAIServer) -> None:
    store = SqlLightningStore(database_url)
    resources = await store.add_resources({"main_llm": LLM(endpoint=llm.base_url, model="mock-adder")})
    for question in QUESTIONS:
        for _ in range(RUNS_PER_QUESTION):
            await store.enqueue_rollout(input={"question": question}, mode="train", resources_id=resources.resources_id)
    instrument_openai()
    try:
        runner = LitAgentRunner(OtelTracer(), heartbeat_interval=0, max_rollouts=len(QUESTIONS) * RUNS_PER_QUESTION)
        with runner.run_context(agent=tool_agent, store=store, worker_id=0):
            await runner.iter()
    finally:
        uninstrument_openai()
        await store.close()


@pytest.fixture(scope="session")
def agent_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A SQLite store with 6 rollouts of a tool-calling agent (2 LLM calls each, token ids recorded)."""
    path = tmp_path_factory.mktemp("agent") / "agent.db"
    while get_active_tracer() is not None:
        clear_active_tracer()
    with MockOpenAIServer(reply=_mock_reply_factory()) as llm:
        asyncio.run(_fill(f"sqlite:///{path}", llm))
    while get_active_tracer() is not None:
        clear_active_tracer()
    yield path
