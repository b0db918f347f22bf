"""``FunctionalLitAgent`` and the rollout decorators."""

from __future__ import annotations

import inspect
import logging
import pickle
from typing import Any, Optional

import pytest

from rollouthub.litagent import LitAgent, llm_rollout, prompt_rollout, rollout
from rollouthub.litagent.decorator import FunctionalLitAgent
from rollouthub.types.core import Rollout
from rollouthub.types.resources import LLM, PromptTemplate, ProxyLLM

from .helpers import make_attempted_rollout

LLM_A = LLM(endpoint="http://a/v1", model="model-a", api_key="k", sampling_parameters={"temperature": 0.1})
LLM_B = LLM(endpoint="http://b/v1", model="model-b")
PROXY = ProxyLLM(endpoint="http://proxy:1/v1", model="proxied", api_key="pk", sampling_parameters={"top_p": 0.5})
PROMPT_A = PromptTemplate(template="Hello {name}", engine="f-string")
PROMPT_B = PromptTemplate(template="Bye {name}", engine="f-string")


# ---------------------------------------------------------------------------------------------------------------
# Signature validation
# ---------------------------------------------------------------------------------------------------------------


def test_llm_rollout_validation_errors() -> None:
    def one_param(task: Any) -> None: ...

    def wrong_first(query: Any, llm: LLM) -> None: ...

    def no_llm(task: Any, model: LLM) -> None: ...

    for func in (one_param, wrong_first, no_llm):
        with pytest.raises(ValueError):
            llm_rollout(func)


def test_prompt_rollout_validation_errors() -> None:
    def one_param(task: Any) -> None: ...

    def wrong_first(query: Any, prompt_template: PromptTemplate) -> None: ...

    def no_template(task: Any, llm: LLM) -> None: ...

    for func in (one_param, wrong_first, no_template):
        with pytest.raises(ValueError):
            prompt_rollout(func)


def test_rollout_rejects_unsupported_signatures() -> None:
    def bad(task: Any, something: Any) -> None: ...

    with pytest.raises(NotImplementedError, match=r"\(task, llm\[, rollout\]\)"):
        rollout(bad)


def test_rollout_accepts_both_signatures() -> None:
    def with_llm(task: Any, llm: LLM) -> None: ...

    def with_prompt(task: Any, prompt_template: PromptTemplate, rollout: Rollout) -> None: ...

    assert isinstance(rollout(with_llm), FunctionalLitAgent)
    assert isinstance(rollout(with_prompt), FunctionalLitAgent)


def test_decorator_forms() -> None:
    @llm_rollout
    def a(task: Any, llm: LLM) -> None: ...

    @llm_rollout(strip_proxy=False)
    def b(task: Any, llm: LLM) -> None: ...

    @prompt_rollout
    def c(task: Any, prompt_template: PromptTemplate) -> None: ...

    @prompt_rollout()
    def d(task: Any, prompt_template: PromptTemplate) -> None: ...

    for agent in (a, b, c, d):
        assert isinstance(agent, FunctionalLitAgent)
        assert isinstance(agent, LitAgent)


# ---------------------------------------------------------------------------------------------------------------
# Metadata and direct calls
# ---------------------------------------------------------------------------------------------------------------


def test_metadata_is_preserved_and_call_is_unchanged() -> None:
    def solve(task: str, llm: LLM, rollout: Optional[Rollout] = None) -> str:
        """Solve a task."""
        return f"{task}:{llm.model}"

    agent = llm_rollout(solve)
    assert agent.__name__ == "solve"
    assert agent.__doc__ == "Solve a task."
    assert agent.__wrapped__ is solve  # type: ignore[attr-defined]
    assert inspect.signature(agent) == inspect.signature(solve)
    assert agent("t", LLM_A) == "t:model-a"


# ---------------------------------------------------------------------------------------------------------------
# Sync / async dispatch
# ---------------------------------------------------------------------------------------------------------------


async def test_sync_agent_dispatch() -> None:
    @rollout
    def agent(task: str, llm: LLM) -> float:
        return 0.5

    assert not agent.is_async()
    assert agent.rollout("t", {"main": LLM_A}, make_attempted_rollout()) == 0.5
    with pytest.raises(RuntimeError):
        await agent.rollout_async("t", {"main": LLM_A}, make_attempted_rollout())


async def test_async_agent_dispatch() -> None:
    @rollout
    async def agent(task: str, llm: LLM) -> float:
        return 0.75

    assert agent.is_async()
    assert await agent.rollout_async("t", {"main": LLM_A}, make_attempted_rollout()) == 0.75
    assert await agent.training_rollout_async("t", {"main": LLM_A}, make_attempted_rollout()) == 0.75
    with pytest.raises(RuntimeError):
        agent.rollout("t", {"main": LLM_A}, make_attempted_rollout())


