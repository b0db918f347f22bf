"""Attribute utilities for OpenTelemetry spans.

OpenTelemetry attributes are flat: the runtime encodes structured data with dotted keys (``a.b``, ``a.c.0``). This
module converts between nested and flat forms, validates and sanitises attribute values, encodes tags and links,
and gives access to the global OpenTelemetry tracer provider. OpenTelemetry itself is imported lazily.
"""

from __future__ import annotations

import json
import logging
import traceback
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Type, TypeVar, Union

from rollouthub.env_var import LightningEnvVar, resolve_bool_env_var
from rollouthub.semconv import LightningSpanAttributes, LinkAttributes, LinkPydanticModel

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer as OtelApiTracer

__all__ = [
    "full_qualified_name",
    "get_tracer_provider",
    "get_tracer",
    "make_tag_attributes",
    "extract_tags_from_attributes",
    "make_link_attributes",
    "query_linked_spans",
    "extract_links_from_attributes",
    "filter_attributes",
    "filter_and_unflatten_attributes",
    "flatten_attributes",
    "unflatten_attributes",
    "sanitize_attribute_value",
    "sanitize_attributes",
    "sanitize_list_attribute_sanity",
    "check_attributes_sanity",
    "format_exception_attributes",
]

logger = logging.getLogger(__name__)

_PRIMITIVES = (str, int, float, bool)
T = TypeVar("T")


# ---------------------------------------------------------------------------------------------------------------
# Flatten / unflatten
# ---------------------------------------------------------------------------------------------------------------


def _is_primitive(value: Any) -> bool:
    return isinstance(value, _PRIMITIVES)


def flatten_attributes(
    nested: Union[Mapping[str, Any], Sequence[Any]], *, expand_leaf_lists: bool = False
) -> Dict[str, Any]:
    """Flatten nested dicts and lists into dotted keys.

    Args:
        nested: A mapping (or a list, whose items are keyed by index) to flatten.
        expand_leaf_lists: When false, a non-empty list whose items are all primitives of one type is kept as a
            list value (unless it is the top-level value). When true, every list is expanded by index.

    Returns:
        A flat mapping. Empty lists and empty dicts produce no key; scalars (including ``None``) are stored as-is.

    Raises:
        ValueError: If a dict key is not a string.
    """
    flat: Dict[str, Any] = {}

    def join(prefix: str, key: str) -> str:
        return f"{prefix}.{key}" if prefix else key

    def walk(value: Any, prefix: str, top_level: bool) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():  # type: ignore[union-attr]
                if not isinstance(key, str):
                    raise ValueError(f"Attribute keys must be strings, got {key!r} ({type(key).__name__})")
                walk(item, join(prefix, key), False)
        elif isinstance(value, (list, tuple)):
            if not value:
                return
            if not expand_leaf_lists and not top_level and all(_is_primitive(v) for v in value):
                if len({type(v) for v in value}) == 1:
                    flat[prefix] = list(value)
                    return
                logger.warning(
                    "Attribute %r is a list of mixed primitive types; expanding it by index instead.", prefix
                )
            for index, item in enumerate(value):
                walk(item, join(prefix, str(index)), False)
        else:
            flat[prefix] = value

    walk(nested, "", True)
    return flat


def _listify(node: Any) -> Any:
    if isinstance(node, dict):
        converted = {key: _listify(value) for key, value in node.items()}
        if converted and set(converted.keys()) == {str(i) for i in range(len(converted))}:
            return [converted[str(i)] for i in range(len(converted))]
        return converted
    return node


def unflatten_attributes(flat: Mapping[str, Any]) -> Union[Dict[str, Any], List[Any]]:
    """Rebuild a nested structure from dotted keys.

    Dicts whose keys are exactly the decimal strings ``0..n-1`` become lists (recursively).

    Raises:
        ValueError: If a key needs a nested value where another key already stored a scalar (or vice versa).
    """
    root: Dict[str, Any] = {}
    for flat_key, value in flat.items():
        parts = flat_key.split(".")
        node = root
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(
                    f"Conflicting attribute keys: {'.'.join(parts[: depth + 1])!r} is both a value and a prefix"
                )
            node = child
        last = parts[-1]
        if isinstance(node.get(last), dict):
            raise ValueError(f"Conflicting attribute keys: {flat_key!r} is both a value and a prefix")
        node[last] = value
    return _listify(root)


