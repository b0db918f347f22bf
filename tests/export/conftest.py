"""Real stores for the export tests: one filled by the quickstart (subprocess), one by a tool-calling agent run by a
real runner against the mock OpenAI server with token ids, one by an agent whose prompt comes from prompt-template
resources (several versions, two of them rendering the same prompt) and whose model answers one prompt differently
on every other call -- the store that holds real preference pairs."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import openai
import pytest

from rollouthub.emitter import emit_reward
from rollouthub.instrumentation import instrument_openai, uninstrument_openai
from rollouthub.litagent import rollout
from rollouthub.runner import LitAgentRunner
from rollouthub.store.client_server import LightningStoreServer
from rollouthub.store.sql import SqlLightningStore
from rollouthub.testing import MockOpenAIServer
from rollouthub.tracer import OtelTracer, clear_active_tracer, get_active_tracer
from rollouthub.types import LLM, PromptTemplate
from rollouthub.utils.server_launcher import pick_free_port

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


def run_cli(command: str, *args: str, cwd: Optional[Path] = None, code: str = "") -> subprocess.CompletedProcess[str]:
    """``rollouthub <command> <args>`` in a subprocess (after running ``code``, e.g. to hide a module)."""
    prefix = code + "; " if code else ""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            prefix + "import sys; from rollouthub.cli import main; sys.exit(main())",
            command,
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def serve_store(db: Path, token: Optional[str] = None) -> LightningStoreServer:
    """A store server on the SQLite file ``db``, on a free port, in this event loop (stop it with ``stop()``)."""
    server = LightningStoreServer(
        SqlLightningStore(f"sqlite:///{db}"), "127.0.0.1", pick_free_port(), launch_mode="asyncio", api_token=token
    )
    await server.start()
    return server


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


async def _run_all(store: SqlLightningStore, agent: Any, count: int) -> None:
    """Run ``count`` queued rollouts with one real runner (in queue order), tracing the OpenAI client."""
    instrument_openai()
    try:
        runner = LitAgentRunner(OtelTracer(), heartbeat_interval=0, max_rollouts=count)
        with runner.run_context(agent=agent, store=store, worker_id=0):
            await runner.iter()
    finally:
        uninstrument_openai()


async def _fill(database_url: str, llm: MockOpenAIServer, agent: Any, inputs: List[Dict[str, Any]]) -> None:
    """Run ``agent`` on each of ``inputs`` :data:`RUNS_PER_QUESTION` times (in that order) against ``llm`` (the model
    ``llm.model``)."""
    store = SqlLightningStore(database_url)
    try:
        resources = await store.add_resources({"main_llm": LLM(endpoint=llm.base_url, model=llm.model)})
        for task in inputs:
            for _ in range(RUNS_PER_QUESTION):
                await store.enqueue_rollout(input=task, mode="train", resources_id=resources.resources_id)
        await _run_all(store, agent, len(inputs) * RUNS_PER_QUESTION)
    finally:
        await store.close()


def _filled_db(path: Path, llm: MockOpenAIServer, agent: Any, inputs: List[Dict[str, Any]]) -> Path:
    """:func:`_fill` the SQLite file ``path`` with tracers cleared around it."""
    _clear_tracers()
    with llm:
        asyncio.run(_fill(f"sqlite:///{path}", llm, agent, inputs))
    _clear_tracers()
    return path


def _clear_tracers() -> None:
    while get_active_tracer() is not None:
        clear_active_tracer()


@pytest.fixture(scope="session")
def agent_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A SQLite store with 6 rollouts of a tool-calling agent (2 LLM calls each, token ids recorded)."""
    questions = [{"question": question} for question in QUESTIONS]
    llm = MockOpenAIServer(reply=_mock_reply_factory(), model="mock-adder")
    yield _filled_db(tmp_path_factory.mktemp("agent") / "agent.db", llm, tool_agent, questions)


FRUIT_TEMPLATE = "Is {item} a fruit? Answer yes or no."
OTHER_TEMPLATE = "Answer yes or no: is {item} a fruit?"
PROMPT_PLAN: List[Tuple[str, Dict[str, Any]]] = [
    ("v1", {"item": "apple"}),
    ("v1-again", {"item": "apple"}),  # another resources version that renders the same prompt
    ("v2", {"item": "apple"}),
    ("v2", {"item": "apple"}),
    ("v1", {"item": "apple", "note": "another input, the same prompt"}),
]
"""(resources version, input) of each rollout, in queue order."""


@dataclass
class PromptsDb:
    """The store of :func:`prompts_db`: its file and the rollout ids in :data:`PROMPT_PLAN` order."""

    path: Path
    rollout_ids: List[str]