# ---------------------------------------------------------------------------------------------------------------
# Resource injection
# ---------------------------------------------------------------------------------------------------------------


def test_llm_injection_uses_first_llm_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    seen: dict[str, Any] = {}

    @llm_rollout
    def agent(task: str, llm: LLM) -> None:
        seen["llm"] = llm

    with caplog.at_level(logging.WARNING, logger="rollouthub.litagent.decorator"):
        agent.rollout("t", {"prompt": PROMPT_A, "first": LLM_B, "second": LLM_A}, make_attempted_rollout())
    assert seen["llm"] is LLM_B
    assert any("first" in record.message for record in caplog.records)


def test_missing_llm_raises() -> None:
    @llm_rollout
    def agent(task: str, llm: LLM) -> None: ...

    with pytest.raises(ValueError, match="No LLM resource found"):
        agent.rollout("t", {"prompt": PROMPT_A}, make_attempted_rollout())


def test_proxy_llm_is_stripped_by_default() -> None:
    seen: dict[str, Any] = {}

    @llm_rollout
    def agent(task: str, llm: LLM) -> None:
        seen["llm"] = llm

    agent.rollout("t", {"proxy": PROXY}, make_attempted_rollout("ro-9", "at-3"))
    llm = seen["llm"]
    assert type(llm) is LLM
    assert llm.endpoint == "http://proxy:1/rollout/ro-9/attempt/at-3/v1"
    assert (llm.model, llm.api_key, llm.sampling_parameters) == ("proxied", "pk", {"top_p": 0.5})


def test_proxy_llm_kept_when_strip_proxy_is_false() -> None:
    seen: dict[str, Any] = {}

    @llm_rollout(strip_proxy=False)
    def agent(task: str, llm: LLM) -> None:
        seen["llm"] = llm

    agent.rollout("t", {"proxy": PROXY}, make_attempted_rollout())
    assert seen["llm"] is PROXY


def test_stripping_proxy_requires_attempted_rollout() -> None:
    @llm_rollout
    def agent(task: str, llm: LLM) -> None: ...

    plain = Rollout(rollout_id="r", input=None, start_time=0.0)
    with pytest.raises(ValueError):
        agent.rollout("t", {"proxy": PROXY}, plain)


def test_prompt_template_and_rollout_injection(caplog: pytest.LogCaptureFixture) -> None:
    seen: dict[str, Any] = {}

    @prompt_rollout
    def agent(task: str, prompt_template: PromptTemplate, rollout: Rollout, extra: int = 7) -> str:
        seen.update(prompt_template=prompt_template, rollout=rollout, extra=extra)
        return prompt_template.format(name=task)

    attempted = make_attempted_rollout()
    with caplog.at_level(logging.WARNING, logger="rollouthub.litagent.decorator"):
        result = agent.rollout("Ann", {"llm": LLM_A, "p1": PROMPT_A, "p2": PROMPT_B}, attempted)
    assert result == "Hello Ann"
    assert seen == {"prompt_template": PROMPT_A, "rollout": attempted, "extra": 7}
    assert caplog.records


def test_missing_prompt_template_raises() -> None:
    @prompt_rollout
    def agent(task: str, prompt_template: PromptTemplate) -> None: ...

    with pytest.raises(ValueError):
        agent.rollout("t", {"llm": LLM_A}, make_attempted_rollout())


async def test_async_injection_with_rollout() -> None:
    @llm_rollout
    async def agent(task: str, llm: LLM, rollout: Rollout) -> str:
        return f"{task}|{llm.model}|{rollout.rollout_id}"

    result = await agent.validation_rollout_async("t", {"m": LLM_A}, make_attempted_rollout("ro-x"))
    assert result == "t|model-a|ro-x"


# ---------------------------------------------------------------------------------------------------------------
# Pickling (process-based execution strategies may pickle the agent)
# ---------------------------------------------------------------------------------------------------------------


class RunnerStub:
    """Weak-referenceable stand-in for a runner."""


@rollout
def module_level_agent(task: str, llm: LLM) -> float:
    """A module-level agent."""
    return float(len(task))


def test_module_level_agent_pickles_by_reference() -> None:
    holder = RunnerStub()
    module_level_agent.set_runner(holder)  # type: ignore[arg-type]
    restored = pickle.loads(pickle.dumps(module_level_agent))
    assert restored is module_level_agent


def _plain(task: str, llm: LLM) -> float:
    return 1.0


def test_agent_wrapping_a_picklable_function_pickles_by_value() -> None:
    agent = llm_rollout(_plain)
    runner = RunnerStub()
    agent.set_runner(runner)  # type: ignore[arg-type]  # weak references are dropped when pickling
    restored = pickle.loads(pickle.dumps(agent))
    assert restored is not agent
    assert restored.rollout("abc", {"m": LLM_A}, make_attempted_rollout()) == 1.0
    with pytest.raises(ValueError):
        restored.get_runner()
