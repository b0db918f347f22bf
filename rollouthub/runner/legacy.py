"""Deprecated v0.1 runner shim."""

from __future__ import annotations

import warnings
from typing import Any

from .base import Runner

__all__ = ["LegacyAgentRunner"]


class LegacyAgentRunner(Runner[Any]):
    """Deprecated runner for the v0.1 HTTP protocol; kept only so that imports keep working.

    Constructing it emits a ``DeprecationWarning``; every lifecycle method raises ``NotImplementedError``
    pointing to :class:`~rollouthub.runner.agent.LitAgentRunner`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Accept any arguments and warn that the class is deprecated."""
        warnings.warn(
            "LegacyAgentRunner is deprecated and not supported by rollouthub; use LitAgentRunner with a LightningStore.",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__()
        self.args = args
        self.kwargs = kwargs

    def _unsupported(self) -> NotImplementedError:
        return NotImplementedError("LegacyAgentRunner is not supported; use LitAgentRunner instead.")

    def init(self, agent: Any, **kwargs: Any) -> None:
        """Not supported."""
        raise self._unsupported()

    def init_worker(self, worker_id: int, store: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Not supported."""
        raise self._unsupported()

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        """Not supported."""
        raise self._unsupported()

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Not supported."""
        raise self._unsupported()
