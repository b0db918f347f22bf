"""Algorithms: the components that enqueue rollouts and learn from their traces.

``APO`` and ``VERL`` are factory functions importing the real classes lazily, so their optional dependencies are
only needed when used. The classes live in :mod:`rollouthub.algorithm.apo` and :mod:`rollouthub.algorithm.verl`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Algorithm
from .decorator import algo
from .fast import Baseline, FastAlgorithm

if TYPE_CHECKING:  # pragma: no cover
    from .apo import APO as _APOClass
    from .verl import VERL as _VERLClass

__all__ = ["Algorithm", "algo", "FastAlgorithm", "Baseline", "APO", "VERL"]


def APO(*args: Any, **kwargs: Any) -> _APOClass[Any]:
    """Create an :class:`rollouthub.algorithm.apo.APO` (imported lazily)."""
    from .apo import APO as _APO

    return _APO(*args, **kwargs)


def VERL(*args: Any, **kwargs: Any) -> _VERLClass:
    """Create a :class:`rollouthub.algorithm.verl.VERL` (``ImportError`` without VERL's GPU dependencies)."""
    from .verl import VERL as _VERL

    return _VERL(*args, **kwargs)
