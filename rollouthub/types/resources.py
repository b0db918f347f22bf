"""Resources: tunable assets (LLM endpoints, prompt templates) published by algorithms and used by agents."""

from __future__ import annotations

import logging
from typing import Annotated, Any, Dict, Literal, Optional, Union

from pydantic import BaseModel, Field

from .core import AttemptedRollout

__all__ = [
    "Resource",
    "LLM",
    "ProxyLLM",
    "PromptTemplate",
    "ResourceUnion",
    "NamedResources",
    "ResourcesUpdate",
]

logger = logging.getLogger(__name__)


class Resource(BaseModel):
    """Base class of every resource; ``resource_type`` is the discriminator."""

    resource_type: Any


class LLM(Resource):
    """An OpenAI-compatible model endpoint."""

    resource_type: Literal["llm"] = "llm"  # type: ignore[assignment]
    endpoint: str
    model: str
    api_key: Optional[str] = None
    sampling_parameters: Dict[str, Any] = Field(default_factory=dict)

    def get_base_url(self, *args: Any, **kwargs: Any) -> str:
        """Return the endpoint (arguments are ignored)."""
        return self.endpoint


class ProxyLLM(LLM):
    """An LLM behind the LLM proxy: the base URL is specific to each rollout attempt."""

    resource_type: Literal["proxy_llm"] = "proxy_llm"  # type: ignore[assignment]

    def get_base_url(self, rollout_id: Optional[str] = None, attempt_id: Optional[str] = None) -> str:  # type: ignore[override]
        """Return the endpoint routed to one rollout attempt (``.../rollout/<r>/attempt/<a>[/v1]``)."""
        endpoint = self.endpoint
        if rollout_id is None and attempt_id is None:
            return endpoint
        if not isinstance(rollout_id, str) or not isinstance(attempt_id, str):
            raise ValueError("rollout_id and attempt_id must be strings or all be empty")
        base = endpoint[:-1] if endpoint.endswith("/") else endpoint
        had_v1 = base.endswith("/v1")
        if had_v1:
            base = base[: -len("/v1")]
        base = f"{base}/rollout/{rollout_id}/attempt/{attempt_id}"
        return base + "/v1" if had_v1 else base

    def with_attempted_rollout(self, rollout: AttemptedRollout) -> LLM:
        """Return a plain :class:`LLM` bound to the rollout's current attempt."""
        return LLM(
            endpoint=self.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            model=self.model,
            sampling_parameters=dict(self.sampling_parameters),
            api_key=self.api_key,
        )


class PromptTemplate(Resource):
    """A prompt template rendered with keyword arguments."""

    resource_type: Literal["prompt_template"] = "prompt_template"  # type: ignore[assignment]
    template: str
    engine: Literal["jinja", "f-string", "poml"]

    def format(self, **kwargs: Any) -> str:
        """Render the template (``f-string`` engine only)."""
        if self.engine == "f-string":
            return self.template.format(**kwargs)
        raise NotImplementedError(f"Formatting prompt templates with engine '{self.engine}' is not supported")


ResourceUnion = Annotated[Union[LLM, ProxyLLM, PromptTemplate], Field(discriminator="resource_type")]
"""Any concrete resource, discriminated on ``resource_type``."""

NamedResources = Dict[str, ResourceUnion]
"""Resource name -> resource."""


class ResourcesUpdate(BaseModel):
    """A versioned snapshot of named resources."""

    resources_id: str
    create_time: float
    update_time: float
    version: int
    resources: NamedResources