def filter_attributes(attributes: Mapping[str, Any], prefix: str) -> Dict[str, Any]:
    """Keep the keys equal to ``prefix`` or starting with ``prefix + "."``."""
    dotted = prefix + "."
    return {key: value for key, value in attributes.items() if key == prefix or key.startswith(dotted)}


def filter_and_unflatten_attributes(attributes: Mapping[str, Any], prefix: str) -> Union[Dict[str, Any], List[Any]]:
    """Select the keys below ``prefix``, strip ``prefix + "."`` and unflatten them.

    Raises:
        ValueError: If a key is exactly ``prefix`` (a scalar cannot be unflattened).
    """
    dotted = prefix + "."
    selected: Dict[str, Any] = {}
    for key, value in filter_attributes(attributes, prefix).items():
        if key == prefix:
            raise ValueError(f"Attribute {prefix!r} is a scalar value and cannot be unflattened as a prefix")
        selected[key[len(dotted) :]] = value
    return unflatten_attributes(selected)


# ---------------------------------------------------------------------------------------------------------------
# Sanitising and validation
# ---------------------------------------------------------------------------------------------------------------


def _normalise_list(values: Sequence[Any]) -> Optional[List[Any]]:
    """Return the homogeneous form of a primitive list, or ``None`` if it is heterogeneous."""
    items = list(values)
    if not items:
        return []
    if all(isinstance(v, str) for v in items):
        return items
    if all(isinstance(v, bool) for v in items):
        return items
    if all(isinstance(v, int) for v in items):  # ints, possibly mixed with bools
        return [int(v) for v in items]
    if all(isinstance(v, (int, float)) and not isinstance(v, str) for v in items):
        return [float(v) for v in items]
    return None


def sanitize_list_attribute_sanity(values: Sequence[Any]) -> List[Any]:
    """Normalise a list attribute value, raising on heterogeneous lists.

    All str → list of str; all bool → list of bool; int/bool mix → ints; numeric mix → floats.

    Raises:
        ValueError: If the list mixes incompatible types or contains non-primitives.
    """
    normalised = _normalise_list(values)
    if normalised is None:
        raise ValueError(f"List attribute values must be homogeneous lists of primitives, got {list(values)!r}")
    return normalised


def sanitize_attribute_value(obj: Any, force: bool = True) -> Any:
    """Turn any value into a valid OpenTelemetry attribute value.

    Primitives are returned unchanged; lists are normalised (falling back to a JSON string, with a warning, when
    heterogeneous); anything else (``None``, dicts, objects) becomes a JSON string.

    Args:
        obj: The value to sanitise.
        force: Serialise unknown objects with ``str()`` instead of failing.

    Raises:
        ValueError: If ``force`` is false and the value is not JSON-serialisable.
    """
    if isinstance(obj, _PRIMITIVES):
        return obj
    if isinstance(obj, (list, tuple)):
        normalised = _normalise_list(obj)
        if normalised is not None:
            return normalised
        logger.warning("List attribute value %r is not homogeneous; serialising it as JSON.", obj)
    try:
        return json.dumps(obj, default=str if force else None)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"Attribute value {obj!r} is not JSON-serialisable: {exc}") from exc


def sanitize_attributes(attributes: Mapping[str, Any], force: bool = True) -> Dict[str, Any]:
    """Apply :func:`sanitize_attribute_value` to every value; errors name the offending key."""
    sanitised: Dict[str, Any] = {}
    for key, value in attributes.items():
        try:
            sanitised[key] = sanitize_attribute_value(value, force=force)
        except ValueError as exc:
            raise ValueError(f"Invalid value for attribute {key!r}: {exc}") from exc
    return sanitised


