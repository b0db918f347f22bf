"""Core data models: rollouts, attempts, workers, queries and pagination.

Field names, order, types and defaults follow the reference's data model exactly (JSON field order on the wire
equals the declaration order).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Dict, Generic, List, Literal, Optional, Protocol, TypeVar, Union, overload

from pydantic import BaseModel, Field, model_validator
from typing_extensions import TypedDict

from .tracer import Span, SpanCoreFields

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "RolloutStatus",
    "AttemptStatus",
    "RolloutMode",
    "WorkerStatus",
    "TaskInput",
    "RolloutConfig",
    "Rollout",
    "Attempt",
    "AttemptedRollout",
    "EnqueueRolloutRequest",
    "Worker",
    "FilterField",
    "FilterOptions",
    "SortOptions",
    "PaginatedResult",
    "Triplet",
    "RolloutRawResult",
    "Dataset",
    "ParallelWorkerBase",
    "Hook",
    "Task",
    "TaskIfAny",
    "RolloutLegacy",
    "RolloutRawResultLegacy",
    "GenericResponse",
]

RolloutStatus = Literal["queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing"]
"""Status of a rollout."""

AttemptStatus = Literal["preparing", "running", "failed", "succeeded", "unresponsive", "timeout"]
"""Status of one attempt (a process only: no queue or cancel states)."""

RolloutMode = Literal["train", "val", "test"]
"""Which split a rollout belongs to."""

WorkerStatus = Literal["idle", "busy", "unknown"]
"""Derived status of a runner worker."""

TaskInput = Any
"""Arbitrary task input (must be JSON-serialisable when the store is remote)."""

T = TypeVar("T")


class RolloutConfig(BaseModel):
    """Per-rollout limits and retry policy."""

    timeout_seconds: Optional[float] = None
    unresponsive_seconds: Optional[float] = None
    max_attempts: int = Field(default=1, ge=1)
    retry_condition: List[AttemptStatus] = Field(default_factory=list)


class Rollout(BaseModel):
    """One unit of work: an input to run the agent on, and its status."""

    rollout_id: str
    input: TaskInput
    start_time: float
    end_time: Optional[float] = None
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    status: RolloutStatus = "queuing"
    config: RolloutConfig = Field(default_factory=RolloutConfig)
    metadata: Optional[Dict[str, Any]] = None


class Attempt(BaseModel):
    """One execution of a rollout by a worker."""

    rollout_id: str
    attempt_id: str
    sequence_id: int
    start_time: float
    end_time: Optional[float] = None
    status: AttemptStatus = "preparing"
    worker_id: Optional[str] = None
    last_heartbeat_time: Optional[float] = None
    metadata: Optional[Dict[str, Any]] = None


class AttemptedRollout(Rollout):
    """A rollout together with its latest attempt."""

    attempt: Attempt

    @model_validator(mode="after")
    def _check_consistency(self) -> AttemptedRollout:
        if self.attempt.rollout_id != self.rollout_id:
            raise ValueError("Inconsistent rollout_id between Rollout and Attempt")
        return self


class EnqueueRolloutRequest(BaseModel):
    """One item of a batch enqueue."""

    input: TaskInput
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    config: Optional[RolloutConfig] = None
    metadata: Optional[Dict[str, Any]] = None


class Worker(BaseModel):
    """Telemetry and derived status of one runner worker."""

    worker_id: str
    status: WorkerStatus = "unknown"
    heartbeat_stats: Optional[Dict[str, Any]] = None
    last_heartbeat_time: Optional[float] = None
    last_dequeue_time: Optional[float] = None
    last_busy_time: Optional[float] = None
    last_idle_time: Optional[float] = None
    current_rollout_id: Optional[str] = None
    current_attempt_id: Optional[str] = None


class FilterField(TypedDict, total=False):
    """Operators applicable to one field: ``exact``, ``within`` and ``contains``."""

    exact: Any
    within: Sequence[Any]
    contains: str


FilterOptions = Dict[str, Any]
"""Field name -> :class:`FilterField`, plus the reserved keys ``_aggregate`` (``"and"``/``"or"``) and ``_must``
(a mapping field -> FilterField, or a sequence of such mappings, all of which must hold)."""


class SortOptions(TypedDict, total=False):
    """Sort specification: field ``name`` and ``order`` (``"asc"`` by default)."""

    name: str
    order: Literal["asc", "desc"]


class PaginatedResult(BaseModel, Sequence[T], Generic[T]):  # type: ignore[misc]
    """A page of query results that also behaves as a read-only sequence of its items."""

    items: Sequence[T]
    limit: int
    offset: int
    total: int

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[T, Sequence[T]]:
        return self.items[index]

    def __iter__(self) -> Iterator[T]:  # type: ignore[override]
        return iter(self.items)

    def __repr__(self) -> str:
        window = f"{self.offset}:" if self.limit == -1 else f"{self.offset}:{self.offset + self.limit}"
        if not self.items:
            body = "empty"
        elif len(self.items) == 1:
            body = repr(self.items[0])
        else:
            body = f"[{self.items[0]!r}, ...]"
        return f"<PaginatedResult ({window} of {self.total}) {body}>"

    __str__ = __repr__


class Triplet(BaseModel):
    """A (prompt, response, reward) transition: the unit of RL data produced by adapters."""

    prompt: Any
    response: Any
    reward: Optional[float] = None
    metadata: Dict[str, Any] = Field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------------------
# Runtime types
# ---------------------------------------------------------------------------------------------------------------

T_co = TypeVar("T_co", covariant=True)

RolloutRawResult = Union[None, float, List["ReadableSpan"], List[Span], List[SpanCoreFields]]
"""Values a rollout method may return: nothing, a final reward, or spans to store."""


class Dataset(Protocol[T_co]):
    """A sized, indexable collection of tasks; plain lists qualify."""

    def __getitem__(self, index: int) -> T_co:
        """Return the item at ``index``."""
        ...

    def __len__(self) -> int:
        """Return the number of items."""
        ...


class ParallelWorkerBase:
    """Lifecycle base class of components that run in (possibly several) worker processes.

    Order of use: :meth:`init` once in the main process, :meth:`init_worker` in each worker, :meth:`run`,
    :meth:`teardown_worker` in each worker, :meth:`teardown` once. All methods are no-ops by default.
    """

    worker_id: Optional[int] = None

    def init(self, *args: Any, **kwargs: Any) -> None:
        """Initialise once in the main process."""

    def init_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        """Initialise inside a worker; remembers ``worker_id``."""
        self.worker_id = worker_id

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Run the worker."""

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        """Tear down inside a worker."""

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Tear down once in the main process."""


class Hook(ParallelWorkerBase):
    """Runner callbacks; every method is an async no-op taking keyword-only arguments.

    Order within one rollout: :meth:`on_rollout_start`, :meth:`on_trace_start`, :meth:`on_trace_end`,
    :meth:`on_rollout_end`. ``agent`` is the ``LitAgent``, ``runner`` the ``Runner`` and ``tracer`` the ``Tracer``
    running the rollout (typed ``Any`` here: ``rollouthub.types`` is the lowest layer and imports none of them;
    subclasses may annotate them precisely).
    """

    async def on_rollout_start(self, *, agent: Any, runner: Any, rollout: Rollout) -> None:
        """Called before the trace context of a rollout is opened."""

    async def on_trace_start(self, *, agent: Any, runner: Any, tracer: Any, rollout: Rollout) -> None:
        """Called right after the trace context is opened, before the agent runs."""

    async def on_trace_end(self, *, agent: Any, runner: Any, tracer: Any, rollout: Rollout) -> None:
        """Called right after the agent returned, before the trace context closes."""

    async def on_rollout_end(
        self,
        *,
        agent: Any,
        runner: Any,
        rollout: Rollout,
        spans: Union[List[ReadableSpan], List[Span]],
    ) -> None:
        """Called after the rollout result has been written to the store, with the rollout's spans."""


