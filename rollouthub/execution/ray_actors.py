"""The Ray actor that hosts one runner of :class:`~rollouthub.execution.ray.RayExecutionStrategy`.

This module imports nothing from Ray at import time: the actor class is a plain class that the strategy wraps with
``ray.remote`` when it starts the runners.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import traceback
from typing import Any, Dict, Optional, Tuple

from rollouthub.env_var import RUNNER_NODE_ENV, resolve_api_token

from .base import RunnerBundle
from .events import ThreadingEvent

__all__ = ["RunnerActor", "StoreServerActor"]

logger = logging.getLogger(__name__)


class RunnerActor:
    """One runner worker in a Ray actor: it runs the runner bundle in a thread from the moment it is created.

    Ray re-creates a restarted actor with the same arguments, so a restarted actor runs its runner again with the
    same worker id. The bundle talks to the store at ``store_url`` through a
    :class:`~rollouthub.store.client.LightningStoreClient` (the bearer token comes from ``ROLLOUTHUB_API_TOKEN``,
    which the strategy puts in the actor's environment, like the URL of the store).

    Args:
        runner: the runner bundle (``async (store, worker_id, event) -> None``).
        worker_id: the runner's worker id (``0..n-1``).
        store_url: the root URL of the store server the runner uses.
        log_level: the level of the process's root logger when nothing configured it (Ray forwards the actor's
            output to the driver, prefixed by ``runner-<worker_id>``).
        client_options: keyword arguments of the runner's ``LightningStoreClient`` (e.g. its retry schedules).
    """

    def __init__(
        self,
        runner: RunnerBundle,
        worker_id: int,
        store_url: str,
        log_level: int = logging.INFO,
        client_options: Optional[Dict[str, Any]] = None,
    ) -> None:
        import ray

        if not logging.getLogger().handlers:
            logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.worker_id = worker_id
        self.node = ray.util.get_node_ip_address()
        os.environ[RUNNER_NODE_ENV] = self.node  # read by the runner's heartbeats (worker telemetry)
        self._store_url = store_url
        self._client_options = dict(client_options or {})
        self._event = ThreadingEvent()
        self._finished = threading.Event()
        self._error: Optional[str] = None
        self._thread = threading.Thread(target=self._main, args=(runner,), name=f"runner-{worker_id}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        """``runner-<worker id>``: Ray prefixes the actor's forwarded log lines with it."""
        return f"runner-{getattr(self, 'worker_id', '?')}"

    def _main(self, runner: RunnerBundle) -> None:
        try:
            asyncio.run(self._run(runner))
        except BaseException:  # reported to the driver by wait()
            self._error = traceback.format_exc()
            logger.error("Runner %d failed:\n%s", self.worker_id, self._error)
        finally:
            self._finished.set()

    async def _run(self, runner: RunnerBundle) -> None:
        from rollouthub.store.client import LightningStoreClient

        client = LightningStoreClient(self._store_url, **self._client_options)
        try:
            await runner(client, self.worker_id, self._event)
        finally:
            try:
                await client.close()
            except Exception:
                logger.debug("Error while closing the runner's store client.", exc_info=True)

    def node_ip(self) -> str:
        """The IP address of the Ray node this actor runs on."""
        return self.node

    def stop(self) -> None:
        """Ask the runner to stop (its stop event); it finishes the rollout it is running first."""
        self._event.set()

    def status(self) -> Tuple[bool, Optional[str], str]:
        """``(ended, traceback of the runner's error or None, node IP address)``, at once (actor methods never
        block: Ray may run a call only after the ones before it)."""
        return self._finished.is_set(), self._error, self.node


class StoreServerActor:
    """A ``rollouthub store`` server in a Ray actor, pinned by the strategy to a node it names.

    The server serves the database at ``backend`` (a PostgreSQL URL, or a SQLite file on that node) on the node's
    address (the one its clients are given; never the driver's bind host) and ``port``, with the bearer token of
    ``ROLLOUTHUB_API_TOKEN`` (put in the actor's environment by the strategy). Ray re-creates a restarted actor with
    the same arguments on the same node, so the server comes back at the same address and its clients reconnect
    (their retries cover the restart); the database keeps the data.

    Args:
        backend: the database the server opens (``postgresql://...`` or ``sqlite:///...``).
        port: the port, the same on every restart.
        log_level: the level of the process's root logger when nothing configured it.
    """

    def __init__(self, backend: str, port: int, log_level: int = logging.INFO) -> None:
        import ray

        from rollouthub.store.server import LightningStoreServer
        from rollouthub.store.sql import SqlLightningStore

        if not logging.getLogger().handlers:
            logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.node = ray.util.get_node_ip_address()
        self.port = port
        self._server = LightningStoreServer(
            SqlLightningStore(backend), host=self.node, port=port, api_token=resolve_api_token()
        )
        asyncio.run(self._server.start())  # raises when the port is taken or the database cannot be opened
        logger.info("Store server on %s:%d (process %d).", self.node, port, os.getpid())

    def __repr__(self) -> str:
        """``store-<node>:<port>``: Ray prefixes the actor's forwarded log lines with it."""
        return f"store-{getattr(self, 'node', '?')}:{getattr(self, 'port', '?')}"

    def status(self) -> Tuple[str, int]:
        """``(root URL of the server, process id)``, at once."""
        host = f"[{self.node}]" if ":" in self.node else self.node
        return f"http://{host}:{self.port}", os.getpid()

    def stop(self) -> None:
        """Stop the server (the strategy kills the actor afterwards)."""
        asyncio.run(self._server.stop())
