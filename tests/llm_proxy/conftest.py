"""Fixtures of the LLM-proxy tests: the mock OpenAI-compatible upstream, stores and a running proxy."""

from __future__ import annotations

import threading
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, Optional

import pytest

from rollouthub.llm_proxy import LLMProxy
from rollouthub.llm_proxy import proxy as proxy_module
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.testing import MockOpenAIServer, last_user_message


class Upstream:
    """Reply logic of the mock upstream, adjustable per test (failures, blocking, tool calls)."""

    def __init__(self) -> None:
        self.failures: List[int] = []  # statuses to answer with, one per request, before succeeding
        self.gate: Optional[threading.Event] = None  # when set, requests wait for it
        self.arrived = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, request: Dict[str, Any]) -> Any:
        self.arrived.set()
        if self.gate is not None:
            self.gate.wait(30)
        with self.lock:
            if self.failures:
                return {"status_code": self.failures.pop(0), "content": "upstream is unhappy"}
        user = last_user_message(request)
        if user == "use a tool":
            return {
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
                ],
            }
        return f"echo: {user}"


@pytest.fixture()
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture()
def mock_llm(upstream: Upstream) -> Iterator[MockOpenAIServer]:
    with MockOpenAIServer(reply=upstream) as server:
        yield server


def model_list(mock: MockOpenAIServer, name: str = "policy", provider: str = "hosted_vllm") -> List[Any]:
    """A one-entry model list pointing at the mock."""
    return [{"model_name": name, "litellm_params": {"model": f"{provider}/upstream-model", "api_base": mock.base_url}}]


@pytest.fixture(autouse=True)
def _reset_active_proxy() -> Iterator[None]:
    yield
    proxy_module._active_proxy = None


@pytest.fixture()
def store() -> InMemoryLightningStore:
    return InMemoryLightningStore(thread_safe=True)


@pytest.fixture()
async def make_proxy() -> AsyncIterator[Callable[..., Any]]:
    """Start proxies (``thread`` mode on loopback by default) and stop them after the test."""
    started: List[LLMProxy] = []

    async def factory(**kwargs: Any) -> LLMProxy:
        kwargs.setdefault("host", "127.0.0.1")
        kwargs.setdefault("launch_mode", "thread")
        proxy = LLMProxy(**kwargs)
        started.append(proxy)
        await proxy.start()
        return proxy

    yield factory
    for proxy in started:
        if proxy.is_running():
            await proxy.stop()
