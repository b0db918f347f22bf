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

_LAZY = {
    "LightningStoreClient": ".client_server",
    "LightningStoreServer": ".client_server",
    "SqlLightningStore": ".sql",
}


def __getattr__(name: str) -> Any:
    """Import the server, client and SQL store lazily (they pull in heavier dependencies)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)
