"""The LightningStore: contract, business logic, backends, wrappers, server and client."""

from __future__ import annotations

from typing import Any

from .base import LightningStore, LightningStoreCapabilities, LightningStoreStatistics, SpansEvictedError
from .collection_based import CollectionBasedLightningStore
from .memory import InMemoryLightningStore
from .threading import LightningStoreThreaded

__all__ = [
    "LightningStore",
    "LightningStoreCapabilities",
    "LightningStoreStatistics",
    "InMemoryLightningStore",
    "CollectionBasedLightningStore",
    "LightningStoreThreaded",
    "SpansEvictedError",
]
# Also available (imported lazily on first access): LightningStoreClient, LightningStoreServer, SqlLightningStore.


def __getattr__(name: str) -> Any:
    """Import the server, client and SQL store lazily (they pull in heavier dependencies). The server sits above the
    rest of the store (it serves the export package too): this alias is the store's one import of it, allowed by the
    layering test."""
    if name == "LightningStoreServer":
        from .client_server import LightningStoreServer

        return LightningStoreServer
    if name == "LightningStoreClient":
        from .client import LightningStoreClient

        return LightningStoreClient
    if name == "SqlLightningStore":
        from .sql import SqlLightningStore

        return SqlLightningStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
