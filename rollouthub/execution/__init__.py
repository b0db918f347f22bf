"""Execution strategies: where the algorithm and the runners run, and how they stop."""

from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle
from .client_server import ClientServerExecutionStrategy
from .events import ExecutionEvent, MultiprocessingEvent, ThreadingEvent
from .inter_process import InterProcessExecutionStrategy
from .shared_memory import SharedMemoryExecutionStrategy

__all__ = [
    "ExecutionStrategy",
    "ClientServerExecutionStrategy",
    "ExecutionEvent",
    "ThreadingEvent",
    "MultiprocessingEvent",
    "SharedMemoryExecutionStrategy",
]
# Also importable from here (not star-exported): AlgorithmBundle, RunnerBundle, InterProcessExecutionStrategy.
_ = (AlgorithmBundle, RunnerBundle, InterProcessExecutionStrategy)
