"""Execution strategy contract and bundle protocols."""

from __future__ import annotations

from typing import Awaitable, Optional, Protocol, Tuple

from rollouthub.store.base import LightningStore

from .events import ExecutionEvent

__all__ = ["AlgorithmBundle", "RunnerBundle", "ExecutionStrategy"]


class AlgorithmBundle(Protocol):
    """``async (store, event) -> None``: runs the algorithm; polls ``event`` to stop cooperatively."""

    def __call__(self, store: LightningStore, event: ExecutionEvent) -> Awaitable[None]: ...


class RunnerBundle(Protocol):
    """``async (store, worker_id, event) -> None``: runs one runner worker until ``event`` is set."""

    def __call__(self, store: LightningStore, worker_id: int, event: ExecutionEvent) -> Awaitable[None]: ...


class ExecutionStrategy:
    """Decides where the algorithm and the runners run (threads, processes, machines) and how they stop."""

    alias: str = ""

    interrupted: Optional[BaseException] = None
    """The ``KeyboardInterrupt`` (Ctrl+C, or SIGTERM as :class:`~rollouthub.utils.process_lifetime.Terminated`) that
    stopped the last :meth:`execute`, which then returns normally after stopping everything; ``None`` otherwise."""

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        """Run both bundles against ``store`` and block until they are done."""
        raise NotImplementedError()

    def remote_runner_hosts(self) -> Optional[Tuple[str, str]]:
        """Where a server that the algorithm's side starts for the runners (the LLM proxy) should bind, and the
        address it should publish, when the runners may run on other machines: ``(bind host, advertised host)``.

        Called while :meth:`execute` runs the algorithm. ``None`` (the default): such servers keep their own
        defaults (the LLM proxy binds loopback unless told otherwise).
        """
        return None

    def run_store(self, store: LightningStore) -> LightningStore:
        """The store the algorithm of a run uses, given the ``store`` passed to :meth:`execute`: by default that one.

        The Trainer notes the unfinished rollouts of this store before a run and cancels the run's own after an
        interruption; a strategy whose algorithm uses another store (e.g. a remote server by URL) returns it.
        """
        return store
