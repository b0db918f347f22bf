"""Explicit delegation of the store contract: :class:`DelegatingLightningStore`, the base of the store's wrappers
(:class:`~rollouthub.store.threading.LightningStoreThreaded`,
:class:`~rollouthub.store.server.store_server.LightningStoreServer`), and :class:`CrossThreadLock`, the lock with which
they serialize calls to a store that is not thread-safe.

Every async method of the contract (:data:`~rollouthub.store.base.LIGHTNING_STORE_METHODS`) is written out here once,
as a real method of the class: it carries the contract method's parameters and return type (:func:`delegates_to`:
for type checkers, IDEs and ``inspect.signature``) and hands its arguments, unchanged, to :meth:`_delegate`, which
each wrapper implements -- under its lock, straight to the wrapped store, or over HTTP. A wrapper that must do more
for one method overrides it like any other method. ``tests/store/test_delegation.py`` keeps the methods in step with
the contract.
"""

from __future__ import annotations

from typing import Any, Callable, Coroutine, Dict, ParamSpec, Tuple, TypeVar

import aiologic

from .base import LightningStore

__all__ = ["CrossThreadLock", "DelegatingLightningStore", "UNLOCKED_METHODS", "delegates_to"]

P = ParamSpec("P")
R = TypeVar("R")

UNLOCKED_METHODS = frozenset({"wait_for_rollouts", "dequeue_rollout_or_wait"})
"""Methods a wrapper that serializes calls does not run under its lock: ``wait_for_rollouts`` (it only reads and may
wait long) and ``dequeue_rollout_or_wait`` (it waits without the lock and takes it for each claim attempt)."""


