"""``Runner`` base class."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, Iterator, List, Optional, TypeVar

from rollouthub.tracer.base import ParallelWorkerBase
from rollouthub.types import NamedResources, Rollout, RolloutMode, TaskInput

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

__all__ = ["Runner"]

logger = logging.getLogger(__name__)

T_task = TypeVar("T_task")


class Runner(ParallelWorkerBase, Generic[T_task]):
    """Abstract long-running executor that pulls work from a store and runs an agent.

    Subclasses implement :meth:`init`, :meth:`init_worker`, :meth:`teardown_worker`, :meth:`teardown`,
    :meth:`iter` and :meth:`step`. :meth:`run` is not used (call :meth:`iter` or :meth:`step`).
    """

    worker_id: Optional[int] = None

    def init(self, agent: Any, **kwargs: Any) -> None:
        """Prepare the runner for ``agent`` (once per runner object, before any worker)."""
        raise NotImplementedError()

    def init_worker(self, worker_id: int, store: LightningStore, **kwargs: Any) -> None:  # type: ignore[override]
        """Prepare one worker talking to ``store``."""
        raise NotImplementedError()

    def run(self, *args: Any, **kwargs: Any) -> None:
        """Not supported: use :meth:`iter` or :meth:`step`."""
        raise RuntimeError("Runner.run() is not supported; use iter() or step() instead.")

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        """Release the per-worker state."""
        raise NotImplementedError()

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Release the runner-level state."""
        raise NotImplementedError()

    @contextmanager
    def run_context(
        self,
        *,
        agent: Any,
        store: LightningStore,
        hooks: Optional[List[Any]] = None,
        worker_id: Optional[int] = None,
    ) -> Iterator[Runner[T_task]]:
        """Initialise the runner (and one worker) around a block, for debugging outside a Trainer.

        Calls ``init(agent=agent, hooks=hooks)`` then ``init_worker(worker_id or 0, store)``; on exit
        ``teardown_worker`` (only if ``init_worker`` succeeded) and ``teardown`` (only if ``init`` succeeded).
        Teardown errors are logged, never raised.
        """
        effective_worker_id = worker_id if worker_id is not None else 0
        initialized = False
        worker_initialized = False
        try:
            self.init(agent=agent, hooks=hooks)
            initialized = True
            self.init_worker(worker_id=effective_worker_id, store=store)
            worker_initialized = True
            yield self
        finally:
            if worker_initialized:
                try:
                    self.teardown_worker(worker_id=effective_worker_id)
                except Exception:
                    logger.exception("Error during runner teardown_worker")
            if initialized:
                try:
                    self.teardown()
                except Exception:
                    logger.exception("Error during runner teardown")

    async def iter(self, *, event: Optional[Any] = None) -> None:
        """Process rollouts from the store until stopped."""
        raise NotImplementedError()

    async def step(
        self,
        input: TaskInput,
        *,
        resources: Optional[NamedResources] = None,
        mode: Optional[RolloutMode] = None,
        event: Optional[Any] = None,
    ) -> Rollout:
        """Run one task directly, bypassing the queue."""
        raise NotImplementedError()
