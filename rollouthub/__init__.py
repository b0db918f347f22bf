"""rollouthub: open infrastructure for training AI agents from their own traces.

API-compatible with Agent Lightning v0.3: ``import rollouthub as agl``.
"""

from __future__ import annotations

from typing import Any

from .store import *  # noqa: F403
from .store import __all__ as _store_all
from .store import __getattr__ as _store_getattr
from .types import *  # noqa: F403
from .types import __all__ as _types_all

__version__ = "0.3.0"

__all__ = [*_types_all, *_store_all, "__version__"]


def __getattr__(name: str) -> Any:
    """Lazily resolve heavier exports (server, client, SQL store)."""
    return _store_getattr(name)
