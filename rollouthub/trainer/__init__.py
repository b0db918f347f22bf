"""The Trainer and component building."""

from .init_utils import build_component, instantiate_component, instantiate_from_spec, load_class
from .registry import ExecutionStrategyRegistry
from .trainer import Trainer

# Star-exported by the top-level package; the other names live in the sub-modules.
__all__ = ["Trainer", "build_component"]
_ = (instantiate_component, instantiate_from_spec, load_class, ExecutionStrategyRegistry)
