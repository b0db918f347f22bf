"""Emitters: exact span names and attribute keys."""

from __future__ import annotations

import base64
import json

import pytest

from rollouthub.emitter import (
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    get_message_value,
    get_object_value,
    get_reward_value,
)
from rollouthub.emitter.object import encode_object
from rollouthub.types.tracer import Span, SpanCoreFields
from rollouthub.utils.otel import make_link_attributes, make_tag_attributes

from .conftest import RecordingTracer

# ---------------------------------------------------------------------------------------------------------------
# emit_reward
# ---------------------------------------------------------------------------------------------------------------


def test_emit_reward_scalar_without_tracer() -> None:
    span = emit_reward(0.5, propagate=False)
    assert isinstance(span, SpanCoreFields)
    assert span.name == "agentlightning.annotation"
    assert span.status.status_code == "OK"
    assert span.attributes == {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 0.5}
    assert span.start_time == span.end_time


@pytest.mark.parametrize("value, expected", [(1, 1.0), (True, 1.0), (False, 0.0), (-2, -2.0)])
def test_emit_reward_converts_int_and_bool(value: object, expected: float) -> None:
    span = emit_reward(value, propagate=False)  # type: ignore[arg-type]
    assert span.attributes["agentlightning.reward.0.value"] == expected
    assert isinstance(span.attributes["agentlightning.reward.0.value"], float)


@pytest.mark.parametrize("value", ["1.0", None, [1.0]])
def test_emit_reward_rejects_non_numbers(value: object) -> None:
    with pytest.raises(TypeError):
        emit_reward(value, propagate=False)  # type: ignore[arg-type]


def test_emit_reward_dict_primary_first_then_dict_order() -> None:
    span = emit_reward({"a": 1, "b": 0.25, "c": True}, primary_key="b", propagate=False)
    assert span.attributes == {
        "agentlightning.reward.0.name": "b",
        "agentlightning.reward.0.value": 0.25,
        "agentlightning.reward.1.name": "a",
        "agentlightning.reward.1.value": 1.0,
        "agentlightning.reward.2.name": "c",
        "agentlightning.reward.2.value": 1.0,
    }
    assert get_reward_value(span) == 0.25


def test_emit_reward_dict_requires_valid_primary_key() -> None:
    with pytest.raises(ValueError, match="primary_key"):
        emit_reward({"a": 1.0}, propagate=False)
    with pytest.raises(ValueError, match="primary_key"):
        emit_reward({"a": 1.0}, primary_key="missing", propagate=False)


def test_emit_reward_dict_rejects_non_numeric_values() -> None:
    with pytest.raises(ValueError):
        emit_reward({"a": 1.0, "b": "bad"}, primary_key="a", propagate=False)  # type: ignore[dict-item]


def test_emit_reward_merges_link_and_tag_attributes() -> None:
    attributes = {**make_link_attributes({"gen_ai.response.id": "resp-1"}), **make_tag_attributes(["x", "y"])}
    span = emit_reward(1.0, attributes=attributes, propagate=False)
    assert span.attributes["agentlightning.link.0.key_match"] == "gen_ai.response.id"
    assert span.attributes["agentlightning.link.0.value_match"] == "resp-1"
    assert span.attributes["agentlightning.tag.0"] == "x"
    assert span.attributes["agentlightning.tag.1"] == "y"
    assert span.attributes["agentlightning.reward.0.value"] == 1.0


def test_emit_reward_uses_active_tracer(recording_tracer: RecordingTracer) -> None:
    returned = emit_reward(2.0)
    assert recording_tracer.spans == [returned]
    call = recording_tracer.create_span_calls[0]
    assert call["name"] == "agentlightning.annotation"
    assert call["status"].status_code == "OK"


# ---------------------------------------------------------------------------------------------------------------
# emit_annotation
# ---------------------------------------------------------------------------------------------------------------


def test_emit_annotation_flattens_and_keeps_leaf_lists() -> None:
    span = emit_annotation({"meta": {"k": "v", "ids": [1, 2]}, "score": 3}, propagate=False)
    assert span.name == "agentlightning.annotation"
    assert span.attributes == {"meta.k": "v", "meta.ids": [1, 2], "score": 3}


@pytest.mark.parametrize(
    "annotation",
    [{"a": None}, {"a": {"b": None}}, {"a": [1, "x", {"y": None}]}],
)
def test_emit_annotation_strict_validation(annotation: dict) -> None:
    with pytest.raises(ValueError):
        emit_annotation(annotation, propagate=False)


def test_emit_annotation_mixed_primitive_list_is_expanded() -> None:
    span = emit_annotation({"a": [1, "x"]}, propagate=False)
    assert span.attributes == {"a.0": 1, "a.1": "x"}


# ---------------------------------------------------------------------------------------------------------------
# emit_message
# ---------------------------------------------------------------------------------------------------------------


def test_emit_message_attributes_and_no_status(recording_tracer: RecordingTracer) -> None:
    assert emit_message("hello", attributes={"extra": {"n": 1}, "ids": [1, 2]}) is None
    call = recording_tracer.create_span_calls[0]
    assert call["name"] == "agentlightning.message"
    assert call["status"] is None
    assert call["attributes"] == {"agentlightning.message.body": "hello", "extra.n": 1, "ids": [1, 2]}
    assert get_message_value(recording_tracer.spans[0]) == "hello"


