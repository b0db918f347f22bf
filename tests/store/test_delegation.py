"""The explicit delegation of the store wrappers (``rollouthub.store.delegation``), kept in step with the contract, and
the lock the wrappers serialize with: it never blocks an event loop."""

from __future__ import annotations

import ast
import asyncio
import inspect
from typing import Any, List

import pytest

from rollouthub.store.base import LIGHTNING_STORE_METHODS, LightningStore
from rollouthub.store.delegation import UNLOCKED_METHODS, CrossThreadLock, DelegatingLightningStore
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.store.server.store_server import LightningStoreServer
from rollouthub.store.threading import LightningStoreThreaded
from tests.store.helpers import held_by_another_thread

pytestmark = pytest.mark.timeout(60)


def test_the_method_list_is_every_async_method_of_the_contract() -> None:
    contract = {
        name
        for name, member in vars(LightningStore).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    }
    assert set(LIGHTNING_STORE_METHODS) == contract
    assert len(LIGHTNING_STORE_METHODS) == len(contract)
    assert UNLOCKED_METHODS <= contract


def test_every_contract_method_is_written_out_with_the_contract_signature() -> None:
    defined = {name for name, member in vars(DelegatingLightningStore).items() if inspect.iscoroutinefunction(member)}
    assert defined - {"_delegate"} == set(LIGHTNING_STORE_METHODS)
    for name in LIGHTNING_STORE_METHODS:
        method = vars(DelegatingLightningStore)[name]
        contract = getattr(LightningStore, name)
        assert method.__name__ == name
        assert method.__wrapped__ is contract, name
        assert inspect.signature(method) == inspect.signature(contract), name
        assert f":meth:`LightningStore.{name}`" in (method.__doc__ or ""), name


def test_every_method_hands_its_own_name_and_its_arguments_to_delegate() -> None:
    """The bodies are ``return await self._delegate("<own name>", args, kwargs)``: no copy-paste slip."""
    tree = ast.parse(inspect.getsource(DelegatingLightningStore))
    checked = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFunctionDef) and node.name in LIGHTNING_STORE_METHODS:
            body = [statement for statement in node.body if not isinstance(statement, ast.Expr)]  # docstring
            assert len(body) == 1, node.name
            assert ast.unparse(body[0]) == f"return await self._delegate('{node.name}', args, kwargs)"
            checked += 1
    assert checked == len(LIGHTNING_STORE_METHODS)


@pytest.mark.parametrize("wrapper", [LightningStoreThreaded, LightningStoreServer])
def test_wrappers_methods_are_real_methods_an_ide_can_follow(wrapper: type) -> None:
    for name in LIGHTNING_STORE_METHODS:
        method = getattr(wrapper, name)
        # The server converts OpenTelemetry spans itself, with the contract's default add_otel_span.
        owner = LightningStore if (wrapper, name) == (LightningStoreServer, "add_otel_span") else None
        assert method.__qualname__ == f"{(owner or DelegatingLightningStore).__name__}.{name}"
        assert inspect.getsourcefile(method) == inspect.getsourcefile(owner or DelegatingLightningStore)


async def test_the_base_refuses_to_guess_how_to_delegate() -> None:
    with pytest.raises(NotImplementedError):
        await DelegatingLightningStore().get_worker_by_id("w")


# ---------------------------------------------------------------------------------------------------------------------
# The lock
# ---------------------------------------------------------------------------------------------------------------------


async def test_a_waiting_call_suspends_and_its_event_loop_keeps_running() -> None:
    """Another thread holds the lock: a call waiting for it here lets this loop's other coroutines run, and goes on
    once the holder lets go."""
    lock = CrossThreadLock()
    async with held_by_another_thread(lock):
        entered = asyncio.Event()

        async def waiter() -> None:
            async with lock:
                entered.set()

        task = asyncio.create_task(waiter())
        ticks = 0
        while ticks < 20:  # this loop is not blocked while ``waiter`` waits
            await asyncio.sleep(0)
            ticks += 1
        assert not entered.is_set() and lock.locked()
    await asyncio.wait_for(entered.wait(), 10)
    await task
    assert not lock.locked()


async def test_a_cancelled_waiter_does_not_keep_the_lock() -> None:
    lock = CrossThreadLock()
    async with lock:
        waiting = asyncio.create_task(lock.__aenter__())
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert not lock.locked()
    async with lock:
        assert lock.locked()


class _SameLoopStore(InMemoryLightningStore):
    """``get_worker_by_id`` waits for an event that another coroutine of the same loop sets."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.order: List[str] = []

    async def get_worker_by_id(self, worker_id: str) -> Any:
        self.order.append(f"start {worker_id}")
        if worker_id == "first":
            await self.gate.wait()
        self.order.append(f"end {worker_id}")
        return None


async def test_two_calls_on_one_event_loop_queue_without_blocking_it() -> None:
    """The first call holds the lock while it awaits; the second waits for it without blocking the loop, so the
    coroutine that lets the first one finish still runs (a ``threading.Lock`` held across the await deadlocks here)."""
    inner = _SameLoopStore()
    wrapper = LightningStoreThreaded(inner)
    first = asyncio.create_task(wrapper.get_worker_by_id("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(wrapper.get_worker_by_id("second"))
    await asyncio.sleep(0)

    async def open_gate() -> None:
        inner.gate.set()

    await asyncio.wait_for(asyncio.gather(open_gate(), first, second), 10)
    assert inner.order == ["start first", "end first", "start second", "end second"]


async def test_server_serializes_a_store_that_is_not_thread_safe_the_same_way() -> None:
    from rollouthub.utils.server_launcher import pick_free_port

    inner = _SameLoopStore()
    server = LightningStoreServer(inner, host="127.0.0.1", port=pick_free_port(), launch_mode="asyncio")
    first = asyncio.create_task(server.get_worker_by_id("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(server.get_worker_by_id("second"))
    await asyncio.sleep(0)
    inner.gate.set()
    await asyncio.wait_for(asyncio.gather(first, second), 10)
    assert inner.order == ["start first", "end first", "start second", "end second"]
