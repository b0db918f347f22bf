"""Reward emitter and reward readers.

Rewards are annotation spans whose attributes hold a list of named dimensions:
``agentlightning.reward.<i>.name`` / ``agentlightning.reward.<i>.value``; index 0 is the primary reward.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TypeVar, Union, cast

from pydantic import TypeAdapter, ValidationError

from rollouthub.semconv import AGL_ANNOTATION, LightningSpanAttributes, RewardPydanticModel
from rollouthub.types.tracer import SpanCoreFields
from rollouthub.utils.otel import filter_and_unflatten_attributes

from .annotation import emit_annotation

__all__ = [
    "reward",
    "emit_reward",
    "get_reward_value",
    "get_rewards_from_span",
    "is_reward_span",
    "find_reward_spans",
    "find_final_reward",
]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S")

_REWARD = LightningSpanAttributes.REWARD.value
_REWARD_LIST = TypeAdapter(List[RewardPydanticModel])
_AGENTOPS_OUTPUT_KEYS = ("agentops.task.output", "agentops.entity.output")


def _as_reward_number(value: Any, what: str, error: type[Exception]) -> float:
    if isinstance(value, (bool, int, float)):
        return float(value)
    raise error(f"{what} must be a float, int or bool, got {type(value).__name__}: {value!r}")


def emit_reward(
    reward: Union[float, Mapping[str, float]],
    *,
    primary_key: Optional[str] = None,
    attributes: Optional[Mapping[str, Any]] = None,
    propagate: bool = True,
) -> SpanCoreFields:
    """Emit a reward as an ``agentlightning.annotation`` span.

    Args:
        reward: A scalar (recorded as the ``"primary"`` dimension) or a mapping of named dimensions.
        primary_key: For a mapping, the dimension that comes first (the primary reward). Required for mappings.
        attributes: Extra (flat) attributes, e.g. the output of ``make_link_attributes``/``make_tag_attributes``.
        propagate: When false, nothing is exported.

    Returns:
        The core fields of the reward span.

    Raises:
        TypeError: If a scalar reward is not a float, int or bool.
        ValueError: If a mapping has a non-numeric value, or ``primary_key`` is missing or not one of its keys.
    """
    if isinstance(reward, Mapping):
        values: Dict[str, float] = {
            str(key): _as_reward_number(value, f"Reward dimension {key!r}", ValueError) for key, value in reward.items()
        }
        if primary_key is None:
            raise ValueError("primary_key is required when the reward is a dict")
        if primary_key not in values:
            raise ValueError(f"primary_key {primary_key!r} is not one of the reward keys {list(values)}")
        dimensions = [{"name": primary_key, "value": values[primary_key]}]
        dimensions += [{"name": key, "value": value} for key, value in values.items() if key != primary_key]
    else:
        dimensions = [{"name": "primary", "value": _as_reward_number(reward, "Reward", TypeError)}]
    annotation: Dict[str, Any] = {_REWARD: dimensions, **(attributes or {})}
    return emit_annotation(annotation, propagate=propagate)


def _attributes_of(span: Any) -> Mapping[str, Any]:
    return getattr(span, "attributes", None) or {}


def get_rewards_from_span(span: Any) -> List[RewardPydanticModel]:
    """Return the reward dimensions (v0.3 format) recorded on a span, or ``[]``."""
    attributes = _attributes_of(span)
    if not any(key.startswith(_REWARD + ".") for key in attributes):
        return []
    try:
        tree = filter_and_unflatten_attributes({k: v for k, v in attributes.items() if k != _REWARD}, _REWARD)
        return _REWARD_LIST.validate_python(tree)
    except (ValueError, ValidationError) as exc:
        logger.warning("Malformed reward attributes on span %r: %s", getattr(span, "name", span), exc)
        return []


def _agentops_reward(value: Any) -> tuple[bool, Optional[float]]:
    """Decode an AgentOps ``{"type": "reward", "value": v}`` output; returns (matched, value)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return False, None
    if not isinstance(value, dict) or value.get("type") != "reward":
        return False, None
    reward_value = value.get("value")
    logger.warning("The AgentOps reward format is deprecated; use emit_reward instead.")
    if reward_value is not None and not isinstance(reward_value, float):
        logger.error("AgentOps reward value %r is not a float.", reward_value)
    return True, reward_value