def check_attributes_sanity(attributes: Mapping[str, Any]) -> None:
    """Strictly validate attributes: string keys; str/int/float/bool values or homogeneous lists of them.

    Raises:
        ValueError: On a non-string key, a ``None`` or dict value, or a heterogeneous list.
    """
    for key, value in attributes.items():
        if not isinstance(key, str):
            raise ValueError(f"Attribute keys must be strings, got {key!r}")
        if value is None:
            raise ValueError(f"Attribute {key!r} is None, which is not a valid attribute value")
        if isinstance(value, _PRIMITIVES):
            continue
        if isinstance(value, (list, tuple)):
            try:
                sanitize_list_attribute_sanity(value)
            except ValueError as exc:
                raise ValueError(f"Invalid list value for attribute {key!r}: {exc}") from exc
            continue
        raise ValueError(f"Attribute {key!r} has unsupported type {type(value).__name__}: {value!r}")


# ---------------------------------------------------------------------------------------------------------------
# Tags and links
# ---------------------------------------------------------------------------------------------------------------


def make_tag_attributes(tags: List[str]) -> Dict[str, Any]:
    """Encode tags as ``agentlightning.tag.<i>`` attributes."""
    return flatten_attributes({LightningSpanAttributes.TAG.value: list(tags)}, expand_leaf_lists=True)


def extract_tags_from_attributes(attributes: Mapping[str, Any]) -> List[str]:
    """Decode the tags written by :func:`make_tag_attributes` (in index order)."""
    prefix = LightningSpanAttributes.TAG.value
    whole = attributes.get(prefix)
    if isinstance(whole, (list, tuple)):
        return [str(tag) for tag in whole]
    dotted = prefix + "."
    indexed: Dict[int, str] = {}
    for key, value in attributes.items():
        if key.startswith(dotted) and key[len(dotted) :].isdigit():
            indexed[int(key[len(dotted) :])] = str(value)
    return [indexed[index] for index in sorted(indexed)]


def make_link_attributes(links: Mapping[str, str]) -> Dict[str, Any]:
    """Encode links (``{key_match: value_match}``, in dict order) as ``agentlightning.link.<i>.*`` attributes.

    Raises:
        ValueError: If a key or value is not a string.
    """
    prefix = LightningSpanAttributes.LINK.value
    attributes: Dict[str, Any] = {}
    for index, (key, value) in enumerate(links.items()):
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"Link keys and values must be strings, got {key!r}: {value!r}")
        attributes[f"{prefix}.{index}.{LinkAttributes.KEY_MATCH.value}"] = key
        attributes[f"{prefix}.{index}.{LinkAttributes.VALUE_MATCH.value}"] = value
    return attributes


