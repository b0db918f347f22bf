"""Compatibility module with the public names of the reference module ``agentlightning.store.client_server``.

The server lives in :mod:`rollouthub.store.server` (``LightningStoreServer``, its app, routes and middleware), the
client in :mod:`rollouthub.store.client`, the request/response models of the HTTP API in :mod:`rollouthub.store.wire`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollouthub.types import Span

from . import wire
from .server.store_server import LightningStoreServer
from .wire import *  # noqa: F403 - the HTTP API's request/response models, under the reference's module

if TYPE_CHECKING:
    from .client import LightningStoreClient

__all__ = ["LightningStoreServer", "LightningStoreClient", "Span"]
__all__ += wire.__all__


def __getattr__(name: str) -> Any:
    """``LightningStoreClient`` is imported on first use (it pulls in aiohttp, which a server process never needs)."""
    if name == "LightningStoreClient":
        from .client import LightningStoreClient

        return LightningStoreClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
