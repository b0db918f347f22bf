"""Semantic conventions: span names and attribute keys shared by the store and the runtime."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel

__all__ = [
    "AGL_ANNOTATION",
    "AGL_MESSAGE",
    "AGL_OBJECT",
    "AGL_EXCEPTION",
    "AGL_OPERATION",
    "AGL_REWARD",
    "AGL_VIRTUAL",
    "POLICY_VERSION_ATTRIBUTE",
    "LightningResourceAttributes",
    "LightningSpanAttributes",
    "RewardAttributes",
    "RewardPydanticModel",
    "LinkAttributes",
    "LinkPydanticModel",
]

AGL_ANNOTATION = "agentlightning.annotation"
AGL_MESSAGE = "agentlightning.message"
AGL_OBJECT = "agentlightning.object"
AGL_EXCEPTION = "agentlightning.exception"
AGL_OPERATION = "agentlightning.operation"
AGL_REWARD = "agentlightning.reward"
AGL_VIRTUAL = "agentlightning.virtual"

POLICY_VERSION_ATTRIBUTE = "rollouthub.policy_version"
"""LLM-call span attribute: the version of the policy (model weights) that served the call, as an integer. Written by
the LLM proxy (from its local policy backend, or from the ``policy_version`` of the model's ``model_info``) and read
by the token-level trajectories (``rollouthub.adapter.trajectory``) to tell on-policy samples from stale ones."""


class LightningResourceAttributes(Enum):
    """OpenTelemetry resource attributes that bind a span to a rollout attempt."""

    ROLLOUT_ID = "agentlightning.rollout_id"
    ATTEMPT_ID = "agentlightning.attempt_id"
    SPAN_SEQUENCE_ID = "agentlightning.span_sequence_id"
    TRACER_NAME = "agentlightning.tracer.name"


class LightningSpanAttributes(Enum):
    """Span attribute keys and prefixes written by the emitters."""

    REWARD = "agentlightning.reward"
    LINK = "agentlightning.link"
    TAG = "agentlightning.tag"
    MESSAGE_BODY = "agentlightning.message.body"
    OBJECT_TYPE = "agentlightning.object.type"
    OBJECT_LITERAL = "agentlightning.object.literal"
    OBJECT_JSON = "agentlightning.object.json"
    OPERATION_NAME = "agentlightning.operation.name"
    OPERATION_INPUT = "agentlightning.operation.input"
    OPERATION_OUTPUT = "agentlightning.operation.output"


class RewardAttributes(Enum):
    """Keys of one entry of the reward list attribute."""

    REWARD_NAME = "name"
    REWARD_VALUE = "value"


class RewardPydanticModel(BaseModel):
    """A named reward value."""

    name: str
    value: float


class LinkAttributes(Enum):
    """Keys of one entry of the link list attribute."""

    KEY_MATCH = "key_match"
    VALUE_MATCH = "value_match"


class LinkPydanticModel(BaseModel):
    """A link from one span to another, matched by attribute key and value."""

    key_match: str
    value_match: str
