"""Issue 17 items 1-4 and 6: behaviour differences that broke code written for Agent Lightning v0.3.

Each test failed on the branch point of the issue (5d1d495) and passes now.
"""

from __future__ import annotations

import inspect
import sys
import time
from typing import Any, Dict, List, Optional
from unittest.mock import Mock

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as OtelEvent
from opentelemetry.trace import Link as OtelLink
from opentelemetry.trace import SpanContext as OtelSpanContext
from opentelemetry.trace import Status, StatusCode, TraceFlags
from pydantic import BaseModel

import rollouthub as agl
from rollouthub.config import lightning_cli
from rollouthub.store.collection import ListBasedCollection
from rollouthub.store.collection.sql_schema import _field_kind
from rollouthub.store.utils import scan_unhealthy_rollouts
from rollouthub.types import Attempt, AttemptedRollout, RolloutConfig, SortOptions
from rollouthub.utils.server_launcher import pick_free_port

# ---------------------------------------------------------------------------------------------------------------------
# 1. Span.from_opentelemetry reads the public span API (get_span_context()), not ``.context``
# ---------------------------------------------------------------------------------------------------------------------

TRACE_ID, SPAN_ID, PARENT_ID = 0x0123456789ABCDEF0123456789ABCDEF, 0x1122334455667788, 0x99AABBCCDDEEFF00
START_NS, END_NS = 1_700_000_000_000_000_000, 1_700_000_001_500_000_000


def _ctx(span_id: int) -> OtelSpanContext:
    return OtelSpanContext(trace_id=TRACE_ID, span_id=span_id, is_remote=False, trace_flags=TraceFlags(1))


class DuckSpan:
    """A span offering the public OpenTelemetry ``ReadableSpan`` API, without a ``context`` attribute."""

    def __init__(self) -> None:
        self.name = "duck"
        self.parent = _ctx(PARENT_ID)
        self.attributes = {"gen_ai.request.model": "m", "n": 3}
        self.events = [OtelEvent("started", {"k": "v"}, timestamp=START_NS)]
        self.links = [OtelLink(_ctx(PARENT_ID), {"why": "retry"})]
        self.start_time = START_NS
        self.end_time = END_NS
        self.status = Status(StatusCode.ERROR, "boom")
        self.resource = Resource({"service.name": "svc"})

    def get_span_context(self) -> OtelSpanContext:
        return _ctx(SPAN_ID)


def _mock_span() -> Mock:
    public_api = ["get_span_context", "parent", "name", "attributes", "events", "links"]
    span = Mock(spec=public_api + ["start_time", "end_time", "status", "resource"])
    span.get_span_context.return_value = _ctx(SPAN_ID)
    span.configure_mock(
        name="mocked", parent=None, attributes={"a": 1}, events=[], links=[], start_time=START_NS, end_time=None
    )
    span.status = Status(StatusCode.OK)
    span.resource = Resource({})
    return span


def test_from_opentelemetry_converts_a_duck_typed_span() -> None:
    assert not hasattr(DuckSpan(), "context")
    span = agl.Span.from_opentelemetry(DuckSpan(), "ro-1", "at-1", 7)  # type: ignore[arg-type]
    assert (span.trace_id, span.span_id, span.parent_id) == (f"{TRACE_ID:032x}", f"{SPAN_ID:016x}", f"{PARENT_ID:016x}")
    assert span.context is not None and span.context.span_id == f"{SPAN_ID:016x}"
    assert span.parent is not None and span.parent.span_id == f"{PARENT_ID:016x}"
    assert (span.start_time, span.end_time) == (1_700_000_000.0, 1_700_000_001.5)
    assert span.status.status_code == "ERROR" and span.status.description == "boom"
    assert span.events[0].name == "started" and span.links[0].attributes == {"why": "retry"}
    assert span.resource.attributes == {"service.name": "svc"}
    assert span.model_extra == {}


def test_from_opentelemetry_converts_a_mock_without_copying_its_bookkeeping() -> None:
    span = agl.Span.from_opentelemetry(_mock_span(), "ro-1", "at-1", 1)  # type: ignore[arg-type]
    assert (span.name, span.span_id, span.parent_id, span.end_time) == ("mocked", f"{SPAN_ID:016x}", None, None)
    assert span.model_extra == {}


def test_from_opentelemetry_without_a_span_context_gives_zero_ids() -> None:
    duck = DuckSpan()
    duck.get_span_context = lambda: None  # type: ignore[method-assign, assignment, return-value]
    span = agl.Span.from_opentelemetry(duck, "ro-1", "at-1", 1)  # type: ignore[arg-type]
    assert (span.trace_id, span.span_id, span.context) == ("0" * 32, "0" * 16, None)


async def test_store_add_otel_span_accepts_a_duck_typed_span() -> None:
    store = agl.InMemoryLightningStore()
    rollout = await store.start_rollout({"q": 1})
    stored = await store.add_otel_span(rollout.rollout_id, rollout.attempt.attempt_id, DuckSpan())
    assert stored is not None and stored.span_id == f"{SPAN_ID:016x}"
    assert [s.name for s in await store.query_spans(rollout.rollout_id)] == ["duck"]


# ---------------------------------------------------------------------------------------------------------------------
# 2. scan_unhealthy_rollouts is a coroutine function, as in v0.3
# ---------------------------------------------------------------------------------------------------------------------


