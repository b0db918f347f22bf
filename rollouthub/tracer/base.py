"""Tracer base class and the process-wide active-tracer registry."""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
import warnings
from contextlib import asynccontextmanager, contextmanager
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncContextManager,
    AsyncIterator,
    Awaitable,
    Callable,
    ContextManager,
    Iterator,
    List,
    Optional,
    TypeVar,
)

from rollouthub.types.core import ParallelWorkerBase
from rollouthub.types.tracer import Attributes, Span, SpanCoreFields, SpanRecordingContext, TraceStatus

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

__all__ = [
    "Tracer",
    "get_active_tracer",
    "set_active_tracer",
    "clear_active_tracer",
    "with_active_tracer_context",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The active tracer lives in a mutable "slot" referenced from a context variable, backed by a process-wide
# fallback. Contexts derived from the one that activated a tracer (asyncio tasks, ``asyncio.to_thread``,
# ``contextvars.copy_context``) share the slot, so clearing it is visible to all of them. Contexts that never saw
# an activation (e.g. plain ``threading.Thread`` started by user code) fall back to the most recently activated
# tracer. Double activation is detected per context, so several runners (each in its own thread or task) can
# hold their own trace context concurrently while the single-runner behaviour of the reference is preserved.


class _Slot:
    """Mutable holder of the active tracer for one activation."""

    __slots__ = ("tracer",)

    def __init__(self, tracer: Optional[Tracer]) -> None:
        self.tracer = tracer


_active_slot: contextvars.ContextVar[Optional[_Slot]] = contextvars.ContextVar("rollouthub_active_tracer", default=None)
_global_slots: List[_Slot] = []
_global_lock = threading.Lock()


def get_active_tracer() -> Optional[Tracer]:
    """Return the tracer whose trace context is currently open, or ``None``.

    The slot of the current context wins; a context that never activated a tracer sees the most recently
    activated tracer of the process (if any is still active).
    """
    slot = _active_slot.get()
    if slot is not None:
        return slot.tracer
    with _global_lock:
        return _global_slots[-1].tracer if _global_slots else None


def set_active_tracer(tracer: Tracer) -> None:
    """Mark ``tracer`` as the active tracer.

    Raises:
        ValueError: if a tracer is already active in the current context.
    """
    slot = _active_slot.get()
    if slot is not None and slot.tracer is not None:
        raise ValueError(f"An active tracer is already set: {slot.tracer!r}. Nested trace contexts are not supported.")
    new_slot = _Slot(tracer)
    _active_slot.set(new_slot)
    with _global_lock:
        _global_slots.append(new_slot)


def clear_active_tracer() -> None:
    """Clear the active tracer of the current context (or, from a fresh context, the most recent one)."""
    slot = _active_slot.get()
    with _global_lock:
        if slot is None or slot.tracer is None:
            # Nothing active in this context: clear the most recent process-wide activation, if any.
            if slot is None and _global_slots:
                target = _global_slots.pop()
                target.tracer = None
            return
        slot.tracer = None
        try:
            _global_slots.remove(slot)
        except ValueError:
            pass


def with_active_tracer_context(
    method: Callable[..., AsyncContextManager[T]],
) -> Callable[..., AsyncContextManager[T]]:
    """Decorate a tracer method returning an async context manager so the tracer is active inside it.

    On enter, ``set_active_tracer(self)`` is called (raising ``ValueError`` if nested) and the inner manager is
    entered (the slot is cleared if that fails). On exit the inner manager is exited and the slot always cleared.
    """

    @functools.wraps(method)
    @asynccontextmanager
    async def wrapper(self: Tracer, *args: Any, **kwargs: Any) -> AsyncIterator[T]:
        set_active_tracer(self)
        try:
            inner = method(self, *args, **kwargs)
            async with inner as value:
                yield value
        finally:
            clear_active_tracer()

    return wrapper


class Tracer(ParallelWorkerBase):
    """Base class of all tracers.

    A tracer captures the spans produced while an agent runs and routes them to a store. Subclasses implement
    :meth:`trace_context`, :meth:`_trace_context_sync`, :meth:`get_last_trace`, :meth:`create_span` and
    :meth:`operation_context`.
    """

    def __init__(self) -> None:
        """Create a tracer with no worker id and no store."""
        self.worker_id: Optional[int] = None
        self._store: Optional[LightningStore] = None

    # ------------------------------------------------------------------ lifecycle

    def init_worker(self, worker_id: int, store: Optional[LightningStore] = None) -> None:  # type: ignore[override]
        """Remember ``worker_id`` and the store spans should be written to."""
        self.worker_id = worker_id
        self._store = store

    def preload(self) -> None:
        """Import, in this process, the heavy modules :meth:`init_worker` will need, applying and starting nothing.

        Called by the Trainer before its execution strategy starts runner processes: forked runners then inherit
        the modules instead of each importing them again. The default imports nothing.
        """

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        """Forget the worker id (the store reference is kept until re-initialised)."""
        self.worker_id = None

    @property
    def store(self) -> Optional[LightningStore]:
        """The store given to :meth:`init_worker` (or ``None``)."""
        return self._store

    @contextmanager
    def lifespan(self, store: Optional[LightningStore] = None) -> Iterator[Tracer]:
        """Run ``init()`` → ``init_worker(0, store)`` → yield → ``teardown_worker(0)`` → ``teardown()``.

        Only the steps that succeeded are undone.
        """
        self.init()
        try:
            self.init_worker(0, store)
            try:
                yield self
            finally:
                self.teardown_worker(0)
        finally:
            self.teardown()

    # ------------------------------------------------------------------ tracing scopes

    def trace_context(
        self,
        name: Optional[str] = None,
        *,
        store: Optional[LightningStore] = None,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
    ) -> AsyncContextManager[Any]:
        """Open an async tracing scope; everything traced inside belongs to (``rollout_id``, ``attempt_id``)."""
        raise NotImplementedError()

    def _trace_context_sync(
        self,
        name: Optional[str] = None,
        *,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
    ) -> ContextManager[Any]:
        """Synchronous variant of :meth:`trace_context` (internal)."""
        raise NotImplementedError()

    def get_last_trace(self) -> List[Span]:
        """Return the spans collected in the most recent trace context."""
        raise NotImplementedError()

    def create_span(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        timestamp: Optional[float] = None,
        status: Optional[TraceStatus] = None,
    ) -> SpanCoreFields:
        """Create a zero-duration span (fire-and-forget) and return its core fields."""
        raise NotImplementedError()

    def operation_context(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
    ) -> ContextManager[SpanRecordingContext]:
        """Record the enclosed code block as a span; yields a :class:`SpanRecordingContext`."""
        raise NotImplementedError()

    # ------------------------------------------------------------------ deprecated helpers

    def trace_run(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Deprecated: run ``func`` inside ``_trace_context_sync(name=func.__name__)``."""
        warnings.warn("Tracer.trace_run is deprecated; use trace_context instead.", DeprecationWarning, stacklevel=2)
        with self._trace_context_sync(name=getattr(func, "__name__", None)):
            return func(*args, **kwargs)

    async def trace_run_async(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Deprecated: await ``func`` inside ``trace_context(name=func.__name__)``."""
        warnings.warn(
            "Tracer.trace_run_async is deprecated; use trace_context instead.", DeprecationWarning, stacklevel=2
        )
        async with self.trace_context(name=getattr(func, "__name__", None)):
            return await func(*args, **kwargs)

    def get_langchain_handler(self) -> Any:
        """Return a LangChain callback handler; the base tracer has none (warns and returns ``None``)."""
        logger.warning("%s does not support LangChain callback handlers.", type(self).__name__)
        return None
