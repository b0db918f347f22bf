"""Deprecated alias of :mod:`rollouthub.emitter.reward`; importing it emits a ``DeprecationWarning``.

The library never imports this module itself, so ``rollouthub.reward`` (the package attribute) stays the deprecated
``@reward`` decorator unless user code imports this module explicitly.
"""

import warnings

from rollouthub.emitter.reward import *  # noqa: F403
from rollouthub.emitter.reward import __all__ as _reward_all

warnings.warn(
    "rollouthub.reward is deprecated; import from rollouthub.emitter (or rollouthub) instead.",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = list(_reward_all)
