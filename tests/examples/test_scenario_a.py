"""Scenario A: ``examples/write_traces.py`` in-process and against a ``rollouthub store`` server."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from typing import Any, Iterator

import pytest

from rollouthub.testing import store_process
from rollouthub.tracer import clear_active_tracer, get_active_tracer
from rollouthub.utils.server_launcher import pick_free_port

from .conftest import EXAMPLES_DIR, load_example

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def example() -> Any:
    while get_active_tracer() is not None:
        clear_active_tracer()
    return load_example("write_traces")


@pytest.fixture(scope="module")
def store_server() -> Iterator[int]:
    """A live ``rollouthub store --backend memory`` subprocess on a free loopback port."""
    port = pick_free_port()
    with store_process(port):
        yield port


async def test_otel_mode_in_process(example: Any) -> None:
    spans = await example.run("otel")
    assert [s.name for s in spans] == ["grpc-span-2", "grpc-span-1", "grpc-span-3", "agentlightning.annotation"]
    assert spans[-1].attributes["agentlightning.reward.0.value"] == 1.0
    assert get_active_tracer() is None


async def test_operation_mode_in_process(example: Any) -> None:
    spans = await example.run("operation")
    op_span = next(s for s in spans if s.name == "agentlightning.operation")
    assert op_span.attributes["agentlightning.operation.input.task.question"] == "What is 6 x 7?"
    assert op_span.attributes["agentlightning.operation.output.answer"] == 42


async def test_agentops_mode_in_process_with_mock_llm(example: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    spans = await example.run("agentops")
    [llm] = [s for s in spans if s.name == "openai.chat.completion"]
    assert llm.attributes["gen_ai.completion.0.content"] == "Hello"


async def test_otel_mode_against_store_server_uses_otlp(example: Any, store_server: int) -> None:
    spans = await example.run("otel", use_client=True, port=store_server)
    assert len(spans) == 4
    for span in spans:
        assert span.resource.attributes["agentlightning.rollout_id"] == span.rollout_id
        assert span.resource.attributes["agentlightning.attempt_id"] == span.attempt_id


async def test_operation_mode_against_store_server(example: Any, store_server: int) -> None:
    spans = await example.run("operation", use_client=True, port=store_server)
    assert {s.name for s in spans} == {"agentlightning.operation", "agentlightning.annotation"}


async def _status_on_server(port: int, rollout_id: str) -> Any:
    from rollouthub.store.client import LightningStoreClient

    client = LightningStoreClient(f"http://127.0.0.1:{port}")
    try:
        rollout = await client.get_rollout_by_id(rollout_id)
    finally:
        await client.close()
    return rollout.status if rollout is not None else None


@pytest.mark.parametrize("mode", ["otel", "operation"])
async def test_rollout_ends_succeeded_in_process(example: Any, mode: str) -> None:
    store = example.InMemoryLightningStore(thread_safe=True)
    send = {"otel": example.send_traces_via_otel, "operation": example.send_traces_via_operation}[mode]
    rollout_id = await send(store)
    rollout = await store.get_rollout_by_id(rollout_id)
    assert rollout is not None and rollout.status == "succeeded"


@pytest.mark.parametrize("mode", ["otel", "operation"])
def test_example_script_exit_code(mode: str, store_server: int) -> None:
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(EXAMPLES_DIR, "write_traces.py"),
            mode,
            "--use-client",
            "--port",
            str(store_server),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"verified in mode '{mode}'" in result.stdout
    # The rollout the script wrote is finished on the server, not left running.
    rollout_id = re.search(r"rollout (\S+) succeeded", result.stdout)
    assert rollout_id is not None, result.stdout
    assert asyncio.run(_status_on_server(store_server, rollout_id.group(1))) == "succeeded"
