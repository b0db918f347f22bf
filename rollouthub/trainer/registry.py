"""Aliases of the execution strategies accepted by the Trainer."""

from __future__ import annotations

from typing import Dict

__all__ = ["ExecutionStrategyRegistry"]

ExecutionStrategyRegistry: Dict[str, str] = {
    "shm": "rollouthub.execution.shared_memory.SharedMemoryExecutionStrategy",
    "cs": "rollouthub.execution.client_server.ClientServerExecutionStrategy",
    "ray": "rollouthub.execution.ray.RayExecutionStrategy",
    # "ipc" is reserved for InterProcessExecutionStrategy (placeholder, not registered).
}
"""Alias -> import path of the strategy class."""
