"""Helpers shared by algorithms: dataset batching and store / LLM-proxy injection."""

from __future__ import annotations

import functools
import logging
import random
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator, List, Optional, TypeVar

from .base import Dataset

if TYPE_CHECKING:  # pragma: no cover
    from rollouthub.llm_proxy import LLMProxy
    from rollouthub.store.base import LightningStore

__all__ = ["batch_iter_over_dataset", "with_store", "with_llm_proxy", "rollout_wait_step"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


def batch_iter_over_dataset(dataset: Dataset[T], batch_size: int) -> Iterator[List[T]]:
    """Yield batches of ``batch_size`` samples forever.

    If ``batch_size >= len(dataset)`` every batch is a freshly shuffled full copy. Otherwise indices are shuffled
    once per pass; an incomplete tail is carried over into the next pass, never repeating an index inside one
    batch.
    """
    n = len(dataset)
    if n == 0:
        raise ValueError("Cannot iterate over an empty dataset.")
    if batch_size <= 0:
        raise ValueError("batch_size must be positive.")
    if batch_size >= n:
        while True:
            items = [dataset[i] for i in range(n)]
            random.shuffle(items)
            yield items
    carry: List[int] = []
    while True:
        order = list(range(n))
        random.shuffle(order)
        # Carried-over indices go last: since len(dataset) > batch_size, the batch that completes the carry is
        # filled with other indices only, so no index repeats inside one batch.
        in_carry = set(carry)
        order = [i for i in order if i not in in_carry] + [i for i in order if i in in_carry]
        pending = carry + order
        carry = []
        while len(pending) >= batch_size:
            batch, pending = pending[:batch_size], pending[batch_size:]
            yield [dataset[i] for i in batch]
        carry = pending


def rollout_wait_step(store: LightningStore, interval: float) -> float:
    """How long one ``store.wait_for_rollouts`` call should block: ``interval``, except on an HTTP client, which
    accepts at most 0.1 s (the server holds the request that long and answers as soon as the rollouts finish)."""
    from rollouthub.store.client.api import WAIT_TIMEOUT_CAP, LightningStoreClient

    return min(interval, WAIT_TIMEOUT_CAP) if isinstance(store, LightningStoreClient) else interval


def with_store(func: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Decorate ``async def method(self, store, *args, **kwargs)`` so callers omit ``store``.

    The wrapper has signature ``(self, *args, **kwargs)`` and injects ``self.get_store()``.
    """

    @functools.wraps(func)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> R:
        return await func(self, self.get_store(), *args, **kwargs)

    return wrapper


def with_llm_proxy(
    required: bool = False, auto_start: bool = True
) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R]]]:
    """Decorate ``async def method(self, llm_proxy, *args, **kwargs)`` to inject ``self.get_llm_proxy()``.

    The injected value is the :class:`~rollouthub.llm_proxy.LLMProxy` the trainer configured (with its store set
    to the algorithm's store), or ``None``. Typical use: publish ``llm_proxy.as_resource()`` as the agents' LLM.

    Args:
        required: raise ``ValueError`` when no proxy is configured (otherwise ``None`` is injected).
        auto_start: start a proxy that is not running before the call and stop it afterwards (only if this
            wrapper started it).
    """

    def decorator(func: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        @functools.wraps(func)
        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> R:
            proxy: Optional[LLMProxy] = self.get_llm_proxy()
            if proxy is None and required:
                raise ValueError("An LLM proxy is required but none is configured for this algorithm.")
            started = False
            if proxy is not None and auto_start:
                if not proxy.is_running():
                    logger.info("Starting the LLM proxy before running the algorithm.")
                    await proxy.start()
                    started = True
            try:
                return await func(self, proxy, *args, **kwargs)
            finally:
                if started and proxy is not None:
                    logger.info("Stopping the LLM proxy started for the algorithm.")
                    try:
                        await proxy.stop()
                    except Exception:
                        logger.exception("Failed to stop the LLM proxy.")

        return wrapper

    return decorator
