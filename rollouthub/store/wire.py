"""The HTTP contract of the store: API prefixes and the request/response models of the REST routes.

Shared by the server (:mod:`rollouthub.store.server`, which validates request bodies with these models) and the
client (:mod:`rollouthub.store.client`, which builds them). ``rollouthub.store.client_server`` re-exports every name
under the reference module's path.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from pydantic import BaseModel, Field, model_validator

from rollouthub.types import (
    AttemptStatus,
    EnqueueRolloutRequest,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    TaskInput,
)
from rollouthub.types.queries import AttemptQuery, ResourcesQuery, RolloutQuery, SpanQuery, WorkerQuery

from .domains import check_value

__all__ = [
    "API_V1_PREFIX",
    "API_AGL_PREFIX",
    "API_V1_AGL_PREFIX",
    "MAX_DEQUEUE_WAIT_SECONDS",
    "StoreRequest",
    "RolloutRequest",
    "EnqueueManyRolloutsRequest",
    "DequeueManyRolloutsRequest",
    "StartAttemptRequest",
    "QueryRolloutsRequest",
    "QueryAttemptsRequest",
    "QueryResourcesRequest",
    "QuerySpansRequest",
    "QueryWorkersRequest",
    "WaitForRolloutsRequest",
    "NextSequenceIdRequest",
    "NextSequenceIdResponse",
    "UpdateRolloutRequest",
    "UpdateAttemptRequest",
    "UpdateWorkerRequest",
]

API_V1_PREFIX = "/v1"
API_AGL_PREFIX = "/agl"
API_V1_AGL_PREFIX = API_V1_PREFIX + API_AGL_PREFIX


class StoreRequest(BaseModel):
    """Base of the request bodies: once validated, every value must lie in the input domains of
    :mod:`rollouthub.store.domains` (text without NUL or lone surrogates, 64-bit integers, finite numbers, bounded
    nesting), else :class:`~rollouthub.store.domains.InputDomainError` -- answered with 400 naming the field."""

    @model_validator(mode="after")
    def _check_domains(self) -> StoreRequest:
        check_value(self)
        return self


class RolloutRequest(StoreRequest):
    """Body of ``POST /v1/agl/rollouts`` (``start_rollout``)."""

    input: TaskInput
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    config: Optional[RolloutConfig] = None
    metadata: Optional[Dict[str, Any]] = None
    worker_id: Optional[str] = None


class EnqueueManyRolloutsRequest(StoreRequest):
    """Body of ``POST /v1/agl/queues/rollouts/enqueue``."""

    rollouts: List[EnqueueRolloutRequest]


MAX_DEQUEUE_WAIT_SECONDS = 10.0
"""Longest wait the server grants one ``POST /queues/rollouts/dequeue`` with a ``timeout`` (longer ones are capped)."""


class DequeueManyRolloutsRequest(StoreRequest):
    """Body of ``POST /v1/agl/queues/rollouts/dequeue``.

    ``timeout`` is a rollouthub extension: with ``limit`` 1, wait up to that many seconds (capped at
    :data:`MAX_DEQUEUE_WAIT_SECONDS`) for a rollout to be queued when none is (``LightningStore.dequeue_rollout_or_wait``).
    Servers without the extension ignore the field and answer at once.
    """

    limit: int = 1
    worker_id: Optional[str] = None
    timeout: Optional[float] = Field(default=None, ge=0, allow_inf_nan=False)


class StartAttemptRequest(StoreRequest):
    """Body of ``POST /v1/agl/rollouts/{rollout_id}/attempts``."""

    worker_id: Optional[str] = None


class QueryRolloutsRequest(StoreRequest, RolloutQuery):
    """Body of ``POST /v1/agl/rollouts/search``: a :class:`RolloutQuery`."""


class QueryAttemptsRequest(StoreRequest, AttemptQuery):
    """Body of ``POST /v1/agl/rollouts/{rollout_id}/attempts/search``: an :class:`AttemptQuery`."""


class QueryResourcesRequest(StoreRequest, ResourcesQuery):
    """Query parameters of ``GET /v1/agl/resources``: a :class:`ResourcesQuery`."""


class QuerySpansRequest(StoreRequest, SpanQuery):
    """Body of ``POST /v1/agl/spans/search``: the rollout (and attempt) and a :class:`SpanQuery`."""

    rollout_id: str
    attempt_id: Optional[str] = None

    def query(self) -> SpanQuery:
        """The span query of the request."""
        return SpanQuery.model_construct(**{name: getattr(self, name) for name in SpanQuery.model_fields})


class QueryWorkersRequest(StoreRequest, WorkerQuery):
    """Body of ``POST /v1/agl/workers/search``: a :class:`WorkerQuery`."""


class WaitForRolloutsRequest(StoreRequest):
    """Body of ``POST /v1/agl/waits/rollouts``."""

    rollout_ids: List[str]
    timeout: Optional[float] = None


class NextSequenceIdRequest(StoreRequest):
    """Body of ``POST /v1/agl/spans/next``."""

    rollout_id: str
    attempt_id: str


class NextSequenceIdResponse(BaseModel):
    """Response of ``POST /v1/agl/spans/next``."""

    sequence_id: int


class UpdateRolloutRequest(StoreRequest):
    """Body of ``POST /v1/agl/rollouts/{rollout_id}``; a key counts as provided iff present in the JSON body."""

    input: Optional[TaskInput] = None
    mode: Optional[RolloutMode] = None
    resources_id: Optional[str] = None
    status: Optional[RolloutStatus] = None
    config: Optional[RolloutConfig] = None
    metadata: Optional[Dict[str, Any]] = None


class UpdateAttemptRequest(StoreRequest):
    """Body of ``POST /v1/agl/rollouts/{rollout_id}/attempts/{attempt_id}`` (presence semantics)."""

    status: Optional[AttemptStatus] = None
    worker_id: Optional[str] = None
    last_heartbeat_time: Optional[float] = None
    metadata: Optional[Dict[str, Any]] = None


class UpdateWorkerRequest(StoreRequest):
    """Body of ``POST /v1/agl/workers/{worker_id}``."""

    heartbeat_stats: Optional[Dict[str, Any]] = None
