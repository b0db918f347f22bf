"""Conformance: spans, sequence ids and heartbeats."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest
from opentelemetry.trace import format_span_id, format_trace_id

from rollouthub.types import PaginatedResult, RolloutConfig, Span
from tests.store.backends import BackendTraits
from tests.store.conftest import FakeClock
from tests.store.helpers import make_otel_span, make_span

# ---------------------------------------------------------------------------------------------------------------------
# Sequence ids
# ---------------------------------------------------------------------------------------------------------------------


async def test_sequence_ids_interleave_allocations_and_otel_spans(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    assert await store.get_next_span_sequence_id(rid, aid) == 1
    second = await store.add_otel_span(rid, aid, make_otel_span("second"))
    assert second is not None and second.sequence_id == 2
    assert await store.get_next_span_sequence_id(rid, aid) == 3
    fourth = await store.add_otel_span(rid, aid, make_otel_span("fourth"))
    assert fourth is not None and fourth.sequence_id == 4
    # The counter is per rollout: another (even non-existent) attempt shares it.
    assert await store.get_next_span_sequence_id(rid, "at-does-not-exist") == 5
    assert [s.sequence_id for s in await store.query_spans(rid)] == [2, 4]


async def test_explicit_otel_sequence_id_raises_counter(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    span = await store.add_otel_span(rid, aid, make_otel_span(), sequence_id=100)
    assert span is not None and span.sequence_id == 100
    assert await store.get_next_span_sequence_id(rid, aid) == 101


async def test_sequence_counter_is_per_rollout_and_unvalidated(store: Any) -> None:
    assert await store.get_next_span_sequence_id("ro-unknown", "at-unknown") == 1
    assert await store.get_next_span_sequence_id("ro-unknown", "at-other") == 2
    assert await store.get_next_span_sequence_id("ro-another", "at-unknown") == 1
    value = await store.get_next_span_sequence_id("ro-unknown", "at-unknown")
    assert type(value) is int and value == 3


async def test_bulk_sequence_id_allocation(store: Any) -> None:
    a = await store.start_rollout(input="a")
    b = await store.start_rollout(input="b")
    a_pair = (a.rollout_id, a.attempt.attempt_id)
    b_pair = (b.rollout_id, b.attempt.attempt_id)
    ids = await store.get_many_span_sequence_ids([a_pair, b_pair, a_pair, (a.rollout_id, "at-other")])
    assert list(ids) == [1, 1, 2, 3]
    assert await store.get_next_span_sequence_id(*a_pair) == 4
    assert await store.get_next_span_sequence_id(*b_pair) == 2
    assert list(await store.get_many_span_sequence_ids([])) == []


async def test_add_span_keeps_sequence_id_verbatim_and_raises_counter(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    zero = await store.add_span(make_span(rid, aid, 0, span_id="s-zero"))
    assert zero is not None and zero.sequence_id == 0
    assert await store.get_next_span_sequence_id(rid, aid) == 1
    high = await store.add_span(make_span(rid, aid, 101, span_id="s-high"))
    assert high is not None and high.sequence_id == 101
    assert await store.get_next_span_sequence_id(rid, aid) == 102
    low = await store.add_span(make_span(rid, aid, 5, span_id="s-low"))
    assert low is not None and low.sequence_id == 5
    assert await store.get_next_span_sequence_id(rid, aid) == 103
    stored = {s.span_id: s.sequence_id for s in await store.query_spans(rid)}
    assert stored == {"s-zero": 0, "s-high": 101, "s-low": 5}


# ---------------------------------------------------------------------------------------------------------------------
# add_span / add_otel_span / add_many_spans
# ---------------------------------------------------------------------------------------------------------------------


async def test_add_span_returns_span_and_none_for_duplicate(store: Any, traits: BackendTraits) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    span = make_span(rid, aid, 1, span_id="span-1", attributes={"k": "v"})
    result = await store.add_span(span)
    if traits.collection_based:
        assert result is span
    assert result == span
    duplicate = make_span(rid, aid, 2, span_id="span-1", attributes={"k": "other"})
    assert await store.add_span(duplicate) is None
    stored = await store.query_spans(rid)
    assert len(stored) == 1
    assert stored[0].attributes == {"k": "v"}
    assert stored[0].sequence_id == 1


async def test_same_span_id_in_different_attempts_is_not_duplicate(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    second = await store.start_attempt(rollout.rollout_id)
    rid = rollout.rollout_id
    assert await store.add_span(make_span(rid, rollout.attempt.attempt_id, 1, span_id="same")) is not None
    assert await store.add_span(make_span(rid, second.attempt.attempt_id, 2, span_id="same")) is not None
    assert (await store.query_spans(rid)).total == 2


async def test_add_span_round_trips_all_fields(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    base = make_span(
        rid,
        aid,
        7,
        span_id="0123456789abcdef",
        trace_id="0123456789abcdef0123456789abcdef",
        parent_id="fedcba9876543210",
        name="llm.call",
        attributes={"str": "v", "int": 1, "float": 1.5, "bool": True, "list": ["a", "b"]},
        start_time=1_700_000_000.25,
        end_time=1_700_000_001.5,
    )
    span = Span.model_validate({**base.model_dump(), "custom_extra": {"kept": [1, 2]}})
    await store.add_span(span)
    stored = await store.query_spans(rid)
    assert len(stored) == 1
    assert stored[0].model_dump(mode="json") == span.model_dump(mode="json")
    assert stored[0].model_dump()["custom_extra"] == {"kept": [1, 2]}


async def test_add_otel_span_converts_readable_span(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    otel = make_otel_span("agent.step", attributes={"answer": 42, "tags": ["a", "b"]})
    span = await store.add_otel_span(rid, aid, otel)
    assert isinstance(span, Span)
    assert span.rollout_id == rid and span.attempt_id == aid
    assert span.sequence_id == 1
    assert span.name == "agent.step"
    assert span.trace_id == format_trace_id(otel.context.trace_id)
    assert span.span_id == format_span_id(otel.context.span_id)
    assert len(span.trace_id) == 32 and len(span.span_id) == 16
    assert span.parent_id is None
    assert span.attributes["answer"] == 42
    assert list(span.attributes["tags"]) == ["a", "b"]
    assert span.start_time == pytest.approx(otel.start_time / 1e9)
    assert span.end_time == pytest.approx(otel.end_time / 1e9)
    stored = await store.query_spans(rid)
    assert [s.span_id for s in stored] == [span.span_id]
    assert stored[0].model_dump(mode="json") == span.model_dump(mode="json")


async def test_duplicate_otel_span_returns_none_and_logs(
    store: Any, traits: BackendTraits, caplog: pytest.LogCaptureFixture
) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    otel = make_otel_span()
    assert await store.add_otel_span(rid, aid, otel) is not None
    with caplog.at_level(logging.DEBUG):
        assert await store.add_otel_span(rid, aid, otel) is None
    if traits.in_process_logs:
        assert "Duplicated span added" in caplog.text
    assert (await store.query_spans(rid)).total == 1


async def test_add_many_spans_across_rollouts_with_in_batch_duplicate(store: Any) -> None:
    first = await store.start_rollout(input="one")
    second_attempt = await store.start_attempt(first.rollout_id)
    other = await store.start_rollout(input="two")
    r1, a1, a2 = first.rollout_id, first.attempt.attempt_id, second_attempt.attempt.attempt_id
    r2, b1 = other.rollout_id, other.attempt.attempt_id
    spans = [
        make_span(r1, a1, 1, span_id="x"),
        make_span(r1, a2, 2, span_id="y"),
        make_span(r2, b1, 1, span_id="z"),
        make_span(r1, a1, 3, span_id="x"),
    ]
    result = await store.add_many_spans(spans)
    assert [(s.rollout_id, s.attempt_id, s.span_id, s.sequence_id) for s in result] == [
        (r1, a1, "x", 1),
        (r1, a2, "y", 2),
        (r2, b1, "z", 1),
    ]
    assert sorted(s.span_id for s in await store.query_spans(r1)) == ["x", "y"]
    assert [s.span_id for s in await store.query_spans(r2)] == ["z"]
    assert [s.span_id for s in await store.query_spans(r1, a2)] == ["y"]
    # Counters were raised to the maximum sequence id per rollout.
    assert await store.get_next_span_sequence_id(r1, a1) == 4
    assert await store.get_next_span_sequence_id(r2, b1) == 2


async def test_add_many_spans_returns_exactly_new_spans(store: Any) -> None:
    """Reference quirk fixed: a span that already existed is not reported, every newly stored one is."""
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.add_span(make_span(rid, aid, 1, span_id="old"))
    batch = [
        make_span(rid, aid, 2, span_id="new-1"),
        make_span(rid, aid, 3, span_id="old"),
        make_span(rid, aid, 4, span_id="new-2"),
    ]
    result = await store.add_many_spans(batch)
    assert [s.span_id for s in result] == ["new-1", "new-2"]
    stored = {s.span_id: s.sequence_id for s in await store.query_spans(rid)}
    assert stored == {"old": 1, "new-1": 2, "new-2": 4}
    assert list(await store.add_many_spans([make_span(rid, aid, 9, span_id="old")])) == []
    assert list(await store.add_many_spans([])) == []


async def test_add_many_spans_runs_heartbeat_per_group(store: Any) -> None:
    first = await store.start_rollout(input="one")
    second = await store.start_rollout(input="two")
    await store.add_many_spans(
        [
            make_span(first.rollout_id, first.attempt.attempt_id, 1),
            make_span(second.rollout_id, second.attempt.attempt_id, 1),
        ]
    )
    for rollout in (first, second):
        attempt = await store.get_latest_attempt(rollout.rollout_id)
        assert attempt.status == "running"
        assert attempt.last_heartbeat_time is not None
        assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "running"


async def test_add_many_spans_unknown_rollout_aborts_remaining_groups(store: Any, traits: BackendTraits) -> None:
    first = await store.start_rollout(input="one")
    third = await store.start_rollout(input="three")
    spans = [
        make_span(first.rollout_id, first.attempt.attempt_id, 1, span_id="kept"),
        make_span("nonexistent", "at-none", 1, span_id="bad"),
        make_span(third.rollout_id, third.attempt.attempt_id, 1, span_id="never"),
    ]
    with traits.raises(ValueError, match="Rollout nonexistent not found"):
        await store.add_many_spans(spans)
    assert [s.span_id for s in await store.query_spans(first.rollout_id)] == ["kept"]
    assert list(await store.query_spans(third.rollout_id)) == []


async def test_add_many_spans_assigning_ids(store: Any) -> None:
    """rollouthub extension (how OTLP exports are ingested): flagged spans get fresh ids, the others keep theirs."""
    first = await store.start_rollout(input="one")
    other = await store.start_rollout(input="two")
    r1, a1 = first.rollout_id, first.attempt.attempt_id
    r2, b1 = other.rollout_id, other.attempt.attempt_id
    assert await store.get_next_span_sequence_id(r1, a1) == 1
    spans = [
        make_span(r1, a1, 0, span_id="a"),
        make_span(r2, b1, 0, span_id="b"),
        make_span(r1, a1, 7, span_id="c"),
        make_span(r1, a1, 0, span_id="d"),
    ]
    stored = await store.add_many_spans_assigning_ids(spans, [True, True, False, True])
    assert [(s.span_id, s.sequence_id) for s in stored] == [("a", 2), ("c", 7), ("d", 3), ("b", 1)]
    assert {s.span_id: s.sequence_id for s in await store.query_spans(r1)} == {"a": 2, "c": 7, "d": 3}
    assert [s.sequence_id for s in await store.query_spans(r2)] == [1]
    assert await store.get_next_span_sequence_id(r1, a1) == 8  # raised past the provided id
    assert await store.get_next_span_sequence_id(r2, b1) == 2
    assert (await store.get_latest_attempt(r1)).status == "running"
    assert list(await store.add_many_spans_assigning_ids([], [])) == []
    with pytest.raises(ValueError, match="1 flags for 2 spans"):
        await store.add_many_spans_assigning_ids([make_span(r1, a1, 0), make_span(r1, a1, 0)], [True])


async def test_add_many_spans_assigning_ids_across_attempts_keeps_input_order(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    retry = await store.start_attempt(rollout.rollout_id)
    rid, a1, a2 = rollout.rollout_id, rollout.attempt.attempt_id, retry.attempt.attempt_id
    spans = [make_span(rid, a1, 0, span_id="p"), make_span(rid, a2, 0, span_id="q"), make_span(rid, a1, 0, span_id="r")]
    await store.add_many_spans_assigning_ids(spans, [True, True, True])
    assert {s.span_id: s.sequence_id for s in await store.query_spans(rid)} == {"p": 1, "q": 2, "r": 3}


async def test_add_many_spans_assigning_ids_skips_duplicates_and_rejects_unknown(
    store: Any, traits: BackendTraits
) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.add_span(make_span(rid, aid, 1, span_id="old"))
    stored = await store.add_many_spans_assigning_ids(
        [make_span(rid, aid, 0, span_id="new"), make_span(rid, aid, 0, span_id="old")], [True, True]
    )
    assert [s.span_id for s in stored] == ["new"]
    ids = {s.span_id: s.sequence_id for s in await store.query_spans(rid)}
    assert ids["old"] == 1 and ids["new"] > 1
    assert await store.get_next_span_sequence_id(rid, aid) > ids["new"]
    with traits.raises(ValueError, match="Rollout nonexistent not found"):
        await store.add_many_spans_assigning_ids([make_span("nonexistent", "at-none", 0)], [True])
    assert (await store.query_spans(rid)).total == 2


def _varied_spans(rid: str, aid: str) -> list[Span]:
    """Spans exercising every stored shape: scalars of each type, lists, unicode, events, links, a parent context,
    missing times and an extra (unknown) field."""
    rich = make_span(
        rid,
        aid,
        1,
        span_id="rich",
        name='llm \u00e9\u4e2d \U0001f600 "quoted" \\ back',
        attributes={
            "s": "text \n\t\u2028 \u00fc",
            "i": 7,
            "f": 1764690000.1234567,
            "tiny": 1e-300,
            "b": True,
            "ls": ["a", "b"],
            "lf": [0.1, 2.5],
            "li": [1, 2, 3],
            "empty": "",
        },
        start_time=1764690000.25,
        end_time=1764690001.0,
    )
    data = rich.model_dump()
    data["events"] = [{"name": "ev", "attributes": {"k": "v", "n": 1.5}, "timestamp": 1764690000.5}]
    data["links"] = [
        {
            "context": {"trace_id": "ab" * 16, "span_id": "cd" * 8, "is_remote": True, "trace_state": {"x": "y"}},
            "attributes": None,
        }
    ]
    data["parent"] = {"trace_id": "ef" * 16, "span_id": "01" * 8, "is_remote": False, "trace_state": {}}
    data["parent_id"] = "01" * 8
    data["custom_extra"] = {"nested": [1, "two", None]}
    rich = Span.model_validate(data)
    bare = make_span(rid, aid, 2, span_id="bare", name="bare")
    return [rich, bare]


async def test_query_spans_json_equals_the_serialized_query(store: Any) -> None:
    """rollouthub extension: ``query_spans_json`` is exactly the JSON the REST API sends for ``query_spans``."""
    from rollouthub.store.base import paginated_json

    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.add_many_spans(_varied_spans(rid, aid))
    await store.add_span(make_span(rid, aid, 3, span_id="third", name="tool", attributes={"k": 1}))
    queries: list[dict[str, Any]] = [
        {},
        {"attempt_id": "latest"},
        {"attempt_id": aid, "name_contains": "bar", "span_id": "rich", "filter_logic": "or"},
        {"sort_by": "start_time", "sort_order": "desc", "limit": 2, "offset": 1},
        {"limit": 1},
        {"attempt_id": "at-missing"},
    ]
    for kwargs in queries:
        expected = json.loads(paginated_json(await store.query_spans(rid, **kwargs)))
        assert json.loads(await store.query_spans_json(rid, **kwargs)) == expected, kwargs
    unknown = json.loads(await store.query_spans_json("ro-unknown", attempt_id="latest"))
    assert unknown == {"items": [], "limit": -1, "offset": 0, "total": 0}


async def test_query_spans_json_is_byte_identical_to_the_model_path(store: Any, traits: BackendTraits) -> None:
    """The spliced page equals the serialized models byte for byte (PostgreSQL: in content, as JSONB reformats the
    stored JSON) -- including values the models serialize as ``null``."""
    from rollouthub.store.base import paginated_json

    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    spans = _varied_spans(rid, aid)
    # Non-finite floats: JSONB rejects them, and over HTTP they arrive as null, which the span model rejects.
    if traits.name not in ("http", "postgres", "postgres_plain"):
        spans.append(make_span(rid, aid, 9, span_id="inf", attributes={"x": float("inf"), "y": float("nan")}))
    await store.add_many_spans(spans)
    spliced, serialized = await store.query_spans_json(rid), paginated_json(await store.query_spans(rid))
    if traits.name.startswith("postgres"):  # JSONB reformats the stored JSON: equal content, different bytes
        assert json.loads(spliced) == json.loads(serialized)
    else:
        assert spliced == serialized


async def test_span_insert_errors(store: Any, traits: BackendTraits) -> None:
    rollout = await store.start_rollout(input="x")
    rid = rollout.rollout_id
    with traits.raises(ValueError, match="^Rollout nonexistent not found$"):
        await store.add_otel_span("nonexistent", "at-x", make_otel_span())
    with traits.raises(ValueError, match="^Rollout nonexistent not found$"):
        await store.add_span(make_span("nonexistent", "at-x", 1))
    with traits.raises(ValueError, match=f"^Attempt attempt-missing not found for rollout {rid}$"):
        await store.add_span(make_span(rid, "attempt-missing", 1))
    with traits.raises(ValueError, match=f"^Attempt attempt-missing not found for rollout {rid}$"):
        await store.add_otel_span(rid, "attempt-missing", make_otel_span())
    with traits.raises(ValueError, match=f"^Attempt attempt-missing not found for rollout {rid}$"):
        await store.add_many_spans([make_span(rid, "attempt-missing", 1)])
    assert list(await store.query_spans(rid)) == []
    attempt = await store.get_latest_attempt(rid)
    assert attempt.status == "preparing"


# ---------------------------------------------------------------------------------------------------------------------
# Heartbeats
# ---------------------------------------------------------------------------------------------------------------------


async def test_first_span_marks_attempt_and_rollout_running(
    fake_clock: FakeClock, store: Any, traits: BackendTraits
) -> None:
    traits.require("in_process_clock")
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    assert rollout.attempt.last_heartbeat_time is None

    fake_clock.advance(2.0)
    await store.add_span(make_span(rid, aid, 1))
    attempt = await store.get_latest_attempt(rid)
    assert attempt.status == "running"
    assert attempt.last_heartbeat_time == fake_clock.now
    assert (await store.get_rollout_by_id(rid)).status == "running"

    fake_clock.advance(3.0)
    await store.add_otel_span(rid, aid, make_otel_span())
    attempt = await store.get_latest_attempt(rid)
    assert attempt.last_heartbeat_time == fake_clock.now
    assert attempt.status == "running"


async def test_span_of_an_older_attempt_does_not_promote_the_rollout(store: Any) -> None:
    """Only the latest attempt's spans move a ``preparing`` rollout to ``running``: a late span of the attempt
    that failed before the retry revives nothing on the rollout, whose new attempt has not reported yet."""
    rollout = await store.enqueue_rollout(input="x", config=RolloutConfig(max_attempts=2, retry_condition=["failed"]))
    first = await store.dequeue_rollout()
    assert first is not None
    await store.update_attempt(rollout.rollout_id, first.attempt.attempt_id, status="failed")
    second = await store.dequeue_rollout()
    assert second is not None and second.attempt.sequence_id == 2
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "preparing"

    await store.add_span(make_span(rollout.rollout_id, first.attempt.attempt_id, 1))
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "preparing"
    assert (await store.get_latest_attempt(rollout.rollout_id)).status == "preparing"

    await store.add_many_spans([make_span(rollout.rollout_id, second.attempt.attempt_id, 2)])
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "running"
    assert (await store.get_latest_attempt(rollout.rollout_id)).status == "running"


async def test_heartbeat_time_is_current(store: Any) -> None:
    rollout = await store.enqueue_rollout(input="x")
    claimed = await store.dequeue_rollout()
    before = time.time()
    await store.add_span(make_span(rollout.rollout_id, claimed.attempt.attempt_id, 1))
    after = time.time()
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt.status == "running"
    assert before <= attempt.last_heartbeat_time <= after
    assert attempt.end_time is None
    rollout_now = await store.get_rollout_by_id(rollout.rollout_id)
    assert rollout_now.status == "running"
    assert rollout_now.end_time is None


async def test_span_revives_unresponsive_attempt(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.update_attempt(rid, aid, status="unresponsive")
    assert (await store.get_rollout_by_id(rid)).status == "failed"
    await store.add_span(make_span(rid, aid, 1))
    attempt = await store.get_latest_attempt(rid)
    assert attempt.status == "running"
    assert attempt.last_heartbeat_time is not None
    # The rollout is failed (not preparing/requeuing), so the heartbeat leaves it alone.
    assert (await store.get_rollout_by_id(rid)).status == "failed"


@pytest.mark.parametrize("final_status", ["timeout", "failed", "succeeded"])
async def test_span_does_not_change_finished_attempt(store: Any, final_status: str) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.update_attempt(rid, aid, status=final_status)
    rollout_before = await store.get_rollout_by_id(rid)
    await store.add_span(make_span(rid, aid, 1))
    attempt = await store.get_latest_attempt(rid)
    assert attempt.status == final_status
    assert attempt.last_heartbeat_time is not None
    rollout_after = await store.get_rollout_by_id(rid)
    assert rollout_after.status == rollout_before.status
    assert rollout_after.end_time == rollout_before.end_time


async def test_span_on_queuing_rollout_keeps_rollout_queuing(store: Any) -> None:
    """Reference quirk kept: only preparing/requeuing rollouts are promoted by a heartbeat."""
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.update_rollout(rid, status="queuing")
    await store.add_span(make_span(rid, aid, 1))
    assert (await store.get_latest_attempt(rid)).status == "running"
    assert (await store.get_rollout_by_id(rid)).status == "queuing"


async def test_span_on_requeuing_rollout_promotes_it(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.update_rollout(rid, status="requeuing")
    await store.add_span(make_span(rid, aid, 1))
    assert (await store.get_rollout_by_id(rid)).status == "running"
    assert await store.dequeue_rollout() is None


async def test_span_on_older_attempt_does_not_touch_rollout(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid, old_aid = rollout.rollout_id, rollout.attempt.attempt_id
    newest = await store.start_attempt(rid)
    await store.add_span(make_span(rid, old_aid, 1))
    old = (await store.query_attempts(rid))[0]
    assert old.attempt_id == old_aid
    assert old.status == "running"
    assert old.last_heartbeat_time is not None
    latest = await store.get_latest_attempt(rid)
    assert latest.attempt_id == newest.attempt.attempt_id
    assert latest.status == "preparing"
    assert latest.last_heartbeat_time is None
    assert (await store.get_rollout_by_id(rid)).status == "preparing"


async def test_heartbeat_preserves_concurrent_metadata_update(
    store: Any, traits: BackendTraits, monkeypatch: pytest.MonkeyPatch
) -> None:
    traits.require("collection_based")
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    original = store._post_add_spans
    calls: list[tuple[Any, ...]] = []

    async def between_insert_and_heartbeat(spans: Any, rollout_id: str, attempt_id: str) -> Any:
        calls.append((rollout_id, attempt_id))
        await store.update_attempt(rollout_id, attempt_id, metadata={"note": "kept"})
        return await original(spans, rollout_id, attempt_id)

    monkeypatch.setattr(store, "_post_add_spans", between_insert_and_heartbeat)
    await asyncio.wait_for(store.add_span(make_span(rid, aid, 1)), timeout=10)
    assert calls == [(rid, aid)]
    attempt = await store.get_latest_attempt(rid)
    assert attempt.metadata == {"note": "kept"}
    assert attempt.status == "running"
    assert attempt.last_heartbeat_time is not None


# ---------------------------------------------------------------------------------------------------------------------
# query_spans
# ---------------------------------------------------------------------------------------------------------------------


async def test_query_spans_by_attempt_scope(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid, a1 = rollout.rollout_id, rollout.attempt.attempt_id
    a2 = (await store.start_attempt(rid)).attempt.attempt_id
    other = await store.start_rollout(input="other")
    await store.add_span(make_span(other.rollout_id, other.attempt.attempt_id, 1, span_id="foreign"))

    # Insert in scrambled sequence order to observe the default sort.
    for attempt_id, seq, sid in [(a2, 5, "a2-c"), (a1, 2, "a1-b"), (a2, 3, "a2-a"), (a1, 1, "a1-a"), (a2, 4, "a2-b")]:
        await store.add_span(make_span(rid, attempt_id, seq, span_id=sid))

    everything = await store.query_spans(rid)
    assert isinstance(everything, PaginatedResult)
    assert [s.span_id for s in everything] == ["a1-a", "a1-b", "a2-a", "a2-b", "a2-c"]
    assert everything.total == 5 and everything.limit == -1 and everything.offset == 0

    first = await store.query_spans(rid, a1)
    assert [s.span_id for s in first] == ["a1-a", "a1-b"]
    latest = await store.query_spans(rid, "latest")
    assert [s.span_id for s in latest] == ["a2-a", "a2-b", "a2-c"]
    assert all(s.attempt_id == a2 for s in latest)
    unknown_attempt = await store.query_spans(rid, "at-unknown")
    assert list(unknown_attempt) == [] and unknown_attempt.total == 0

    desc = await store.query_spans(rid, sort_order="desc")
    assert [s.sequence_id for s in desc] == [5, 4, 3, 2, 1]


async def test_query_spans_unknown_rollout_is_empty(store: Any) -> None:
    for attempt_id in (None, "at-any", "latest"):
        result = await store.query_spans("ro-unknown", attempt_id)
        assert list(result) == [] and result.total == 0


async def test_query_spans_latest_without_attempts(store: Any) -> None:
    queued = await store.enqueue_rollout(input="q")
    result = await store.query_spans(queued.rollout_id, "latest", limit=5, offset=2)
    assert list(result) == []
    assert result.total == 0
    assert result.limit == 5
    assert result.offset == 2
    started = await store.start_rollout(input="s")
    assert list(await store.query_spans(started.rollout_id, "latest")) == []


async def _filter_fixture(store: Any) -> tuple[str, str, str]:
    rollout = await store.start_rollout(input="filters")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    specs = [
        ("trace-alpha", "span-001", None, "llm.call", 1.0),
        ("trace-alpha", "span-002", "span-001", "tool.search", 2.0),
        ("trace-beta", "span-003", "span-001", "llm.call", 3.0),
        ("trace-gamma", "span-004", "span-003", "reward", 4.0),
    ]
    for seq, (trace_id, span_id, parent_id, name, start) in enumerate(specs, start=1):
        await store.add_span(
            make_span(
                rid,
                aid,
                seq,
                trace_id=trace_id,
                span_id=span_id,
                parent_id=parent_id,
                name=name,
                start_time=1_000.0 + start,
                end_time=1_000.5 + start,
            )
        )
    other = await store.start_rollout(input="other")
    await store.add_span(
        make_span(
            other.rollout_id, other.attempt.attempt_id, 1, trace_id="trace-alpha", span_id="span-005", name="llm.call"
        )
    )
    return rid, aid, other.rollout_id


def _span_ids(result: Any) -> list[str]:
    return [s.span_id for s in result]


async def test_query_spans_exact_filters(store: Any) -> None:
    rid, _, _ = await _filter_fixture(store)
    assert _span_ids(await store.query_spans(rid, trace_id="trace-alpha")) == ["span-001", "span-002"]
    assert _span_ids(await store.query_spans(rid, span_id="span-003")) == ["span-003"]
    assert _span_ids(await store.query_spans(rid, parent_id="span-003")) == ["span-004"]
    assert _span_ids(await store.query_spans(rid, name="llm.call")) == ["span-001", "span-003"]
    assert _span_ids(await store.query_spans(rid, name="llm")) == []


async def test_query_spans_contains_filters(store: Any) -> None:
    rid, _, _ = await _filter_fixture(store)
    assert _span_ids(await store.query_spans(rid, parent_id_contains="001")) == ["span-002", "span-003"]
    assert _span_ids(await store.query_spans(rid, trace_id_contains="gam")) == ["span-004"]
    assert _span_ids(await store.query_spans(rid, span_id_contains="00")) == [
        "span-001",
        "span-002",
        "span-003",
        "span-004",
    ]
    assert _span_ids(await store.query_spans(rid, name_contains="search")) == ["span-002"]


async def test_query_spans_or_combines_conditions(store: Any) -> None:
    rid, _, _ = await _filter_fixture(store)
    result = await store.query_spans(rid, span_id="span-004", trace_id_contains="beta", filter_logic="or")
    assert _span_ids(result) == ["span-003", "span-004"]
    anded = await store.query_spans(rid, span_id="span-004", trace_id_contains="beta")
    assert list(anded) == []


async def test_query_spans_or_never_leaks_other_rollouts(store: Any) -> None:
    rid, aid, other = await _filter_fixture(store)
    result = await store.query_spans(rid, trace_id="trace-alpha", name="llm.call", filter_logic="or")
    assert _span_ids(result) == ["span-001", "span-002", "span-003"]
    assert all(s.rollout_id == rid for s in result)
    other_result = await store.query_spans(other, trace_id="trace-alpha", filter_logic="or")
    assert _span_ids(other_result) == ["span-005"]


async def test_query_spans_or_without_filters_returns_whole_scope(store: Any) -> None:
    """Reference quirk fixed: no optional condition means "match everything" for both logics."""
    rid, aid, other = await _filter_fixture(store)
    ored = await store.query_spans(rid, filter_logic="or")
    assert _span_ids(ored) == ["span-001", "span-002", "span-003", "span-004"]
    assert ored.total == 4
    assert _span_ids(await store.query_spans(rid, aid, filter_logic="or")) == _span_ids(ored)
    assert _span_ids(await store.query_spans(rid, "latest", filter_logic="or")) == _span_ids(ored)
    assert _span_ids(await store.query_spans(other, filter_logic="or")) == ["span-005"]
    assert _span_ids(await store.query_spans(rid, filter_logic="and")) == _span_ids(ored)


async def test_query_spans_sort_and_pagination(store: Any) -> None:
    rid, _, _ = await _filter_fixture(store)
    desc = await store.query_spans(rid, sort_by="span_id", sort_order="desc", offset=1)
    assert _span_ids(desc) == ["span-003", "span-002", "span-001"]
    assert desc.total == 4 and desc.offset == 1

    by_start = await store.query_spans(rid, sort_by="start_time", sort_order="desc")
    assert _span_ids(by_start) == ["span-004", "span-003", "span-002", "span-001"]

    paged = await store.query_spans(rid, name_contains="llm", limit=1)
    assert _span_ids(paged) == ["span-001"] and paged.total == 2
    paged = await store.query_spans(rid, name_contains="llm", limit=1, offset=1)
    assert _span_ids(paged) == ["span-003"] and paged.total == 2

    picked = await store.query_spans(
        rid,
        name="reward",
        span_id_contains="002",
        filter_logic="or",
        sort_by="span_id",
        sort_order="desc",
        limit=1,
        offset=1,
    )
    assert _span_ids(picked) == ["span-002"]
    assert picked.total == 2 and picked.limit == 1 and picked.offset == 1

    zero = await store.query_spans(rid, limit=0)
    assert list(zero) == [] and zero.total == 4


async def test_query_spans_and_narrows_to_one(store: Any) -> None:
    rid, _, _ = await _filter_fixture(store)
    result = await store.query_spans(
        rid, trace_id_contains="alpha", parent_id="span-001", name="tool.search", span_id_contains="2"
    )
    assert _span_ids(result) == ["span-002"]
    assert result.total == 1


async def test_query_spans_null_parent_sort_order(store: Any) -> None:
    rid, _, _ = await _filter_fixture(store)
    asc = await store.query_spans(rid, sort_by="parent_id", sort_order="asc")
    assert asc[0].span_id == "span-001" and asc[0].parent_id is None
    assert [s.parent_id for s in asc][1:] == ["span-001", "span-001", "span-003"]
    desc = await store.query_spans(rid, sort_by="parent_id", sort_order="desc")
    assert desc[-1].span_id == "span-001"
    assert [s.parent_id for s in desc][:3] == ["span-003", "span-001", "span-001"]


async def test_spans_preserve_per_attempt_identity(store: Any) -> None:
    rollout = await store.start_rollout(input="x")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    created = [await store.add_otel_span(rid, aid, make_otel_span(f"s{i}")) for i in range(3)]
    stored = await store.query_spans(rid, aid)
    assert [s.model_dump(mode="json") for s in stored] == [s.model_dump(mode="json") for s in created]
    assert [s.name for s in stored] == ["s0", "s1", "s2"]
    assert [s.sequence_id for s in stored] == [1, 2, 3]