def test_emit_message_extra_attributes_override_own_keys(recording_tracer: RecordingTracer) -> None:
    emit_message("hello", attributes={"agentlightning.message.body": "override", "obj": {"x": None}})
    attributes = recording_tracer.create_span_calls[0]["attributes"]
    assert attributes["agentlightning.message.body"] == "override"
    assert attributes["obj.x"] == "null"  # sanitised, not rejected


def test_emit_message_type_check() -> None:
    with pytest.raises(TypeError):
        emit_message(123, propagate=False)  # type: ignore[arg-type]


def test_emit_message_propagate_false_needs_no_tracer() -> None:
    assert emit_message("quiet", propagate=False) is None


def test_get_message_value() -> None:
    assert get_message_value(Span.from_attributes(attributes={})) is None
    with pytest.raises(TypeError):
        get_message_value(Span.from_attributes(attributes={"agentlightning.message.body": 3}))


# ---------------------------------------------------------------------------------------------------------------
# emit_object
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, type_name, literal",
    [("text", "str", "text"), (42, "int", "42"), (1.5, "float", "1.5"), (True, "bool", "True")],
)
def test_encode_object_literals(value: object, type_name: str, literal: str) -> None:
    assert encode_object(value) == {"agentlightning.object.type": type_name, "agentlightning.object.literal": literal}


def test_encode_object_bytes_and_json() -> None:
    assert encode_object(b"\x00\xff") == {
        "agentlightning.object.type": "bytes",
        "agentlightning.object.literal": base64.b64encode(b"\x00\xff").decode(),
    }
    assert encode_object({"a": [1, 2]}) == {
        "agentlightning.object.type": "dict",
        "agentlightning.object.json": json.dumps({"a": [1, 2]}),
    }
    assert encode_object(None)["agentlightning.object.type"] == "NoneType"


def test_encode_object_fully_qualified_type_name() -> None:
    class MyList(list):  # noqa: FURB189 - a JSON-serialisable subclass
        pass

    encoded = encode_object(MyList([1]))
    assert (
        encoded["agentlightning.object.type"]
        == f"{__name__}.test_encode_object_fully_qualified_type_name.<locals>.MyList"
    )
    assert json.loads(encoded["agentlightning.object.json"]) == [1]


def test_encode_object_not_serialisable() -> None:
    with pytest.raises(RuntimeError):
        encode_object(object())


@pytest.mark.parametrize("value", ["s", 7, 2.5, True, False, b"bin", {"k": [1, {"z": None}]}, [1, "a"], None])
def test_emit_object_roundtrip(value: object) -> None:
    span = emit_object(value, propagate=False)
    assert span.name == "agentlightning.object"
    assert span.status.status_code == "OK"
    assert get_object_value(span) == value


def test_emit_object_extra_attributes(recording_tracer: RecordingTracer) -> None:
    span = emit_object(1, attributes={"tag": "x"})
    assert span.attributes == {
        "agentlightning.object.type": "int",
        "agentlightning.object.literal": "1",
        "tag": "x",
    }
    assert recording_tracer.spans == [span]


def test_get_object_value_errors_and_absence() -> None:
    assert get_object_value(Span.from_attributes(attributes={})) is None
    bad_json = Span.from_attributes(attributes={"agentlightning.object.json": "{not json"})
    with pytest.raises(RuntimeError):
        get_object_value(bad_json)
    unknown = Span.from_attributes(
        attributes={"agentlightning.object.type": "complex", "agentlightning.object.literal": "1j"}
    )
    with pytest.raises(RuntimeError):
        get_object_value(unknown)
    upper_bool = Span.from_attributes(
        attributes={"agentlightning.object.type": "bool", "agentlightning.object.literal": "TRUE"}
    )
    assert get_object_value(upper_bool) is True


# ---------------------------------------------------------------------------------------------------------------
# emit_exception
# ---------------------------------------------------------------------------------------------------------------


def _raise_value_error() -> None:
    raise ValueError("boom")


def test_emit_exception_attributes(recording_tracer: RecordingTracer) -> None:
    try:
        _raise_value_error()
    except ValueError as exc:
        assert emit_exception(exc, attributes={"where": "test"}) is None
    call = recording_tracer.create_span_calls[0]
    assert call["name"] == "agentlightning.exception"
    assert call["status"].status_code == "OK"
    attributes = call["attributes"]
    assert attributes["exception.type"] == "ValueError"
    assert attributes["exception.message"] == "boom"
    assert attributes["exception.escaped"] is True
    assert "_raise_value_error" in attributes["exception.stacktrace"]
    assert attributes["where"] == "test"


def test_emit_exception_type_check() -> None:
    with pytest.raises(TypeError):
        emit_exception("not an exception", propagate=False)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# Tracer resolution
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "emit",
    [
        lambda: emit_reward(1.0),
        lambda: emit_annotation({"a": 1}),
        lambda: emit_message("m"),
        lambda: emit_object(1),
        lambda: emit_exception(ValueError("x")),
    ],
)
def test_propagating_emitters_require_an_active_tracer(emit: object) -> None:
    with pytest.raises(RuntimeError, match="No active tracer"):
        emit()  # type: ignore[operator]
