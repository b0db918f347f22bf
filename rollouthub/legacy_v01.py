"""Deprecated v0.1 task server and client: importable shims, not implementations.

Agent Lightning v0.1 exchanged tasks and results through a small HTTP task server (``AgentLightningServer`` with its
``ServerDataStore``) and a polling client (``AgentLightningClient``, or ``DevTaskLoader`` in memory). v0.3 replaced
that protocol with the LightningStore; rollouthub implements only the latter. These names stay importable (from
``rollouthub``, ``rollouthub.server`` and ``rollouthub.client``, where the reference kept them) so that old imports
do not break: constructing one warns (``DeprecationWarning``) and every operation raises ``NotImplementedError``
naming the v0.3 replacement.
"""

from __future__ import annotations

import warnings
from typing import Any, NoReturn

__all__ = ["AgentLightningServer", "ServerDataStore", "AgentLightningClient", "DevTaskLoader"]

_REPLACEMENTS = {
    "AgentLightningServer": "rollouthub.LightningStoreServer (or `rollouthub store`) with a LightningStore",
    "ServerDataStore": "rollouthub.InMemoryLightningStore or rollouthub.store.sql.SqlLightningStore",
    "AgentLightningClient": "rollouthub.LightningStoreClient with rollouthub.LitAgentRunner",
    "DevTaskLoader": "Trainer.dev(agent, dataset) or a rollouthub.InMemoryLightningStore",
}


class _DeprecatedV01:
    """Base of the v0.1 shims: warns on construction, raises on use."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Accept the v0.1 arguments (kept on the instance) and warn that the class is deprecated."""
        name = type(self).__name__
        warnings.warn(
            f"{name} (v0.1 protocol) is deprecated and not supported by rollouthub; use {_REPLACEMENTS[name]}.",
            DeprecationWarning,
            stacklevel=2,
        )
        self.args = args
        self.kwargs = kwargs

    def _unsupported(self, operation: str) -> NoReturn:
        name = type(self).__name__
        raise NotImplementedError(
            f"{name}.{operation} is not supported: the v0.1 protocol was replaced by the LightningStore; "
            f"use {_REPLACEMENTS[name]}."
        )

    def __getattr__(self, operation: str) -> Any:
        """Every v0.1 operation (``start``, ``queue_task``, ``poll_next_task``, ``post_rollout``, ...) raises."""
        if operation.startswith("__"):
            raise AttributeError(operation)

        def unsupported(*args: Any, **kwargs: Any) -> NoReturn:
            self._unsupported(operation)

        return unsupported


class AgentLightningServer(_DeprecatedV01):
    """v0.1 task server ``AgentLightningServer(host="127.0.0.1", port=8000, task_timeout_seconds=300.0)``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8000, task_timeout_seconds: float = 300.0) -> None:
        """Keep the v0.1 settings; warn that the server is deprecated."""
        super().__init__(host=host, port=port, task_timeout_seconds=task_timeout_seconds)
        self.host = host
        self.port = port
        self.task_timeout_seconds = task_timeout_seconds


class ServerDataStore(_DeprecatedV01):
    """v0.1 in-memory data store behind :class:`AgentLightningServer`."""


class AgentLightningClient(_DeprecatedV01):
    """v0.1 polling client ``AgentLightningClient(endpoint, poll_interval=5.0, timeout=10.0)``."""

    def __init__(self, endpoint: str, poll_interval: float = 5.0, timeout: float = 10.0) -> None:
        """Keep the v0.1 settings; warn that the client is deprecated."""
        super().__init__(endpoint, poll_interval=poll_interval, timeout=timeout)
        self.endpoint = endpoint
        self.poll_interval = poll_interval
        self.timeout = timeout


class DevTaskLoader(_DeprecatedV01):
    """v0.1 in-memory stand-in for :class:`AgentLightningClient` (local debugging)."""
