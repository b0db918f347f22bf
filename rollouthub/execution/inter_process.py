"""Placeholder for a future inter-process strategy (alias ``"ipc"``, not registered)."""

from __future__ import annotations

from rollouthub.store.base import LightningStore

from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle

__all__ = ["InterProcessExecutionStrategy"]


class InterProcessExecutionStrategy(ExecutionStrategy):
    """Reserved; not implemented (use ``"cs"`` or ``"shm"``)."""

    alias: str = "ipc"

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        """Always raises ``NotImplementedError``."""
        raise NotImplementedError("InterProcessExecutionStrategy is a placeholder; use 'cs' or 'shm'.")