class Task(BaseModel):
    """Deprecated (v0.1): a task handed out by the legacy server."""

    rollout_id: str
    input: TaskInput
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    create_time: Optional[float] = None
    last_claim_time: Optional[float] = None
    num_claims: Optional[int] = None
    metadata: Dict[str, Any] = Field(default_factory=dict)


class TaskIfAny(BaseModel):
    """Deprecated (v0.1): the answer of a task poll."""

    is_available: bool
    task: Optional[Task] = None


class RolloutLegacy(BaseModel):
    """Deprecated (v0.1): the result of one rollout as posted to the legacy server."""

    rollout_id: str
    task: Optional[Task] = None
    final_reward: Optional[float] = None
    triplets: Optional[List[Triplet]] = None
    trace: Optional[List[Dict[str, Any]]] = None
    logs: Optional[List[str]] = None
    metadata: Dict[str, Any] = Field(default_factory=dict)


RolloutRawResultLegacy = Union[
    None,
    float,
    List[Triplet],
    List[Dict[str, Any]],
    List["ReadableSpan"],
    List[Span],
    List[SpanCoreFields],
    RolloutLegacy,
]
"""Deprecated: values a v0.1 rollout method may return."""


class GenericResponse(BaseModel):
    """Deprecated (v0.1): a generic server response."""

    status: str = "success"
    message: Optional[str] = None
    data: Optional[Dict[str, Any]] = None
