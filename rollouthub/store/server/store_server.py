"""``LightningStoreServer``: a store on the network that is itself a ``LightningStore``.

In the owning process (and, for zero-copy stores, in forked workers) every store method goes straight to the wrapped
store -- serialized with a lock for stores that are not thread-safe; in any other process (a forked child or an
unpickled copy) it goes through HTTP with a ``LightningStoreClient``. The ASGI app it serves is built by
:func:`rollouthub.store.server.app.build_app`; the launcher (:mod:`rollouthub.utils.server_launcher`) runs it with
uvicorn.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from rollouthub.types import AttemptedRollout
from rollouthub.utils.metrics import MetricsBackend
from rollouthub.utils.server_launcher import LaunchMode, PythonServerLauncher, PythonServerLauncherArgs

from ..base import LightningStore, LightningStoreCapabilities
from ..delegation import UNLOCKED_METHODS, CrossThreadLock, DelegatingLightningStore
from ..wire import API_V1_AGL_PREFIX

if TYPE_CHECKING:
    from ..client import LightningStoreClient

__all__ = ["LightningStoreServer"]

logger = logging.getLogger("rollouthub.store.client_server")

_current_pid = os.getpid()
"""This process's id, kept current across ``fork`` (``os.getpid()`` is a system call; the delegation checks it on
every store call)."""


def _refresh_pid() -> None:
    global _current_pid
    _current_pid = os.getpid()


os.register_at_fork(after_in_child=_refresh_pid)

# How the server reaches the wrapped store (see ``LightningStoreServer._call``).
_DIRECT_ANYWHERE = 1  # zero-copy store: direct calls in any process
_DIRECT_IN_OWNER = 2  # thread-safe store: direct calls in the owning process
_LOCKED = 0  # other stores: calls serialized with the server's lock in the owning process


def _normalize_cors_origins(origins: Union[Sequence[str], str, None]) -> Optional[List[str]]:
    """Normalize CORS origins: ``None``/empty → disabled; ``"*"`` anywhere → ``["*"]``."""
    if origins is None:
        return None
    items = [origins] if isinstance(origins, str) else list(origins)
    cleaned = [item.strip() for item in items if item and item.strip()]
    if any(item == "*" for item in cleaned):
        return ["*"]
    return cleaned or None


class LightningStoreServer(DelegatingLightningStore):
    """Expose a store over HTTP and delegate every store method to it.

    Every contract method is a :class:`~rollouthub.store.delegation.DelegatingLightningStore` method that hands its
    arguments to :meth:`_delegate` (which picks the route: straight to the store, under the lock, or over HTTP), but
    for :meth:`add_otel_span`, which converts the span here.

    Besides the reference's arguments, ``api_token`` enables bearer-token authentication (every route except
    ``GET /v1/agl/health``), ``max_body_bytes`` limits request bodies (413 above it), ``dashboard_dir`` overrides the
    directory of the dashboard bundle and ``instance_id`` (a per-launch nonce chosen by whoever starts the server) is
    returned by ``GET /v1/agl/health``, so that the starter can tell its own server from another one on the port.
    """

    def __init__(
        self,
        store: LightningStore,
        host: Optional[str] = None,
        port: Optional[int] = None,
        cors_allow_origins: Union[Sequence[str], str, None] = None,
        launch_mode: LaunchMode = "thread",
        launcher_args: Optional[PythonServerLauncherArgs] = None,
        n_workers: int = 1,
        tracker: Optional[MetricsBackend] = None,
        *,
        api_token: Optional[str] = None,
        max_body_bytes: int = 32 * 1024 * 1024,
        dashboard_dir: Optional[str] = None,
        instance_id: Optional[str] = None,
    ) -> None:
        if launcher_args is not None:
            if host is not None or port is not None or launch_mode != "thread":
                raise ValueError("host, port, and launch_mode cannot be set when launcher_args is provided.")
            self.launcher_args = launcher_args
        else:
            if port is None:
                logger.warning("No port provided to LightningStoreServer; using the default port 4747.")
                port = 4747
            self.launcher_args = PythonServerLauncherArgs(
                host=host,
                port=port,
                launch_mode=launch_mode,
                healthcheck_url=API_V1_AGL_PREFIX + "/health",
                n_workers=n_workers,
            )
        caps = store.capabilities
        if not caps.get("async_safe", False):
            raise ValueError("The store is not async-safe. Please use another store for the server.")
        mode = self.launcher_args.launch_mode
        if mode == "mp" and not caps.get("zero_copy", False):
            raise ValueError(
                "The store does not support zero-copy. Please use another store, or use asyncio or thread mode to "
                "launch the server."
            )
        if mode == "thread" and not caps.get("thread_safe", False):
            logger.warning(
                "The store is not thread-safe; calls from the caller's thread and the server thread are serialized "
                "with a lock."
            )
        self.store: Optional[LightningStore] = store
        self._tracker = tracker
        self._cors_allow_origins = _normalize_cors_origins(cors_allow_origins)
        self._api_token = api_token or None
        self._max_body_bytes = int(max_body_bytes)
        self._dashboard_dir = dashboard_dir
        self._instance_id = instance_id or None
        self._owner_pid = os.getpid()
        self._client: Optional[LightningStoreClient] = None
        self._client_lock = threading.Lock()
        self._store_lock = CrossThreadLock()
        self._caps_cache: tuple[int, LightningStoreCapabilities, int] | None = None

        from .app import build_app  # the app's modules need not be loaded by an unpickled proxy

        self.app: Any = build_app(self)
        self.server_launcher = PythonServerLauncher(self.app, self.launcher_args)

    # -- pickling ------------------------------------------------------------------------------------------------------
    def __getstate__(self) -> Dict[str, Any]:
        launcher = copy.copy(self.server_launcher)
        launcher.app = None
        state: Dict[str, Any] = {
            "launcher_args": self.launcher_args,
            "server_launcher": launcher,
            "_owner_pid": self._owner_pid,
        }
        if self._api_token:  # so that an unpickled proxy can still authenticate
            state["_api_token"] = self._api_token
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.launcher_args = state["launcher_args"]
        self.server_launcher = state["server_launcher"]
        self._owner_pid = state["_owner_pid"]
        self.store = None
        self.app = None
        self._tracker = None
        self._cors_allow_origins = None
        self._api_token = state.get("_api_token")
        self._max_body_bytes = 32 * 1024 * 1024
        self._dashboard_dir = None
        self._instance_id = None
        self._client = None
        self._client_lock = threading.Lock()
        self._store_lock = CrossThreadLock()
        self._caps_cache = None

    # -- identity ------------------------------------------------------------------------------------------------------
    @property
    def capabilities(self) -> LightningStoreCapabilities:
        """All four capabilities are true (the server serializes access itself and speaks OTLP)."""
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=True)

    @property
    def endpoint(self) -> str:
        """``http://<access_host>:<port>`` of the server."""
        return self.server_launcher.access_endpoint

    @property
    def api_token(self) -> Optional[str]:
        """The bearer token required by the server, if any."""
        return self._api_token

    @property
    def instance_id(self) -> Optional[str]:
        """The per-launch nonce returned by ``GET /v1/agl/health`` (``None``: not given, not returned)."""
        return self._instance_id

    @property
    def max_body_bytes(self) -> int:
        """The request body limit in bytes (after decompression for compressed OTLP bodies); 413 above it."""
        return self._max_body_bytes

    @property
    def dashboard_enabled(self) -> bool:
        """Whether a dashboard bundle was found and is served at ``/``."""
        return bool(self.app is not None and getattr(self.app.state, "dashboard_enabled", False))

    @property
    def prometheus_enabled(self) -> bool:
        """Whether ``/v1/prometheus/`` is mounted (a tracker with Prometheus support was given)."""
        return bool(self.app is not None and getattr(self.app.state, "prometheus_enabled", False))

    def otlp_traces_endpoint(self) -> str:
        """``<endpoint>/v1/traces``."""
        return f"{self.endpoint}/v1/traces"

    def __repr__(self) -> str:
        return f"<LightningStoreServer endpoint={self.endpoint} store={type(self.store).__name__}>"

    # -- lifecycle -----------------------------------------------------------------------------------------------------
    def _check_owner(self, action: str) -> None:
        if _current_pid != self._owner_pid:
            raise RuntimeError(f"LightningStoreServer.{action}() must be called in the process that created it.")

    async def start(self) -> None:
        """Start serving; returns once the health endpoint answers."""
        self._check_owner("start")
        logger.info("Starting the store server at %s (API under %s)", self.endpoint, self.endpoint + API_V1_AGL_PREFIX)
        await self.server_launcher.start()

    async def run_forever(self) -> None:
        """Start and block until the server stops (cancellation stops it gracefully)."""
        self._check_owner("run_forever")
        await self.server_launcher.run_forever()

    async def stop(self) -> None:
        """Stop serving."""
        self._check_owner("stop")
        await self.server_launcher.stop()
        if self._client is not None:
            client, self._client = self._client, None
            close = getattr(client, "close", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # noqa: BLE001
                    logger.debug("Failed to close the server's internal client", exc_info=True)

    # -- delegation ----------------------------------------------------------------------------------------------------
    def _store_caps(self, store: LightningStore) -> LightningStoreCapabilities:
        cached = self._caps_cache
        if cached is not None and cached[0] == id(store):
            return cached[1]
        caps = store.capabilities
        if caps.get("zero_copy"):
            route = _DIRECT_ANYWHERE
        elif caps.get("thread_safe"):
            route = _DIRECT_IN_OWNER
        else:
            route = _LOCKED
        self._caps_cache = (id(store), caps, route)
        return caps

    def _get_client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                from ..client import LightningStoreClient

                self._client = LightningStoreClient(self.endpoint, api_token=self._api_token)
            return self._client

    async def _locked_call(self, store: LightningStore, method_name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call ``store.<method_name>`` holding the server's store lock (for stores that are not thread-safe)."""
        async with self._store_lock:
            return await getattr(store, method_name)(*args, **kwargs)

    async def dequeue_rollout_for_client(
        self, worker_id: Optional[str], timeout: float, client_gone: Optional[Callable[[], bool]]
    ) -> Optional[AttemptedRollout]:
        """``dequeue_rollout_or_wait`` for an HTTP request the server holds: ``client_gone`` is asked before every
        claim that follows a wait (nothing is claimed for a client that left), but -- unlike a runner's stop event --
        not periodically, so held requests of idle runners cost no wake-ups."""
        direct = self._direct_store()
        if direct is not None:
            return await direct._wait_and_claim(
                lambda: direct.dequeue_rollout(worker_id=worker_id), timeout, client_gone, poll_abandoned=False
            )
        store = self.store
        if store is not None and _current_pid == self._owner_pid:  # not thread-safe: claims under the lock
            return await self._dequeue_or_wait_locked(
                store, worker_id, timeout=timeout, abandoned=client_gone, poll_abandoned=False
            )
        return await self.dequeue_rollout_or_wait(worker_id=worker_id, timeout=timeout, abandoned=client_gone)

    async def _dequeue_or_wait_locked(
        self,
        store: LightningStore,
        worker_id: Optional[str] = None,
        *,
        timeout: float,
        abandoned: Optional[Callable[[], bool]] = None,
        poll_abandoned: bool = True,
    ) -> Optional[AttemptedRollout]:
        """``dequeue_rollout_or_wait`` on a store that is not thread-safe: only the claim attempts hold the lock."""
        return await store._wait_and_claim(
            lambda: self._locked_call(store, "dequeue_rollout", worker_id=worker_id),
            timeout,
            abandoned,
            poll_abandoned=poll_abandoned,
        )

    def _direct_store(self) -> Optional[LightningStore]:
        """The wrapped store when calls may go straight to it: it is zero-copy, or thread-safe and this is the owning
        process. ``None`` otherwise (``_call`` then serializes with the lock, or goes over HTTP)."""
        store = self.store
        if store is None:
            return None
        route = self._route(store)
        if route == _DIRECT_ANYWHERE or (route == _DIRECT_IN_OWNER and _current_pid == self._owner_pid):
            return store
        return None

    def _route(self, store: LightningStore) -> int:
        """How calls reach ``store``: ``_DIRECT_ANYWHERE`` (zero-copy), ``_DIRECT_IN_OWNER`` (thread-safe, in the
        owning process) or ``_LOCKED`` (under the server's lock in the owning process); cached per store."""
        cached = self._caps_cache
        if cached is None or cached[0] != id(store):
            self._store_caps(store)
            cached = self._caps_cache
            assert cached is not None
        return cached[2]

    async def _delegate(self, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """Run the store method ``name``: straight on a zero-copy store, or on a thread-safe one in the owning process;
        on another store in the owning process under the store lock (``wait_for_rollouts`` without it,
        ``dequeue_rollout_or_wait`` waiting without it and claiming under it); over HTTP in any other process."""
        store = self.store
        if store is not None:
            route = self._route(store)
            if route == _DIRECT_ANYWHERE or (route == _DIRECT_IN_OWNER and _current_pid == self._owner_pid):
                return await getattr(store, name)(*args, **kwargs)
            if _current_pid == self._owner_pid:
                if name in UNLOCKED_METHODS:
                    if name == "dequeue_rollout_or_wait":
                        return await self._dequeue_or_wait_locked(store, *args, **kwargs)
                    return await getattr(store, name)(*args, **kwargs)
                async with self._store_lock:
                    return await getattr(store, name)(*args, **kwargs)
        return await getattr(self._get_client(), name)(*args, **kwargs)

    add_otel_span = LightningStore.add_otel_span
    """Not delegated: the span is converted here (``Span.from_opentelemetry``, a sequence id allocated when none is
    given) and stored through :meth:`add_span`, directly or over HTTP from another process."""
