"""Annotations and operations: ``emit_annotation``, ``operation`` and ``OperationContext``."""

from __future__ import annotations

import functools
import inspect
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ContextManager,
    Dict,
    Mapping,
    Optional,
    Type,
    TypeVar,
    Union,
    cast,
    overload,
)

from rollouthub.semconv import AGL_ANNOTATION, AGL_OPERATION, LightningSpanAttributes
from rollouthub.types.tracer import SpanCoreFields, SpanRecordingContext, TraceStatus
from rollouthub.utils.otel import check_attributes_sanity, flatten_attributes, sanitize_attributes

from ._common import resolve_tracer

if TYPE_CHECKING:
    from rollouthub.tracer.base import Tracer

__all__ = ["emit_annotation", "operation", "OperationContext"]

F = TypeVar("F", bound=Callable[..., Any])

_INPUT = LightningSpanAttributes.OPERATION_INPUT.value
_OUTPUT = LightningSpanAttributes.OPERATION_OUTPUT.value
_NAME = LightningSpanAttributes.OPERATION_NAME.value


def emit_annotation(annotation: Mapping[str, Any], propagate: bool = True) -> SpanCoreFields:
    """Emit an ``agentlightning.annotation`` span carrying ``annotation`` as flattened attributes.

    Args:
        annotation: Nested mapping; it is flattened (leaf lists kept) and strictly validated.
        propagate: When false, nothing is exported (a ``DummyTracer`` builds the span description).

    Returns:
        The core fields of the created span.

    Raises:
        ValueError: If a flattened value is ``None``, a dict, or a heterogeneous list.
        RuntimeError: If ``propagate`` is true and no tracer is active.
    """
    flat = flatten_attributes(annotation, expand_leaf_lists=False)
    check_attributes_sanity(flat)
    attributes = sanitize_attributes(flat)
    tracer = resolve_tracer(propagate)
    return tracer.create_span(AGL_ANNOTATION, attributes=attributes, status=TraceStatus(status_code="OK"))


def _flatten_under(prefix: str, value: Any) -> Dict[str, Any]:
    """Flatten ``value`` below ``prefix`` (a scalar is stored at ``prefix`` itself) and sanitise it."""
    return sanitize_attributes(flatten_attributes({prefix: value}, expand_leaf_lists=False))


