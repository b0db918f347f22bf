"""Attribute utilities."""

from __future__ import annotations

import json
import logging
from typing import Any, Dict, Iterator

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollouthub.semconv import LinkPydanticModel
from rollouthub.types.tracer import Span
from rollouthub.utils import otel
from rollouthub.utils.otel import (
    check_attributes_sanity,
    extract_links_from_attributes,
    extract_tags_from_attributes,
    filter_and_unflatten_attributes,
    filter_attributes,
    flatten_attributes,
    format_exception_attributes,
    full_qualified_name,
    get_span_processors,
    get_tracer,
    get_tracer_provider,
    make_link_attributes,
    make_tag_attributes,
    query_linked_spans,
    sanitize_attribute_value,
    sanitize_attributes,
    sanitize_list_attribute_sanity,
    unflatten_attributes,
)

# ---------------------------------------------------------------------------------------------------------------
# flatten / unflatten / filter
# ---------------------------------------------------------------------------------------------------------------


def test_flatten_nested_dicts_and_lists() -> None:
    nested = {"a": {"b": 1, "c": [1, 2]}, "d": [{"e": "x"}, {"f": None}], "g": "s"}
    assert flatten_attributes(nested) == {"a.b": 1, "a.c": [1, 2], "d.0.e": "x", "d.1.f": None, "g": "s"}


def test_flatten_expand_leaf_lists() -> None:
    assert flatten_attributes({"a": [1, 2]}, expand_leaf_lists=True) == {"a.0": 1, "a.1": 2}


def test_flatten_top_level_list_is_expanded() -> None:
    assert flatten_attributes(["x", "y"]) == {"0": "x", "1": "y"}


def test_flatten_mixed_primitive_list_expanded_with_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rollouthub.utils.otel"):
        assert flatten_attributes({"a": [1, "x", True]}) == {"a.0": 1, "a.1": "x", "a.2": True}
    assert any("mixed" in record.message for record in caplog.records)


def test_flatten_bool_and_int_are_different_primitive_types() -> None:
    assert flatten_attributes({"a": [1, True]}) == {"a.0": 1, "a.1": True}


def test_flatten_empty_containers_produce_no_key() -> None:
    assert flatten_attributes({"a": [], "b": {}, "c": {"d": []}, "e": 0}) == {"e": 0}


def test_flatten_rejects_non_string_keys() -> None:
    with pytest.raises(ValueError):
        flatten_attributes({"a": {1: "x"}})  # type: ignore[dict-item]


def test_unflatten_builds_lists_for_contiguous_indices() -> None:
    flat = {"a.0.b": 1, "a.1.b": 2, "c.x": "y", "d.0": "p", "d.2": "q", "e.1": 1, "e.0": 0}
    assert unflatten_attributes(flat) == {
        "a": [{"b": 1}, {"b": 2}],
        "c": {"x": "y"},
        "d": {"0": "p", "2": "q"},
        "e": [0, 1],
    }


def test_unflatten_top_level_list() -> None:
    assert unflatten_attributes({"0.name": "a", "1.name": "b"}) == [{"name": "a"}, {"name": "b"}]


def test_unflatten_conflicts_raise() -> None:
    with pytest.raises(ValueError):
        unflatten_attributes({"a": 1, "a.b": 2})
    with pytest.raises(ValueError):
        unflatten_attributes({"a.b": 2, "a": 1})


