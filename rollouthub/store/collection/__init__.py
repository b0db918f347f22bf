"""The collections layer: storage primitives and their in-memory implementation."""

from .base import (
    AtomicLabels,
    AtomicMode,
    Collection,
    FilterOptions,
    KeyValue,
    LightningCollections,
    PaginatedResult,
    Queue,
    SortOptions,
)
from .memory import DequeBasedQueue, DictBasedKeyValue, InMemoryLightningCollections, ListBasedCollection

__all__ = [
    "AtomicLabels",
    "AtomicMode",
    "Collection",
    "Queue",
    "KeyValue",
    "FilterOptions",
    "SortOptions",
    "PaginatedResult",
    "LightningCollections",
    "ListBasedCollection",
    "DequeBasedQueue",
    "DictBasedKeyValue",
    "InMemoryLightningCollections",
]