def _input_attributes(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Record call arguments by parameter name, falling back to ``args.<i>`` / ``kwargs.<k>``."""
    attributes: Dict[str, Any] = {}
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        for index, value in enumerate(args):
            attributes.update(_flatten_under(f"{_INPUT}.args.{index}", value))
        for key, value in kwargs.items():
            attributes.update(_flatten_under(f"{_INPUT}.kwargs.{key}", value))
        return attributes
    bound.apply_defaults()
    for name, value in bound.arguments.items():
        parameter = bound.signature.parameters[name]
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            for index, item in enumerate(value):
                attributes.update(_flatten_under(f"{_INPUT}.{name}.{index}", item))
        else:
            attributes.update(_flatten_under(f"{_INPUT}.{name}", value))
    return attributes


def _wrap_function(fn: F, initial_attributes: Mapping[str, Any], propagate: bool) -> F:
    """Wrap ``fn`` so that each call is recorded as an ``agentlightning.operation`` span."""

    def open_span(args: tuple[Any, ...], kwargs: Dict[str, Any]) -> tuple[ContextManager[SpanRecordingContext], Any]:
        tracer = resolve_tracer(propagate)
        attributes = sanitize_attributes({_NAME: getattr(fn, "__name__", repr(fn)), **initial_attributes})
        return tracer.operation_context(AGL_OPERATION, attributes), _input_attributes(fn, args, kwargs)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            context, inputs = open_span(args, kwargs)
            with context as recording:
                recording.record_attributes(inputs)
                result = await fn(*args, **kwargs)
                recording.record_attributes(_flatten_under(_OUTPUT, result))
                return result

        return cast(F, async_wrapper)

    @functools.wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        context, inputs = open_span(args, kwargs)
        with context as recording:
            recording.record_attributes(inputs)
            result = fn(*args, **kwargs)
            recording.record_attributes(_flatten_under(_OUTPUT, result))
            return result

    return cast(F, sync_wrapper)


class OperationContext:
    """Records a code block (context manager) or each call of a function (decorator) as one span.

    The tracer is resolved at construction: the active tracer (``RuntimeError`` if none) or, when not
    propagating, a ``DummyTracer``. Decorated functions resolve the tracer again at every call.
    """

    def __init__(self, name: str, attributes: Optional[Mapping[str, Any]] = None, propagate: bool = True) -> None:
        """Create the context.

        Args:
            name: Span name (``operation`` always passes ``agentlightning.operation``).
            attributes: Initial (already flattened) span attributes.
            propagate: Export through the active tracer (true) or use a throw-away ``DummyTracer`` (false).
        """
        self.name = name
        self.initial_attributes: Dict[str, Any] = dict(attributes or {})
        self.propagate = propagate
        self._tracer: Tracer = resolve_tracer(propagate)
        self._context: Optional[ContextManager[SpanRecordingContext]] = None
        self._recording: Optional[SpanRecordingContext] = None
        self._span: Optional[SpanCoreFields] = None

    # -------------------------------------------------------------- context manager use

    def __enter__(self) -> OperationContext:
        """Open the span."""
        if self._context is not None:
            raise RuntimeError("OperationContext is already active; it cannot be re-entered.")
        context = self._tracer.operation_context(self.name, sanitize_attributes(self.initial_attributes))
        self._recording = context.__enter__()
        self._context = context
        self._span = None
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        """Close the span (recording a propagating exception) and keep the recorded span."""
        context, recording = self._context, self._recording
        if context is None or recording is None:
            return None
        try:
            return context.__exit__(exc_type, exc, tb)
        finally:
            self._context = None
            self._recording = None
            self._span = recording.get_recorded_span()

    async def __aenter__(self) -> OperationContext:
        """Async alias of :meth:`__enter__`."""
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        """Async alias of :meth:`__exit__`."""
        return self.__exit__(exc_type, exc, tb)

    def _require_recording(self) -> SpanRecordingContext:
        if self._recording is None:
            raise RuntimeError("OperationContext is not active; use it inside a 'with' block.")
        return self._recording

    def set_input(self, *args: Any, **kwargs: Any) -> None:
        """Record inputs: positional *i* under ``...input.args.<i>``, keyword *k* under ``...input.<k>``."""
        recording = self._require_recording()
        attributes: Dict[str, Any] = {}
        for index, value in enumerate(args):
            attributes.update(_flatten_under(f"{_INPUT}.args.{index}", value))
        for key, value in kwargs.items():
            attributes.update(_flatten_under(f"{_INPUT}.{key}", value))
        recording.record_attributes(attributes)

    def set_output(self, value: Any) -> None:
        """Record the output, flattened under ``agentlightning.operation.output``."""
        self._require_recording().record_attributes(_flatten_under(_OUTPUT, value))

    def record_attributes(self, attributes: Mapping[str, Any]) -> None:
        """Record extra (flattened and sanitised) attributes on the active span."""
        self._require_recording().record_attributes(
            sanitize_attributes(flatten_attributes(attributes, expand_leaf_lists=False))
        )

    def span(self) -> SpanCoreFields:
        """Return the recorded span once the block has completed.

        Raises:
            RuntimeError: Before the block has completed.
        """
        if self._span is None:
            raise RuntimeError("The operation has not completed yet; its span is not available.")
        return self._span

    # -------------------------------------------------------------- decorator use

    def __call__(self, fn: F) -> F:
        """Decorate a sync or async function: every call is recorded as a span."""
        return _wrap_function(fn, self.initial_attributes, self.propagate)


@overload
def operation(fn: F, *, propagate: bool = True, name: Optional[str] = None, **additional_attributes: Any) -> F: ...


@overload
def operation(
    fn: None = None, *, propagate: bool = True, name: Optional[str] = None, **additional_attributes: Any
) -> OperationContext: ...


def operation(
    fn: Optional[Callable[..., Any]] = None,
    *,
    propagate: bool = True,
    name: Optional[str] = None,
    **additional_attributes: Any,
) -> Union[Callable[..., Any], OperationContext]:
    """Record a function call or a code block as one ``agentlightning.operation`` span.

    Usable as ``@operation``, ``@operation(name=..., **attrs)`` or ``with operation(...) as op:``.

    Args:
        fn: The function to wrap (bare decorator form).
        propagate: Export through the active tracer (true) or not at all (false).
        name: Stored as attribute ``agentlightning.operation.name`` (defaults to the function name when decorating).
        **additional_attributes: Initial span attributes, flattened with leaf lists kept.

    Raises:
        ValueError: If ``fn`` is not callable, or ``name`` is given together with the name attribute.
    """
    if fn is not None and not callable(fn):
        raise ValueError(
            f"operation() takes a callable as positional argument, got {fn!r}. Use operation(name=...) instead."
        )
    if name is not None and _NAME in additional_attributes:
        raise ValueError(f"Pass the operation name either as name= or as {_NAME!r}, not both.")
    initial = flatten_attributes(additional_attributes, expand_leaf_lists=False)
    if name is not None:
        initial[_NAME] = name
    if fn is not None:
        return _wrap_function(fn, initial, propagate)
    return OperationContext(AGL_OPERATION, initial, propagate=propagate)
