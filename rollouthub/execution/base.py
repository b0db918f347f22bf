"""Execution strategy contract and bundle protocols."""

from __future__ import annotations

from typing import Awaitable, Optional, Protocol

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
