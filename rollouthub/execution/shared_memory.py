"""``SharedMemoryExecutionStrategy``: the algorithm and the runners as threads of one process.

Differences from the reference (fixes of its quirks):

* every bundle runs on its own event loop that is torn down explicitly, so a bundle that ignores cancellation is
  really abandoned (``asyncio.run`` would block forever cancelling it);
* ``main_thread="runner"``: when the algorithm finishes normally the stop event is set, so the runner on the main
  thread stops by itself instead of serving an empty queue forever;
* the Trainer gives every runner thread its own deep copy of the runner (and tracer), so ``n_runners > 1`` with the
  algorithm on the main thread works.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Awaitable, Callable, Dict, List, Literal, Optional

from rollouthub.env_var import LightningEnvVar, resolve_bool_env_var
from rollouthub.store.base import LightningStore
from rollouthub.store.threading import LightningStoreThreaded

from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle
from .events import ThreadingEvent

__all__ = ["SharedMemoryExecutionStrategy"]

logger = logging.getLogger(__name__)


class SharedMemoryExecutionStrategy(ExecutionStrategy):
    """Run the algorithm and ``n_runners`` runners as threads sharing one (thread-safe) store.

    Args:
        n_runners: number of runner threads (worker ids ``0..n_runners-1``).
        main_thread: ``"algorithm"`` (runners in daemon threads ``runner-<i>``) or ``"runner"`` (the algorithm in a
            daemon thread ``algorithm``; requires ``n_runners == 1``).
        join_timeout: seconds to join each background thread during cleanup.
        graceful_delay: seconds a bundle gets to finish after the stop event, and again after cancellation.
        poll_interval: seconds between checks of the stop event by each bundle's supervisor.
        managed_store: wrap the store in :class:`LightningStoreThreaded` (default: env ``AGL_MANAGED_STORE``, else
            True).
    """

    alias: str = "shm"

    def __init__(
        self,
        n_runners: int = 1,
        main_thread: Literal["algorithm", "runner"] = "runner",
        join_timeout: float = 15.0,
        graceful_delay: float = 5.0,
        poll_interval: float = 0.05,
        managed_store: Optional[bool] = None,
    ) -> None:
        if main_thread not in ("algorithm", "runner"):
            raise ValueError("main_thread must be 'algorithm' or 'runner'.")
        if main_thread == "runner" and n_runners != 1:
            raise ValueError("main_thread='runner' requires n_runners to be 1; use main_thread='algorithm'.")
        if n_runners < 1:
            raise ValueError("n_runners must be at least 1.")
        self.n_runners = n_runners
        self.main_thread = main_thread
        self.join_timeout = join_timeout
        self.graceful_delay = graceful_delay
        self.poll_interval = poll_interval
        self.managed_store = resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE, managed_store, fallback=True)
        self._bundle_tasks: Dict[str, asyncio.Future[None]] = {}

    # -- one bundle on its own loop ---------------------------------------------------------------------------------

    async def _supervise(self, name: str, make_coro: Callable[[], Awaitable[None]], stop_evt: ThreadingEvent) -> None:
        """Run the bundle; on stop give it ``graceful_delay``, then cancel it and give it ``graceful_delay`` more."""
        task = asyncio.ensure_future(make_coro())
        self._bundle_tasks[name] = task
        while not task.done() and not stop_evt.is_set():
            await asyncio.wait({task}, timeout=self.poll_interval)
        if task.done():
            try:
                task.result()
            except asyncio.CancelledError:
                logger.info("[%s] Bundle was cancelled.", name)
            return
        logger.debug("[%s] Stop requested; waiting up to %.1fs for the bundle to finish.", name, self.graceful_delay)
        await asyncio.wait({task}, timeout=self.graceful_delay)
        if not task.done():
            logger.warning("[%s] Bundle did not stop within %.1fs; cancelling it.", name, self.graceful_delay)
            task.cancel()
            await asyncio.wait({task}, timeout=self.graceful_delay)
            if not task.done():
                logger.error("[%s] Bundle ignored cancellation for %.1fs; abandoning it.", name, self.graceful_delay)
                return
        try:
            task.result()
        except asyncio.CancelledError:
            logger.info("[%s] Bundle stopped (cancelled).", name)

    def _run_bundle(self, name: str, make_coro: Callable[[], Awaitable[None]], stop_evt: ThreadingEvent) -> None:
        """Run one bundle to completion on a fresh event loop in the current thread."""
        loop = asyncio.new_event_loop()
        try:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._supervise(name, make_coro, stop_evt))
        finally:
            try:
                bundle_task = self._bundle_tasks.pop(name, None)
                if bundle_task is not None and bundle_task.done() and not bundle_task.cancelled():
                    bundle_task.exception()  # mark as retrieved (it was re-raised or logged already)
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for t in pending:
                    t.cancel()
                if pending:
                    loop.run_until_complete(asyncio.wait(pending, timeout=self.graceful_delay))
                loop.run_until_complete(loop.shutdown_asyncgens())
            except BaseException:  # pragma: no cover - best-effort teardown
                logger.debug("[%s] Error while tearing down the event loop.", name, exc_info=True)
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def _thread_target(
        self,
        name: str,
        make_coro: Callable[[], Awaitable[None]],
        stop_evt: ThreadingEvent,
        errors: List[BaseException],
        stop_on_success: bool,
    ) -> None:
        try:
            self._run_bundle(name, make_coro, stop_evt)
            if stop_on_success:
                stop_evt.set()
        except BaseException as exc:
            logger.exception("[%s] Bundle raised an exception; stopping everything.", name)
            errors.append(exc)
            stop_evt.set()

    # -- execute ----------------------------------------------------------------------------------------------------

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        """Run the bundles as threads and block until the main-thread bundle is done; see the class docstring."""
        stop_evt = ThreadingEvent()
        wrapped: LightningStore = LightningStoreThreaded(store) if self.managed_store else store
        errors: List[BaseException] = []
        threads: List[threading.Thread] = []

        def algo_coro() -> Awaitable[None]:
            return algorithm(wrapped, stop_evt)

        def runner_coro(worker_id: int) -> Callable[[], Awaitable[None]]:
            return lambda: runner(wrapped, worker_id, stop_evt)

        main_error: Optional[BaseException] = None
        self.interrupted = None
        try:
            if self.main_thread == "algorithm":
                for i in range(self.n_runners):
                    t = threading.Thread(
                        target=self._thread_target,
                        args=(f"runner-{i}", runner_coro(i), stop_evt, errors, False),
                        name=f"runner-{i}",
                        daemon=True,
                    )
                    threads.append(t)
                    t.start()
                try:
                    self._run_bundle("algorithm", algo_coro, stop_evt)
                finally:
                    stop_evt.set()
            else:
                t = threading.Thread(
                    target=self._thread_target,
                    args=("algorithm", algo_coro, stop_evt, errors, True),
                    name="algorithm",
                    daemon=True,
                )
                threads.append(t)
                t.start()
                self._run_bundle("runner-0", runner_coro(0), stop_evt)
                # The runner returned (max_rollouts or stop event): let the algorithm finish.
                while t.is_alive():
                    t.join(0.1)
        except KeyboardInterrupt as exc:
            logger.warning("KeyboardInterrupt received on main thread; initiating cooperative shutdown...")
            stop_evt.set()
            self.interrupted = exc
        except BaseException as exc:
            logger.exception("Main-thread bundle raised an exception; stopping everything.")
            stop_evt.set()
            main_error = exc
        finally:
            stop_evt.set()
            for t in threads:
                t.join(self.join_timeout)
                if t.is_alive():
                    logger.error("Thread %s did not stop within %.1fs; leaving it (daemon).", t.name, self.join_timeout)
        if main_error is not None:
            raise main_error
        if errors:
            raise errors[0]

    def __repr__(self) -> str:
        return (
            f"SharedMemoryExecutionStrategy(n_runners={self.n_runners}, main_thread={self.main_thread!r}, "
            f"managed_store={self.managed_store})"
        )