def _alternating_reply() -> Any:
    """Answer ``yes`` to the first call with a prompt, ``no`` to the second, ``yes`` to the third, ..."""
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def reply(request: Dict[str, Any]) -> str:
        with lock:
            prompt = request["messages"][-1]["content"]
            seen[prompt] += 1
            return "yes" if seen[prompt] % 2 == 1 else "no"

    return reply


@rollout
async def fruit_agent(task: Dict[str, Any], llm: LLM, prompt_template: PromptTemplate) -> None:
    """One LLM call with the prompt rendered from the template; reward 1 for "yes"."""
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="dummy", max_retries=0) as client:
        completion = await client.chat.completions.create(
            model=llm.model,
            messages=[
                {"role": "system", "content": "You answer yes or no."},
                {"role": "user", "content": prompt_template.format(item=task["item"])},
            ],
        )
    emit_reward(1.0 if completion.choices[0].message.content == "yes" else 0.0)


async def _fill_prompts(database_url: str, llm: MockOpenAIServer) -> List[str]:
    store = SqlLightningStore(database_url)
    try:
        model = LLM(endpoint=llm.base_url, model="mock-fruit")
        versions: Dict[str, str] = {}
        for name, template in (("v1", FRUIT_TEMPLATE), ("v1-again", FRUIT_TEMPLATE), ("v2", OTHER_TEMPLATE)):
            prompt = PromptTemplate(template=template, engine="f-string")
            versions[name] = (await store.add_resources({"main_llm": model, "prompt": prompt})).resources_id
        ids = []
        for version, task in PROMPT_PLAN:
            queued = await store.enqueue_rollout(input=task, mode="train", resources_id=versions[version])
            ids.append(queued.rollout_id)
        await _run_all(store, fruit_agent, len(PROMPT_PLAN))
        return ids
    finally:
        await store.close()


@pytest.fixture(scope="session")
def prompts_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromptsDb]:
    """A SQLite store with the rollouts of :data:`PROMPT_PLAN`: answers to one prompt alternate between right (reward
    1) and wrong (reward 0), so the answers to each prompt of one input are real preference pairs."""
    path = tmp_path_factory.mktemp("prompts") / "prompts.db"
    _clear_tracers()
    with MockOpenAIServer(reply=_alternating_reply()) as llm:
        ids = asyncio.run(_fill_prompts(f"sqlite:///{path}", llm))
    _clear_tracers()
    yield PromptsDb(path, ids)


CAPITALS = {"France": "Paris", "Italy": "Rome"}
SURE = "Are you sure?"


def _capitals_reply() -> Any:
    """Name the capital; to "Are you sure?" answer "Yes." the first time a question is asked again, "No." the next."""
    doubts: Counter[str] = Counter()
    lock = threading.Lock()

    def reply(request: Dict[str, Any]) -> str:
        messages = request["messages"]
        if messages[-1]["content"] != SURE:
            return CAPITALS[messages[-1]["content"].removeprefix("Capital of ").rstrip("?")] + "."
        with lock:
            doubts[messages[1]["content"]] += 1
            return "Yes." if doubts[messages[1]["content"]] % 2 == 1 else "No."

    return reply


@rollout
async def chat_agent(task: Dict[str, Any], llm: LLM) -> None:
    """A two-turn chat without tools (the question, then "Are you sure?"), asking for token ids and log-probabilities;
    reward 1 when the model stands by its answer."""
    messages: List[Any] = [
        {"role": "system", "content": "You name capitals."},
        {"role": "user", "content": f"Capital of {task['country']}?"},
    ]
    extra = {"return_token_ids": True}
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="dummy", max_retries=0) as client:
        for turn in range(2):
            if turn:
                messages.append({"role": "user", "content": SURE})
            completion = await client.chat.completions.create(
                model=llm.model, messages=messages, logprobs=True, extra_body=extra
            )
            messages.append({"role": "assistant", "content": completion.choices[0].message.content})
    emit_reward(1.0 if messages[-1]["content"] == "Yes." else 0.0)


@pytest.fixture(scope="session")
def chat_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A SQLite store with 4 rollouts of :func:`chat_agent` served by a mock whose token ids are the UTF-8 bytes of the
    conversation rendered with the tiny test model's chat template (``tokenization="chat_template"``), with
    log-probabilities: each rollout is one multi-turn trajectory (the second turn's prompt continues the first)."""
    countries = [{"country": country} for country in CAPITALS]
    llm = MockOpenAIServer(reply=_capitals_reply(), model="mock-capitals", tokenization="chat_template")
    yield _filled_db(tmp_path_factory.mktemp("chat") / "chat.db", llm, chat_agent, countries)
