"""Algorithm base, ``@algo``, helpers, Baseline and VERL."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest

import rollouthub.algorithm as algorithm_pkg
from rollouthub.algorithm import Algorithm, Baseline, FastAlgorithm, algo
from rollouthub.algorithm.decorator import FunctionalAlgorithm
from rollouthub.algorithm.utils import batch_iter_over_dataset, with_llm_proxy, with_store
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.types import PromptTemplate

from .helpers import simulated_runner


class _Obj:
    """A weak-referenceable stand-in for trainers/adapters."""


def test_algorithm_references() -> None:
    a = Algorithm()
    with pytest.raises(ValueError):
        a.get_trainer()
    with pytest.raises(ValueError):
        a.get_store()
    with pytest.raises(ValueError):
        a.get_adapter()
    assert a.get_llm_proxy() is None
    assert a.get_initial_resources() is None
    trainer, adapter, proxy = _Obj(), _Obj(), _Obj()
    a.set_trainer(trainer)  # type: ignore[arg-type]
    a.set_adapter(adapter)
    a.set_llm_proxy(proxy)
    assert a.get_trainer() is trainer and a.get_adapter() is adapter and a.get_llm_proxy() is proxy
    del trainer, adapter, proxy
    gc.collect()
    for getter in (a.get_trainer, a.get_adapter, a.get_llm_proxy):
        with pytest.raises(ValueError):
            getter()
    with pytest.raises(NotImplementedError):
        a.run()
    with pytest.raises(NotImplementedError):
        a.get_client()
    assert not a.is_async()


def test_algo_injects_by_name_sync_and_async() -> None:
    seen: dict[str, Any] = {}

    @algo
    def sync_algo(*, store: Any, initial_resources: Any, train_dataset: Any) -> str:
        """Doc kept."""
        seen.update(store=store, initial_resources=initial_resources, train_dataset=train_dataset)
        return "ok"

    assert isinstance(sync_algo, FunctionalAlgorithm)
    assert sync_algo.__name__ == "sync_algo" and sync_algo.__doc__ == "Doc kept."
    assert not sync_algo.is_async()
    store = InMemoryLightningStore()
    sync_algo.set_store(store)
    sync_algo.set_initial_resources({"p": PromptTemplate(template="x", engine="f-string")})
    assert sync_algo.run(train_dataset=[1, 2]) == "ok"
    assert seen["store"] is store and seen["train_dataset"] == [1, 2]
    with pytest.raises(TypeError):
        sync_algo.run(val_dataset=[1])
    # Calling the object calls the function unchanged.
    assert sync_algo(store=1, initial_resources=2, train_dataset=3) == "ok" and seen["store"] == 1

    @algo
    async def async_algo(adapter: Any, *args: Any, **kwargs: Any) -> None:
        return None

    assert async_algo.is_async()
    with pytest.raises(ValueError):  # no adapter set
        async_algo.run()
    adapter = _Obj()
    async_algo.set_adapter(adapter)
    coro = async_algo.run()
    assert asyncio.iscoroutine(coro)
    asyncio.run(coro)


@pytest.mark.parametrize("n,batch", [(10, 3), (7, 7), (5, 9), (4, 3)])
def test_batch_iter_over_dataset(n: int, batch: int) -> None:
    data = list(range(n))
    it = batch_iter_over_dataset(data, batch)
    batches = [next(it) for _ in range(12)]
    if batch >= n:
        assert all(sorted(b) == data for b in batches)
        return
    assert all(len(b) == batch and len(set(b)) == batch for b in batches)
    flat = [x for b in batches for x in b]
    # Every full pass covers every index exactly once (carry-over preserves the order of passes).
    for start in range(0, len(flat) - n + 1, n):
        assert sorted(flat[start : start + n]) == data


class _Proxy:
    def __init__(self) -> None:
        self.running = False
        self.calls: list[str] = []

    def is_running(self) -> bool:
        return self.running

    async def start(self) -> None:
        self.running = True
        self.calls.append("start")

    async def stop(self) -> None:
        self.running = False
        self.calls.append("stop")


class _ProxyAlgo(Algorithm):
    @with_llm_proxy()
    @with_store
    async def run(self, store: Any, llm_proxy: Any, train_dataset: Any = None, val_dataset: Any = None) -> Any:  # type: ignore[override]
        return store, llm_proxy, llm_proxy.running if llm_proxy else None


class _RequiredProxyAlgo(Algorithm):
    @with_llm_proxy(required=True)
    async def run(self, llm_proxy: Any, train_dataset: Any = None, val_dataset: Any = None) -> Any:  # type: ignore[override]
        return llm_proxy


def test_with_store_and_llm_proxy() -> None:
    a = _ProxyAlgo()
    store = InMemoryLightningStore()
    a.set_store(store)
    assert asyncio.run(a.run()) == (store, None, None)
    proxy = _Proxy()
    a.set_llm_proxy(proxy)
    assert asyncio.run(a.run())[2] is True  # started for the call
    assert proxy.calls == ["start", "stop"] and not proxy.running
    proxy.running = True  # already running: neither started nor stopped
    asyncio.run(a.run())
    assert proxy.calls == ["start", "stop"]
    with pytest.raises(ValueError):
        asyncio.run(_RequiredProxyAlgo().run())


def test_baseline_validation() -> None:
    with pytest.raises(ValueError):
        Baseline(train_split=1.0)
    with pytest.raises(ValueError):
        Baseline(span_verbosity="all")  # type: ignore[arg-type]
    assert isinstance(Baseline(), FastAlgorithm)


class _CountingAdapter:
    def adapt(self, spans: Any) -> Any:
        return {"n_spans": len(spans)}


async def test_baseline_end_to_end(caplog: pytest.LogCaptureFixture) -> None:
    store = InMemoryLightningStore()
    baseline = Baseline(polling_interval=0.01, max_queue_length=2, span_verbosity="key_values")
    baseline.set_store(store)
    adapter = _CountingAdapter()
    baseline.set_adapter(adapter)
    baseline.set_initial_resources({"prompt": PromptTemplate(template="Q: {q}", engine="f-string")})
    stop = asyncio.Event()
    runner = asyncio.create_task(simulated_runner(store, lambda task, res: float(task), stop))
    with caplog.at_level(logging.INFO, logger="rollouthub.algorithm.fast"):
        await asyncio.wait_for(baseline.run(train_dataset=[1, 2, 3], val_dataset=[4]), 20)
    stop.set()
    assert await runner == 4
    rollouts = await store.query_rollouts()
    assert sorted((r.input, r.mode, r.status, r.resources_id) for r in rollouts) == [
        (1, "train", "succeeded", "default"),
        (2, "train", "succeeded", "default"),
        (3, "train", "succeeded", "default"),
        (4, "val", "succeeded", "default"),
    ]
    text = caplog.text
    assert "Adapted data: {'n_spans': 1}" in text
    assert "(agentlightning.annotation)" in text and "Attributes:" in text


async def test_baseline_without_datasets_logs_error(caplog: pytest.LogCaptureFixture) -> None:
    baseline = Baseline()
    baseline.set_store(InMemoryLightningStore())
    with caplog.at_level(logging.ERROR):
        await baseline.run()
    assert "neither a train nor a validation dataset" in caplog.text


def test_verl_factory_raises_clear_import_error() -> None:
    from rollouthub.algorithm.verl import missing_verl_dependencies

    if not missing_verl_dependencies():  # pragma: no cover - GPU machines
        pytest.skip("VERL dependencies are installed")
    with pytest.raises(ImportError, match="VERL"):
        algorithm_pkg.VERL({})