def test_flatten_unflatten_roundtrip() -> None:
    nested: Dict[str, Any] = {"msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "ids": [1, 2]}]}
    assert unflatten_attributes(flatten_attributes(nested)) == nested


def test_filter_attributes() -> None:
    attrs = {"a": 1, "a.b": 2, "ab": 3, "a.c.d": 4, "b.a": 5}
    assert filter_attributes(attrs, "a") == {"a": 1, "a.b": 2, "a.c.d": 4}


def test_filter_and_unflatten() -> None:
    attrs = {"p.0.x": 1, "p.1.x": 2, "q": 3}
    assert filter_and_unflatten_attributes(attrs, "p") == [{"x": 1}, {"x": 2}]
    assert filter_and_unflatten_attributes(attrs, "missing") == {}
    with pytest.raises(ValueError):
        filter_and_unflatten_attributes({"p": 1, "p.x": 2}, "p")


# ---------------------------------------------------------------------------------------------------------------
# Sanitising and validation
# ---------------------------------------------------------------------------------------------------------------


class Opaque:
    def __str__(self) -> str:
        return "opaque!"


@pytest.mark.parametrize(
    "value, expected",
    [
        ("s", "s"),
        (1, 1),
        (1.5, 1.5),
        (True, True),
        (["a", "b"], ["a", "b"]),
        ([True, False], [True, False]),
        ([1, True], [1, 1]),
        ([1, 2.5], [1.0, 2.5]),
        ([1, True, 2.5], [1.0, 1.0, 2.5]),
        ((1, 2), [1, 2]),
        (None, "null"),
        ({"a": 1}, json.dumps({"a": 1})),
        (Opaque(), json.dumps("opaque!")),
    ],
)
def test_sanitize_attribute_value(value: Any, expected: Any) -> None:
    result = sanitize_attribute_value(value)
    assert result == expected
    assert type(result) is type(expected)


def test_sanitize_heterogeneous_list_falls_back_to_json(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rollouthub.utils.otel"):
        assert sanitize_attribute_value([1, "a"]) == json.dumps([1, "a"])
    assert caplog.records


def test_sanitize_without_force_rejects_unserialisable() -> None:
    with pytest.raises(ValueError):
        sanitize_attribute_value(Opaque(), force=False)
    assert sanitize_attribute_value({"a": 1}, force=False) == '{"a": 1}'


def test_sanitize_attributes_error_names_key() -> None:
    assert sanitize_attributes({"a": None, "b": [1, 2]}) == {"a": "null", "b": [1, 2]}
    with pytest.raises(ValueError, match="bad_key"):
        sanitize_attributes({"bad_key": Opaque()}, force=False)


def test_sanitize_list_attribute_sanity() -> None:
    assert sanitize_list_attribute_sanity([1, True]) == [1, 1]
    assert sanitize_list_attribute_sanity([0.5, 1]) == [0.5, 1.0]
    with pytest.raises(ValueError):
        sanitize_list_attribute_sanity(["a", 1])
    with pytest.raises(ValueError):
        sanitize_list_attribute_sanity([{"a": 1}])


def test_check_attributes_sanity() -> None:
    check_attributes_sanity({"a": "s", "b": 1, "c": 1.5, "d": True, "e": [1, 2], "f": ["x"]})
    for bad in ({"a": None}, {"a": {"b": 1}}, {"a": ["x", 1]}, {"a": Opaque()}, {1: "x"}):
        with pytest.raises(ValueError):
            check_attributes_sanity(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# Tags and links
# ---------------------------------------------------------------------------------------------------------------


def test_tags_roundtrip() -> None:
    attrs = make_tag_attributes(["a", "b", "c"])
    assert attrs == {"agentlightning.tag.0": "a", "agentlightning.tag.1": "b", "agentlightning.tag.2": "c"}
    assert extract_tags_from_attributes({**attrs, "other": 1}) == ["a", "b", "c"]
    assert extract_tags_from_attributes({}) == []
    assert make_tag_attributes(["only"]) == {"agentlightning.tag.0": "only"}


def test_links_roundtrip() -> None:
    attrs = make_link_attributes({"trace_id": "abc", "gen_ai.response.id": "r1"})
    assert attrs == {
        "agentlightning.link.0.key_match": "trace_id",
        "agentlightning.link.0.value_match": "abc",
        "agentlightning.link.1.key_match": "gen_ai.response.id",
        "agentlightning.link.1.value_match": "r1",
    }
    assert extract_links_from_attributes(attrs) == [
        LinkPydanticModel(key_match="trace_id", value_match="abc"),
        LinkPydanticModel(key_match="gen_ai.response.id", value_match="r1"),
    ]
    assert extract_links_from_attributes({}) == []


def test_make_link_attributes_rejects_non_strings() -> None:
    with pytest.raises(ValueError):
        make_link_attributes({"key": 1})  # type: ignore[dict-item]


def test_query_linked_spans_with_stored_and_sdk_spans() -> None:
    stored = [
        Span.from_attributes(attributes={"gen_ai.response.id": "r1", "kind": "llm"}, span_id="00000000000000a1"),
        Span.from_attributes(attributes={"gen_ai.response.id": "r2", "kind": "llm"}, span_id="00000000000000a2"),
    ]
    links = [LinkPydanticModel(key_match="gen_ai.response.id", value_match="r2")]
    assert query_linked_spans(stored, links) == [stored[1]]
    both = links + [LinkPydanticModel(key_match="span_id", value_match="00000000000000a2")]
    assert query_linked_spans(stored, both) == [stored[1]]
    mismatch = links + [LinkPydanticModel(key_match="span_id", value_match="00000000000000a1")]
    assert query_linked_spans(stored, mismatch) == []
    assert query_linked_spans(stored, []) == stored

    provider = TracerProvider()
    sdk_span = provider.get_tracer("t").start_span("x", attributes={"k": "v"})
    sdk_span.end()
    trace_hex = format(sdk_span.get_span_context().trace_id, "032x")
    span_hex = format(sdk_span.get_span_context().span_id, "016x")
    sdk_links = [
        LinkPydanticModel(key_match="trace_id", value_match=trace_hex),
        LinkPydanticModel(key_match="span_id", value_match=span_hex),
        LinkPydanticModel(key_match="k", value_match="v"),
    ]
    assert query_linked_spans([sdk_span], sdk_links) == [sdk_span]
    assert query_linked_spans([sdk_span], [LinkPydanticModel(key_match="k", value_match="w")]) == []


# ---------------------------------------------------------------------------------------------------------------
# Misc helpers
# ---------------------------------------------------------------------------------------------------------------


def _fail() -> None:
    raise ValueError("broken thing")


def test_format_exception_attributes() -> None:
    try:
        _fail()
    except ValueError as exc:
        attrs = format_exception_attributes(exc)
    assert attrs["exception.type"] == "ValueError"
    assert attrs["exception.message"] == "broken thing"
    assert attrs["exception.escaped"] is True
    assert "_fail" in attrs["exception.stacktrace"]


def test_full_qualified_name() -> None:
    class Inner:
        pass

    assert full_qualified_name(int) == "int"
    assert full_qualified_name(Span) == "rollouthub.types.tracer.Span"
    assert full_qualified_name(Inner) == f"{__name__}.test_full_qualified_name.<locals>.Inner"


# ---------------------------------------------------------------------------------------------------------------
# Tracer provider access
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def sdk_provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace_api, "get_tracer_provider", lambda: provider)
    yield provider, exporter
    provider.shutdown()


def test_get_tracer_provider_requires_a_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_api, "get_tracer_provider", lambda: trace_api.ProxyTracerProvider())
    with pytest.raises(RuntimeError):
        get_tracer_provider()


def test_get_tracer_provider_logs_non_sdk_provider(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    foreign = trace_api.NoOpTracerProvider()
    monkeypatch.setattr(trace_api, "get_tracer_provider", lambda: foreign)
    with caplog.at_level(logging.ERROR, logger="rollouthub.utils.otel"):
        assert get_tracer_provider() is foreign
    assert any("not an OpenTelemetry SDK" in r.message for r in caplog.records)


def test_get_tracer_with_and_without_span_processors(
    sdk_provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = sdk_provider
    assert get_tracer_provider() is provider
    get_tracer().start_span("exported").end()
    get_tracer(use_active_span_processor=False).start_span("dropped").end()
    assert [span.name for span in exporter.get_finished_spans()] == ["exported"]
    assert get_tracer().instrumentation_info.name == "agentlightning"  # type: ignore[attr-defined]


def test_get_span_processors(sdk_provider: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, _ = sdk_provider
    assert len(get_span_processors(provider, SimpleSpanProcessor)) == 1
    assert get_span_processors(provider, InMemorySpanExporter) == []


def test_emitter_debug_logs_processors(
    sdk_provider: tuple[TracerProvider, InMemorySpanExporter],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("AGL_EMITTER_DEBUG", "true")
    with caplog.at_level(logging.DEBUG, logger=otel.logger.name):
        get_tracer_provider()
    assert any("SimpleSpanProcessor" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=otel.logger.name):
        get_tracer_provider()
    assert any("AGL_EMITTER_DEBUG" in r.message for r in caplog.records)
    caplog.clear()
    monkeypatch.setenv("AGL_EMITTER_DEBUG", "false")
    with caplog.at_level(logging.DEBUG, logger=otel.logger.name):
        get_tracer_provider()
    assert not any("SimpleSpanProcessor" in r.message for r in caplog.records)