def delegates_to(
    contract: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[[Callable[..., Coroutine[Any, Any, Any]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Declare a method as forwarding to ``contract``: type checkers and IDEs see the contract's parameters and return
    type, and ``inspect.signature`` reports them (through ``__wrapped__``); name and docstring stay the method's."""

    def declare(method: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[P, Coroutine[Any, Any, R]]:
        method.__wrapped__ = contract  # type: ignore[attr-defined]
        return method

    return declare


class CrossThreadLock:
    """A lock for ``async with`` that excludes coroutines of every thread and event loop, and never blocks an event
    loop while it waits (an ``aiologic.BinarySemaphore``: a waiting coroutine suspends, the holder may run on any
    loop). A free lock is taken without suspending."""

    __slots__ = ("_semaphore",)

    def __init__(self) -> None:
        self._semaphore = aiologic.BinarySemaphore()

    async def __aenter__(self) -> None:
        if not self._semaphore.green_acquire(blocking=False):
            await self._semaphore.async_acquire()

    async def __aexit__(self, *exc: Any) -> None:
        self._semaphore.release()

    def locked(self) -> bool:
        """Whether some coroutine holds the lock."""
        return bool(self._semaphore.value == 0)


class DelegatingLightningStore(LightningStore):
    """A store whose every contract method forwards its arguments to :meth:`_delegate` (see the module docstring)."""

    async def _delegate(self, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """Run the contract method ``name`` with ``args``/``kwargs`` (as the caller passed them) and return its result;
        implemented by each wrapper."""
        raise NotImplementedError()

    @delegates_to(LightningStore.statistics)
    async def statistics(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.statistics`)."""
        return await self._delegate("statistics", args, kwargs)

    @delegates_to(LightningStore.start_rollout)
    async def start_rollout(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.start_rollout`)."""
        return await self._delegate("start_rollout", args, kwargs)

    @delegates_to(LightningStore.enqueue_rollout)
    async def enqueue_rollout(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.enqueue_rollout`)."""
        return await self._delegate("enqueue_rollout", args, kwargs)

    @delegates_to(LightningStore.enqueue_many_rollouts)
    async def enqueue_many_rollouts(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.enqueue_many_rollouts`)."""
        return await self._delegate("enqueue_many_rollouts", args, kwargs)

    @delegates_to(LightningStore.dequeue_rollout)
    async def dequeue_rollout(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.dequeue_rollout`)."""
        return await self._delegate("dequeue_rollout", args, kwargs)

    @delegates_to(LightningStore.dequeue_many_rollouts)
    async def dequeue_many_rollouts(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.dequeue_many_rollouts`)."""
        return await self._delegate("dequeue_many_rollouts", args, kwargs)

    @delegates_to(LightningStore.dequeue_rollout_or_wait)
    async def dequeue_rollout_or_wait(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.dequeue_rollout_or_wait`)."""
        return await self._delegate("dequeue_rollout_or_wait", args, kwargs)

    @delegates_to(LightningStore.start_attempt)
    async def start_attempt(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.start_attempt`)."""
        return await self._delegate("start_attempt", args, kwargs)

    @delegates_to(LightningStore.query_rollouts)
    async def query_rollouts(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.query_rollouts`)."""
        return await self._delegate("query_rollouts", args, kwargs)

    @delegates_to(LightningStore.query_attempts)
    async def query_attempts(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.query_attempts`)."""
        return await self._delegate("query_attempts", args, kwargs)

    @delegates_to(LightningStore.get_rollout_by_id)
    async def get_rollout_by_id(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.get_rollout_by_id`)."""
        return await self._delegate("get_rollout_by_id", args, kwargs)

    @delegates_to(LightningStore.get_latest_attempt)
    async def get_latest_attempt(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.get_latest_attempt`)."""
        return await self._delegate("get_latest_attempt", args, kwargs)

    @delegates_to(LightningStore.query_resources)
    async def query_resources(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.query_resources`)."""
        return await self._delegate("query_resources", args, kwargs)

    @delegates_to(LightningStore.add_resources)
    async def add_resources(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.add_resources`)."""
        return await self._delegate("add_resources", args, kwargs)

    @delegates_to(LightningStore.update_resources)
    async def update_resources(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.update_resources`)."""
        return await self._delegate("update_resources", args, kwargs)

    @delegates_to(LightningStore.get_resources_by_id)
    async def get_resources_by_id(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.get_resources_by_id`)."""
        return await self._delegate("get_resources_by_id", args, kwargs)

    @delegates_to(LightningStore.get_latest_resources)
    async def get_latest_resources(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.get_latest_resources`)."""
        return await self._delegate("get_latest_resources", args, kwargs)

    @delegates_to(LightningStore.add_span)
    async def add_span(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.add_span`)."""
        return await self._delegate("add_span", args, kwargs)

    @delegates_to(LightningStore.add_many_spans)
    async def add_many_spans(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.add_many_spans`)."""
        return await self._delegate("add_many_spans", args, kwargs)

    @delegates_to(LightningStore.add_otel_span)
    async def add_otel_span(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.add_otel_span`)."""
        return await self._delegate("add_otel_span", args, kwargs)

    @delegates_to(LightningStore.get_next_span_sequence_id)
    async def get_next_span_sequence_id(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.get_next_span_sequence_id`)."""
        return await self._delegate("get_next_span_sequence_id", args, kwargs)

    @delegates_to(LightningStore.get_many_span_sequence_ids)
    async def get_many_span_sequence_ids(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.get_many_span_sequence_ids`)."""
        return await self._delegate("get_many_span_sequence_ids", args, kwargs)

    @delegates_to(LightningStore.add_many_spans_assigning_ids)
    async def add_many_spans_assigning_ids(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.add_many_spans_assigning_ids`)."""
        return await self._delegate("add_many_spans_assigning_ids", args, kwargs)

    @delegates_to(LightningStore.wait_for_rollouts)
    async def wait_for_rollouts(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.wait_for_rollouts`)."""
        return await self._delegate("wait_for_rollouts", args, kwargs)

    @delegates_to(LightningStore.query_spans)
    async def query_spans(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.query_spans`)."""
        return await self._delegate("query_spans", args, kwargs)

    @delegates_to(LightningStore.query_spans_json)
    async def query_spans_json(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.query_spans_json`)."""
        return await self._delegate("query_spans_json", args, kwargs)

    @delegates_to(LightningStore.update_rollout)
    async def update_rollout(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.update_rollout`)."""
        return await self._delegate("update_rollout", args, kwargs)

    @delegates_to(LightningStore.update_attempt)
    async def update_attempt(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.update_attempt`)."""
        return await self._delegate("update_attempt", args, kwargs)

    @delegates_to(LightningStore.query_workers)
    async def query_workers(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.query_workers`)."""
        return await self._delegate("query_workers", args, kwargs)

    @delegates_to(LightningStore.get_worker_by_id)
    async def get_worker_by_id(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.get_worker_by_id`)."""
        return await self._delegate("get_worker_by_id", args, kwargs)

    @delegates_to(LightningStore.update_worker)
    async def update_worker(self, *args: Any, **kwargs: Any) -> Any:
        """Delegated (:meth:`LightningStore.update_worker`)."""
        return await self._delegate("update_worker", args, kwargs)