async def test_scan_unhealthy_rollouts_is_awaitable_with_the_reference_signature() -> None:
    assert inspect.iscoroutinefunction(scan_unhealthy_rollouts)
    assert list(inspect.signature(scan_unhealthy_rollouts).parameters) == ["rollouts"]
    now = time.time()
    attempt = Attempt(rollout_id="ro-a", attempt_id="at-a", sequence_id=1, start_time=now - 2, status="running")
    expired = AttemptedRollout(
        rollout_id="ro-a",
        input={},
        start_time=now - 2,
        status="running",
        config=RolloutConfig(timeout_seconds=1.0),
        attempt=attempt,
    )
    assert await scan_unhealthy_rollouts([expired]) == {("ro-a", "at-a"): "timeout"}
    assert await scan_unhealthy_rollouts([]) == {}


# ---------------------------------------------------------------------------------------------------------------------
# 3. PEP 604 ``X | None`` annotations behave like ``Optional[X]`` wherever annotations are inspected
# ---------------------------------------------------------------------------------------------------------------------


class Pep604Item(BaseModel):
    key: str
    count: int | None = None
    label: str | None = None
    score: float | None = None


class OptionalItem(BaseModel):
    key: str
    count: Optional[int] = None
    label: Optional[str] = None
    score: Optional[float] = None


ROWS: List[Dict[str, Any]] = [
    {"key": "a", "count": 3, "label": "z", "score": 0.5},
    {"key": "b"},
    {"key": "c", "count": -1, "label": "", "score": -2.0},
    {"key": "d", "count": 0, "label": "m", "score": 0.0},
]


# Row "b" has nulls: they sort as the type's zero (0, "", 0.0), stably.
EXPECTED_ORDERS = {
    ("count", "asc"): ["c", "b", "d", "a"],
    ("count", "desc"): ["a", "b", "d", "c"],
    ("label", "asc"): ["b", "c", "d", "a"],
    ("label", "desc"): ["a", "d", "b", "c"],
    ("score", "asc"): ["c", "b", "d", "a"],
    ("score", "desc"): ["a", "b", "d", "c"],
}


@pytest.mark.parametrize(("field", "order"), list(EXPECTED_ORDERS))
@pytest.mark.parametrize("model", [Pep604Item, OptionalItem], ids=["pep604", "optional"])
async def test_sorting_on_nullable_fields_is_the_same_for_both_spellings(model: Any, field: str, order: str) -> None:
    collection = ListBasedCollection([model(**row) for row in ROWS], model, ["key"])
    page = await collection.query(sort=SortOptions(name=field, order=order))  # type: ignore[typeddict-item]
    assert [item.key for item in page.items] == EXPECTED_ORDERS[(field, order)]


class _CliTarget:
    def __init__(self, pep604: int | None = None, classic: Optional[int] = None) -> None:
        self.pep604, self.classic = pep604, classic


def test_lightning_cli_and_sql_columns_treat_pep604_like_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["prog", "--_clitarget.pep604", "5", "--_clitarget.classic", "5"])
    parsed = lightning_cli(_CliTarget)
    assert (parsed.pep604, parsed.classic) == (5, 5)
    monkeypatch.setattr(sys, "argv", ["prog", "--_clitarget.pep604", "none", "--_clitarget.classic", "none"])
    parsed = lightning_cli(_CliTarget)
    assert (parsed.pep604, parsed.classic) == (None, None)
    for annotation in (int, str, float):
        assert _field_kind(annotation | None) == _field_kind(Optional[annotation])  # type: ignore[operator]


# ---------------------------------------------------------------------------------------------------------------------
# 4. An unknown role set after construction is refused by execute()
# ---------------------------------------------------------------------------------------------------------------------

_ran: List[str] = []


async def _algorithm_bundle(store: Any, event: Any) -> None:
    _ran.append("algorithm")


async def _runner_bundle(store: Any, worker_id: int, event: Any) -> None:
    _ran.append("runner")


def test_execute_refuses_an_unknown_role_set_after_construction() -> None:
    strategy = agl.ClientServerExecutionStrategy(role="both", server_port=pick_free_port(), graceful_timeout=2.0)
    strategy.role = "trainer"  # type: ignore[assignment]
    _ran.clear()
    with pytest.raises(ValueError, match="^Unknown role: trainer$"):
        strategy.execute(_algorithm_bundle, _runner_bundle, agl.InMemoryLightningStore())
    assert _ran == []


# ---------------------------------------------------------------------------------------------------------------------
# 6. Error texts users match on
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", [agl.ClientServerExecutionStrategy, agl.SharedMemoryExecutionStrategy])
def test_invalid_managed_store_variable_lists_the_accepted_values(
    strategy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGL_MANAGED_STORE", "maybe")
    with pytest.raises(ValueError, match="AGL_MANAGED_STORE must be one of") as info:
        strategy()
    for accepted in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        assert accepted in str(info.value)
    assert "'maybe'" in str(info.value)


def test_runner_main_process_with_several_runners_says_requires_one_runner() -> None:
    with pytest.raises(ValueError, match="requires n_runners to be 1"):
        agl.ClientServerExecutionStrategy(main_process="runner", n_runners=2)
    with pytest.raises(ValueError, match="requires n_runners to be 1"):
        agl.SharedMemoryExecutionStrategy(main_thread="runner", n_runners=2)
