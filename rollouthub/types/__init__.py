"""Pydantic data models shared by the store and the runtime (no I/O)."""

from .core import *  # noqa: F403
from .core import __all__ as _core_all
from .resources import *  # noqa: F403
from .resources import __all__ as _resources_all
from .tracer import *  # noqa: F403
from .tracer import __all__ as _tracer_all
from .trajectory import *  # noqa: F403
from .trajectory import __all__ as _trajectory_all

__all__ = [*_core_all, *_resources_all, *_tracer_all, *_trajectory_all]