def get_reward_value(span: Any) -> Optional[float]:
    """Return the (primary) reward of a span, or ``None``.

    Checked in order: the v0.3 reward dimensions; the AgentOps legacy outputs (``agentops.task.output`` then
    ``agentops.entity.output``); the v0.2 ``reward`` attribute of an ``agentlightning.annotation`` span.
    """
    rewards = get_rewards_from_span(span)
    if rewards:
        return rewards[0].value
    attributes = _attributes_of(span)
    for key in _AGENTOPS_OUTPUT_KEYS:
        if key in attributes:
            matched, value = _agentops_reward(attributes[key])
            if matched:
                return value
    if getattr(span, "name", None) == AGL_ANNOTATION and "reward" in attributes:
        logger.warning("The v0.2 'reward' annotation attribute is deprecated; use emit_reward instead.")
        return cast(Optional[float], attributes["reward"])
    return None


def is_reward_span(span: Any) -> bool:
    """Whether the span carries a reward (``get_reward_value(span) is not None``)."""
    return get_reward_value(span) is not None


def find_reward_spans(spans: Sequence[S]) -> List[S]:
    """Return the reward spans, in input order."""
    return [span for span in spans if is_reward_span(span)]


def find_final_reward(spans: Sequence[Any]) -> Optional[float]:
    """Return the reward of the last span (scanning backwards) with a non-None reward, or ``None``."""
    for span in reversed(list(spans)):
        value = get_reward_value(span)
        if value is not None:
            return value
    return None


# ---------------------------------------------------------------------------------------------------------------
# Deprecated decorator
# ---------------------------------------------------------------------------------------------------------------


def _agentops_initialized() -> bool:
    try:
        import agentops  # type: ignore[import-not-found]
    except ImportError:
        return False
    try:
        return bool(agentops.get_client().initialized)
    except Exception:  # noqa: BLE001 - any failure means "not usable"
        return False


def _wrap_reward_output(result: Any) -> Dict[str, Any]:
    if isinstance(result, (int, float)) and not isinstance(result, bool):
        return {"type": "reward", "value": float(result)}
    if result is not None:
        logger.warning("Reward function returned %r, which is not a number; recording None.", result)
    return {"type": "reward", "value": None}


def _agentops_operation() -> Callable[[F], F]:
    from agentops.sdk.decorators import operation as agentops_operation  # type: ignore[import-not-found]

    return cast(Callable[[F], F], agentops_operation)


def reward(fn: F) -> F:
    """Deprecated: decorate a (sync or async) reward function so that its result is recorded as a reward.

    Without an initialised AgentOps client the result is emitted with :func:`emit_reward`; otherwise the call runs
    inside an AgentOps operation whose output is ``{"type": "reward", "value": result}``.
    """
    warnings.warn("@reward is deprecated; call emit_reward() instead.", DeprecationWarning, stacklevel=2)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _agentops_initialized():
                result = await fn(*args, **kwargs)
                emit_reward(result)
                return result
            holder: List[Any] = []

            @_agentops_operation()
            async def agentops_reward_operation() -> Dict[str, Any]:
                holder.append(await fn(*args, **kwargs))
                return _wrap_reward_output(holder[0])

            await agentops_reward_operation()
            return holder[0]

        return cast(F, async_wrapper)

    @functools.wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _agentops_initialized():
            result = fn(*args, **kwargs)
            emit_reward(result)
            return result
        holder: List[Any] = []

        @_agentops_operation()
        def agentops_reward_operation() -> Dict[str, Any]:
            holder.append(fn(*args, **kwargs))
            return _wrap_reward_output(holder[0])

        agentops_reward_operation()
        return holder[0]

    return cast(F, sync_wrapper)
