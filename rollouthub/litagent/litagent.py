"""``LitAgent``: the base class of trainable agents."""

from __future__ import annotations

import logging
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Dict, Generic, Optional, TypeVar

from rollouthub.types.core import Rollout, RolloutRawResult
from rollouthub.types.resources import NamedResources

if TYPE_CHECKING:
    from rollouthub.runner.base import Runner
    from rollouthub.tracer.base import Tracer
    from rollouthub.trainer import Trainer

__all__ = ["LitAgent"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class LitAgent(Generic[T]):
    """Base class of agents that can be trained; generic over the task type ``T``.

    Subclasses override at least one of :meth:`rollout` / :meth:`rollout_async` (or the training/validation
    specific variants). The runner calls the training method when ``rollout.mode == "train"`` and the validation
    method otherwise.
    """

    # Class-level defaults keep subclasses that forget ``super().__init__()`` working.
    trained_agents: Optional[str] = None
    _trainer_ref: Optional[weakref.ReferenceType[Any]] = None
    _runner_ref: Optional[weakref.ReferenceType[Any]] = None

    def __init__(self, *, trained_agents: Optional[str] = None) -> None:
        """Create the agent.

        Args:
            trained_agents: Deprecated; use the adapter's ``agent_match`` instead.
        """
        if trained_agents is not None:
            warnings.warn(
                "LitAgent(trained_agents=...) is deprecated; configure agent_match on the TracerTraceToTriplet "
                "adapter instead.",
                DeprecationWarning,
                stacklevel=2,
            )
        self.trained_agents = trained_agents
        self._trainer_ref = None
        self._runner_ref = None

    def __getstate__(self) -> Dict[str, Any]:
        """Pickle support: the weak references to the trainer and runner are not carried over."""
        state = self.__dict__.copy()
        state["_trainer_ref"] = None
        state["_runner_ref"] = None
        return state

    # -------------------------------------------------------------- async detection

    def is_async(self) -> bool:
        """Whether the subclass overrides any of the async rollout methods."""
        cls = type(self)
        return any(
            getattr(cls, name) is not getattr(LitAgent, name)
            for name in ("training_rollout_async", "validation_rollout_async", "rollout_async")
        )

    # -------------------------------------------------------------- wiring

    def set_trainer(self, trainer: Trainer) -> None:
        """Attach the trainer (held by weak reference)."""
        self._trainer_ref = weakref.ref(trainer)

    def get_trainer(self) -> Trainer:
        """Return the attached trainer.

        Raises:
            ValueError: If no trainer was set or it has been garbage-collected.
        """
        if self._trainer_ref is None:
            raise ValueError("Trainer has not been set for this agent.")
        trainer = self._trainer_ref()
        if trainer is None:
            raise ValueError("The trainer of this agent has been garbage-collected.")
        return trainer

    @property
    def trainer(self) -> Trainer:
        """The attached trainer (see :meth:`get_trainer`)."""
        return self.get_trainer()

    def set_runner(self, runner: Runner[T]) -> None:
        """Attach the runner (held by weak reference)."""
        self._runner_ref = weakref.ref(runner)

    def get_runner(self) -> Runner[T]:
        """Return the attached runner.

        Raises:
            ValueError: If no runner was set or it has been garbage-collected.
        """
        if self._runner_ref is None:
            raise ValueError("Runner has not been set for this agent.")
        runner = self._runner_ref()
        if runner is None:
            raise ValueError("The runner of this agent has been garbage-collected.")
        return runner

    @property
    def runner(self) -> Runner[T]:
        """The attached runner (see :meth:`get_runner`)."""
        return self.get_runner()

    def get_tracer(self) -> Tracer:
        """Return ``runner.tracer`` if the runner has one, else ``trainer.tracer``."""
        runner = self.get_runner()
        if hasattr(runner, "tracer"):
            return runner.tracer  # type: ignore[no-any-return]
        return self.get_trainer().tracer  # type: ignore[no-any-return]

    @property
    def tracer(self) -> Tracer:
        """The tracer in use (see :meth:`get_tracer`)."""
        return self.get_tracer()

    # -------------------------------------------------------------- deprecated hooks

    def on_rollout_start(self, task: T, runner: Any, tracer: Any) -> None:
        """Deprecated no-op kept for API compatibility (not called by ``LitAgentRunner``; use ``Hook``)."""

    def on_rollout_end(self, task: T, rollout: Any, runner: Any, tracer: Any) -> None:
        """Deprecated no-op kept for API compatibility (not called by ``LitAgentRunner``; use ``Hook``)."""

    # -------------------------------------------------------------- rollout methods

    def rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Run the agent on one task (synchronous). Override this or :meth:`rollout_async`."""
        raise NotImplementedError("Agents must implement rollout() or rollout_async().")

    async def rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Run the agent on one task (asynchronous). Override this or :meth:`rollout`."""
        raise NotImplementedError("Agents must implement rollout() or rollout_async().")

    def training_rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Rollout used in training mode; delegates to :meth:`rollout`."""
        return self.rollout(task, resources, rollout)

    def validation_rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Rollout used outside training mode; delegates to :meth:`rollout`."""
        return self.rollout(task, resources, rollout)

    async def training_rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Async rollout used in training mode; awaits :meth:`rollout_async`."""
        return await self.rollout_async(task, resources, rollout)

    async def validation_rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Async rollout used outside training mode; awaits :meth:`rollout_async`."""
        return await self.rollout_async(task, resources, rollout)
