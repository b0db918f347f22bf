"""``operation`` and ``OperationContext``."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from rollouthub.emitter import operation
from rollouthub.emitter.annotation import OperationContext

from .conftest import RecordingTracer

NAME = "agentlightning.operation.name"
INPUT = "agentlightning.operation.input"
OUTPUT = "agentlightning.operation.output"


class Unserialisable:
    def __str__(self) -> str:
        return "<unserialisable>"


# ---------------------------------------------------------------------------------------------------------------
# Context-manager use
# ---------------------------------------------------------------------------------------------------------------


def test_context_manager_attribute_layout() -> None:
    with operation(propagate=False, name="step", user={"id": 5}, tags=["a", "b"]) as op:
        assert isinstance(op, OperationContext)
        op.set_input(1, {"x": [1, 2]}, query="q", nested={"deep": {"v": True}})
        op.set_output({"answer": 42, "items": ["p", "q"]})
    span = op.span()
    assert span.name == "agentlightning.operation"
    assert span.status.status_code == "OK"
    assert span.attributes == {
        "user.id": 5,
        "tags": ["a", "b"],
        NAME: "step",
        f"{INPUT}.args.0": 1,
        f"{INPUT}.args.1.x": [1, 2],
        f"{INPUT}.query": "q",
        f"{INPUT}.nested.deep.v": True,
        f"{OUTPUT}.answer": 42,
        f"{OUTPUT}.items": ["p", "q"],
    }
    assert span.start_time is not None and span.end_time is not None
    assert span.start_time <= span.end_time


def test_set_output_scalar_and_unserialisable() -> None:
    with operation(propagate=False) as op:
        op.set_output(3.5)
    assert op.span().attributes[OUTPUT] == 3.5
    with operation(propagate=False) as op:
        op.set_output(Unserialisable())
    assert op.span().attributes[OUTPUT] == '"<unserialisable>"'


def test_span_before_completion_and_methods_outside_block() -> None:
    op = operation(propagate=False)
    with pytest.raises(RuntimeError):
        op.span()
    with pytest.raises(RuntimeError):
        op.set_input(1)
    with pytest.raises(RuntimeError):
        op.set_output(1)
    with op:
        with pytest.raises(RuntimeError):
            op.span()
    op.span()


def test_context_manager_records_exception() -> None:
    op = operation(propagate=False, name="failing")
    with pytest.raises(KeyError):
        with op:
            raise KeyError("missing")
    span = op.span()
    assert span.status.status_code == "ERROR"
    assert span.attributes["exception.type"] == "KeyError"
    assert span.attributes[NAME] == "failing"


def test_name_aliasing_conflict_and_non_callable() -> None:
    with pytest.raises(ValueError):
        operation(propagate=False, name="a", **{NAME: "b"})
    with pytest.raises(ValueError):
        operation("my-name")  # type: ignore[call-overload]


def test_name_as_additional_attribute() -> None:
    with operation(propagate=False, **{NAME: "via-kwargs"}) as op:
        pass
    assert op.span().attributes[NAME] == "via-kwargs"


def test_context_requires_active_tracer_when_propagating() -> None:
    with pytest.raises(RuntimeError, match="No active tracer"):
        operation(name="x")
    with pytest.raises(RuntimeError):
        OperationContext("agentlightning.operation", {})


def test_context_uses_active_tracer(recording_tracer: RecordingTracer) -> None:
    with operation(name="traced") as op:
        op.set_input(a=1)
    assert recording_tracer.spans == [op.span()]
    assert op.span().attributes == {NAME: "traced", f"{INPUT}.a": 1}


async def test_async_with_context(recording_tracer: RecordingTracer) -> None:
    async with operation(name="async-block") as op:
        op.set_output("done")
    assert recording_tracer.spans[0].attributes[OUTPUT] == "done"


# ---------------------------------------------------------------------------------------------------------------
# Decorator use
# ---------------------------------------------------------------------------------------------------------------


@operation
def module_level_add(a: int, b: int = 10, *rest: int, scale: float = 1.0, **extra: Any) -> float:
    """Add things."""
    return (a + b + sum(rest)) * scale


def test_bare_decorator_needs_no_tracer_at_decoration_time(recording_tracer: RecordingTracer) -> None:
    assert module_level_add(1, 2, 3, 4, scale=2.0, flag="y") == 20.0
    span = recording_tracer.spans[0]
    assert span.name == "agentlightning.operation"
    assert span.attributes == {
        NAME: "module_level_add",
        f"{INPUT}.a": 1,
        f"{INPUT}.b": 2,
        f"{INPUT}.rest.0": 3,
        f"{INPUT}.rest.1": 4,
        f"{INPUT}.scale": 2.0,
        f"{INPUT}.extra.flag": "y",
        OUTPUT: 20.0,
    }


def test_decorator_applies_defaults(recording_tracer: RecordingTracer) -> None:
    module_level_add(1)
    attributes = recording_tracer.spans[0].attributes
    assert attributes[f"{INPUT}.b"] == 10
    assert attributes[f"{INPUT}.scale"] == 1.0
    assert f"{INPUT}.rest.0" not in attributes


def test_decorator_preserves_metadata() -> None:
    assert module_level_add.__name__ == "module_level_add"
    assert module_level_add.__doc__ == "Add things."
    assert inspect.signature(module_level_add) == inspect.signature(module_level_add.__wrapped__)  # type: ignore[attr-defined]


def test_decorator_without_tracer_fails_at_call_time() -> None:
    with pytest.raises(RuntimeError, match="No active tracer"):
        module_level_add(1)


def test_decorator_with_propagate_false_needs_no_tracer() -> None:
    @operation(propagate=False, name="custom")
    def double(x: int) -> int:
        return 2 * x

    assert double(4) == 8
    assert double.__name__ == "double"


def test_decorator_explicit_name_recorded(recording_tracer: RecordingTracer) -> None:
    @operation(name="custom", category="math")
    def double(x: int) -> int:
        return 2 * x

    double(3)
    assert recording_tracer.spans[0].attributes == {
        NAME: "custom",
        "category": "math",
        f"{INPUT}.x": 3,
        OUTPUT: 6,
    }


async def test_async_decorator(recording_tracer: RecordingTracer) -> None:
    @operation
    async def fetch(url: str) -> dict:
        return {"status": 200, "url": url}

    assert inspect.iscoroutinefunction(fetch)
    assert await fetch("http://x") == {"status": 200, "url": "http://x"}
    attributes = recording_tracer.spans[0].attributes
    assert attributes[NAME] == "fetch"
    assert attributes[f"{INPUT}.url"] == "http://x"
    assert attributes[f"{OUTPUT}.status"] == 200


def test_decorator_records_exception_and_reraises(recording_tracer: RecordingTracer) -> None:
    @operation
    def explode(x: int) -> None:
        raise ZeroDivisionError(f"bad {x}")

    with pytest.raises(ZeroDivisionError):
        explode(1)
    span = recording_tracer.spans[0]
    assert span.status.status_code == "ERROR"
    assert span.status.description == "bad 1"
    assert span.attributes["exception.type"] == "ZeroDivisionError"
    assert span.attributes[f"{INPUT}.x"] == 1
    assert OUTPUT not in span.attributes


async def test_async_decorator_records_exception(recording_tracer: RecordingTracer) -> None:
    @operation
    async def explode() -> None:
        raise RuntimeError("async boom")

    with pytest.raises(RuntimeError, match="async boom"):
        await explode()
    assert recording_tracer.spans[0].status.status_code == "ERROR"


def test_decorator_binding_fallback(recording_tracer: RecordingTracer) -> None:
    def flexible(*args: Any, **kwargs: Any) -> int:
        return len(args) + len(kwargs)

    flexible.__signature__ = inspect.Signature([])  # type: ignore[attr-defined]
    wrapped = operation(flexible)
    assert wrapped(1, "two", key={"v": 3}) == 3
    attributes = recording_tracer.spans[0].attributes
    assert attributes[f"{INPUT}.args.0"] == 1
    assert attributes[f"{INPUT}.args.1"] == "two"
    assert attributes[f"{INPUT}.kwargs.key.v"] == 3


def test_operation_context_call_decorates(recording_tracer: RecordingTracer) -> None:
    context = OperationContext("agentlightning.operation", {"static": "yes"})

    @context
    def work() -> str:
        return "ok"

    assert work() == "ok"
    assert recording_tracer.spans[0].attributes == {NAME: "work", "static": "yes", OUTPUT: "ok"}
