"""``LitAgent`` base class."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from rollouthub.litagent import LitAgent
from rollouthub.types.core import Rollout
from rollouthub.types.resources import NamedResources

from .helpers import make_attempted_rollout


class SyncAgent(LitAgent[str]):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        self.calls.append(task)
        return 1.0


class AsyncAgent(LitAgent[str]):
    async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return 2.0


class TrainingOnlyAsync(LitAgent[str]):
    async def training_rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return 3.0


class ValidationOnlyAsync(LitAgent[str]):
    async def validation_rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return 4.0


class Holder:
    """A weak-referenceable stand-in for a runner or trainer."""

    def __init__(self, tracer: Any = None) -> None:
        if tracer is not None:
            self.tracer = tracer


def test_base_methods_raise_not_implemented() -> None:
    agent: LitAgent[Any] = LitAgent()
    rollout = make_attempted_rollout()
    with pytest.raises(NotImplementedError):
        agent.rollout("t", {}, rollout)
    with pytest.raises(NotImplementedError):
        agent.training_rollout("t", {}, rollout)
    with pytest.raises(NotImplementedError):
        agent.validation_rollout("t", {}, rollout)


async def test_base_async_methods_raise_not_implemented() -> None:
    agent: LitAgent[Any] = LitAgent()
    rollout = make_attempted_rollout()
    with pytest.raises(NotImplementedError):
        await agent.rollout_async("t", {}, rollout)
    with pytest.raises(NotImplementedError):
        await agent.training_rollout_async("t", {}, rollout)
    with pytest.raises(NotImplementedError):
        await agent.validation_rollout_async("t", {}, rollout)


async def test_training_and_validation_delegate() -> None:
    agent = SyncAgent()
    rollout = make_attempted_rollout()
    assert agent.training_rollout("a", {}, rollout) == 1.0
    assert agent.validation_rollout("b", {}, rollout) == 1.0
    assert agent.calls == ["a", "b"]
    async_agent = AsyncAgent()
    assert await async_agent.training_rollout_async("a", {}, rollout) == 2.0
    assert await async_agent.validation_rollout_async("a", {}, rollout) == 2.0


def test_is_async_detection() -> None:
    assert not LitAgent().is_async()
    assert not SyncAgent().is_async()
    assert AsyncAgent().is_async()
    assert TrainingOnlyAsync().is_async()
    assert ValidationOnlyAsync().is_async()


def test_trained_agents_is_deprecated() -> None:
    with pytest.warns(DeprecationWarning, match="agent_match"):
        agent: LitAgent[Any] = LitAgent(trained_agents="solver")
    assert agent.trained_agents == "solver"
    assert LitAgent().trained_agents is None


def test_runner_and_trainer_wiring() -> None:
    agent: LitAgent[Any] = LitAgent()
    with pytest.raises(ValueError):
        agent.get_runner()
    with pytest.raises(ValueError):
        _ = agent.trainer
    runner_tracer, trainer_tracer = object(), object()
    runner, trainer = Holder(runner_tracer), Holder(trainer_tracer)
    agent.set_runner(runner)  # type: ignore[arg-type]
    agent.set_trainer(trainer)  # type: ignore[arg-type]
    assert agent.runner is runner and agent.get_runner() is runner
    assert agent.trainer is trainer and agent.get_trainer() is trainer
    assert agent.tracer is runner_tracer
    agent.set_runner(Holder())  # type: ignore[arg-type]  # collected at once: no strong reference left
    gc.collect()
    with pytest.raises(ValueError):
        agent.get_tracer()


def test_tracer_falls_back_to_trainer() -> None:
    agent: LitAgent[Any] = LitAgent()
    runner, trainer_tracer = Holder(), object()
    trainer = Holder(trainer_tracer)
    agent.set_runner(runner)  # type: ignore[arg-type]
    agent.set_trainer(trainer)  # type: ignore[arg-type]
    assert agent.get_tracer() is trainer_tracer


def test_weak_references_do_not_keep_objects_alive() -> None:
    agent: LitAgent[Any] = LitAgent()
    trainer = Holder()
    agent.set_trainer(trainer)  # type: ignore[arg-type]
    del trainer
    gc.collect()
    with pytest.raises(ValueError):
        agent.get_trainer()


def test_deprecated_hooks_are_noops() -> None:
    agent: LitAgent[Any] = LitAgent()
    assert agent.on_rollout_start("t", None, None) is None
    assert agent.on_rollout_end("t", None, None, None) is None


def test_subclass_without_super_init_still_works() -> None:
    class NoSuper(LitAgent[Any]):
        def __init__(self) -> None:  # deliberately skips super().__init__()
            self.x = 1

    agent = NoSuper()
    assert agent.trained_agents is None
    with pytest.raises(ValueError):
        agent.get_runner()
    runner = Holder(tracer="t")
    agent.set_runner(runner)  # type: ignore[arg-type]
    assert agent.tracer == "t"