def extract_links_from_attributes(attributes: Mapping[str, Any]) -> List[LinkPydanticModel]:
    """Decode the links written by :func:`make_link_attributes` (in index order)."""
    prefix = LightningSpanAttributes.LINK.value + "."
    grouped: Dict[int, Dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        parts = key[len(prefix) :].split(".")
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        grouped.setdefault(int(parts[0]), {})[parts[1]] = value
    return [LinkPydanticModel.model_validate(grouped[index]) for index in sorted(grouped)]


def _span_hex_ids(span: Any) -> tuple[Optional[str], Optional[str]]:
    trace_id = getattr(span, "trace_id", None)
    span_id = getattr(span, "span_id", None)
    if isinstance(trace_id, str) and isinstance(span_id, str):
        return trace_id, span_id
    context = getattr(span, "context", None)
    if context is None:
        return None, None
    raw_trace, raw_span = getattr(context, "trace_id", None), getattr(context, "span_id", None)
    if isinstance(raw_trace, int):
        raw_trace = format(raw_trace, "032x")
    if isinstance(raw_span, int):
        raw_span = format(raw_span, "016x")
    return raw_trace, raw_span


def query_linked_spans(spans: Sequence[T], links: Sequence[LinkPydanticModel]) -> List[T]:
    """Return the spans that match **all** links.

    ``key_match`` ``"trace_id"``/``"span_id"`` compare with the span's hex ids (``Span`` or ``ReadableSpan``); any
    other key compares the span attribute by equality.
    """
    matched: List[T] = []
    for span in spans:
        trace_id, span_id = _span_hex_ids(span)
        attributes = getattr(span, "attributes", None) or {}
        ok = True
        for link in links:
            if link.key_match == "trace_id":
                ok = trace_id == link.value_match
            elif link.key_match == "span_id":
                ok = span_id == link.value_match
            else:
                ok = link.key_match in attributes and attributes[link.key_match] == link.value_match
            if not ok:
                break
        if ok:
            matched.append(span)
    return matched


# ---------------------------------------------------------------------------------------------------------------
# Misc
# ---------------------------------------------------------------------------------------------------------------


def format_exception_attributes(exception: BaseException) -> Dict[str, Any]:
    """OpenTelemetry exception attributes: type, message, escaped and (when non-blank) the stack trace."""
    attributes: Dict[str, Any] = {
        "exception.type": type(exception).__name__,
        "exception.message": str(exception),
        "exception.escaped": True,
    }
    stacktrace = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    if stacktrace.strip():
        attributes["exception.stacktrace"] = stacktrace
    return attributes


def full_qualified_name(cls: type) -> str:
    """``module.QualName`` of a class, or the bare qualname for builtins."""
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", getattr(cls, "__name__", repr(cls)))
    if module is None or module == "builtins":
        return qualname
    return f"{module}.{qualname}"


# ---------------------------------------------------------------------------------------------------------------
# Tracer provider access
# ---------------------------------------------------------------------------------------------------------------


def _emitter_debug_enabled() -> bool:
    setting = resolve_bool_env_var(LightningEnvVar.AGL_EMITTER_DEBUG)
    debug_logging = logger.isEnabledFor(logging.DEBUG)
    if setting is None:
        return debug_logging
    if setting and not debug_logging:
        logger.warning(
            "AGL_EMITTER_DEBUG is set but DEBUG logging is disabled for %s; enable it to see emitter details.",
            logger.name,
        )
    return setting and debug_logging


def get_span_processors(provider: Any, expected_type: Type[T]) -> List[T]:
    """Return the active span processors of ``provider`` that are instances of ``expected_type``."""
    active = getattr(provider, "_active_span_processor", None)
    processors = getattr(active, "_span_processors", ()) if active is not None else ()
    return [processor for processor in processors if isinstance(processor, expected_type)]


def _describe_processor(processor: Any) -> str:
    exporter = getattr(processor, "span_exporter", None) or getattr(processor, "_exporter", None)
    if exporter is None:
        batch = getattr(processor, "_batch_processor", None)
        exporter = getattr(batch, "_exporter", None)
    if exporter is None:
        return type(processor).__name__
    endpoint = getattr(exporter, "endpoint", None) or getattr(exporter, "_endpoint", None)
    suffix = f" -> {endpoint}" if endpoint else ""
    return f"{type(processor).__name__}({type(exporter).__name__}{suffix})"


def get_tracer_provider(inspect: bool = True) -> TracerProvider:
    """Return the global OpenTelemetry SDK tracer provider.

    Args:
        inspect: When emitter debugging is on, log each active span processor and its exporter at DEBUG.

    Raises:
        RuntimeError: If no global tracer provider was ever set.
    """
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

    provider = trace_api.get_tracer_provider()
    if isinstance(provider, trace_api.ProxyTracerProvider):
        raise RuntimeError("No OpenTelemetry tracer provider has been set. Initialise a tracer first.")
    if not isinstance(provider, SdkTracerProvider):
        logger.error("The global tracer provider %r is not an OpenTelemetry SDK TracerProvider.", provider)
    elif inspect and _emitter_debug_enabled():
        for processor in get_span_processors(provider, object):
            logger.debug("Active span processor: %s", _describe_processor(processor))
    return provider  # type: ignore[return-value]


def get_tracer(use_active_span_processor: bool = True) -> OtelApiTracer:
    """Return the ``"agentlightning"`` tracer of the global provider.

    Args:
        use_active_span_processor: When false, return a tracer that shares the provider's sampler, resource and id
            generator but has no span processors (its spans go nowhere).
    """
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

    provider = get_tracer_provider()
    if use_active_span_processor or not isinstance(provider, SdkTracerProvider):
        return provider.get_tracer("agentlightning")
    detached = SdkTracerProvider(
        sampler=provider.sampler,
        resource=provider.resource,
        id_generator=provider.id_generator,
    )
    return detached.get_tracer("agentlightning")
