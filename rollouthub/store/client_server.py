"""Compatibility module with the public names of the reference module ``agentlightning.store.client_server``.

The server lives in :mod:`rollouthub.store.server` (``LightningStoreServer``, its app, routes and pipeline), the
client in :mod:`rollouthub.store.client`, the request/response models of the HTTP API in :mod:`rollouthub.store.wire`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollouthub.types import Span

from .server.store_server import LightningStoreServer
from .wire import (
    API_AGL_PREFIX,
    API_V1_AGL_PREFIX,
    API_V1_PREFIX,
    MAX_DEQUEUE_WAIT_SECONDS,
    DequeueManyRolloutsRequest,
    EnqueueManyRolloutsRequest,
    NextSequenceIdRequest,
    NextSequenceIdResponse,
    QueryAttemptsRequest,
    QueryResourcesRequest,
    QueryRolloutsRequest,
    QuerySpansRequest,
    QueryWorkersRequest,
    RolloutRequest,
    StartAttemptRequest,
    StoreRequest,
    UpdateAttemptRequest,
    UpdateRolloutRequest,
    UpdateWorkerRequest,
    WaitForRolloutsRequest,
)

if TYPE_CHECKING:
    from .client import LightningStoreClient

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
    "LightningStoreServer",
    "LightningStoreClient",
    "Span",
]


def __getattr__(name: str) -> Any:
    """``LightningStoreClient`` is imported on first use (it pulls in aiohttp, which a server process never needs)."""
    if name == "LightningStoreClient":
        from .client import LightningStoreClient

        return LightningStoreClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
