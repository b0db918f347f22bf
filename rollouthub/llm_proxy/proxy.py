"""``LLMProxy``: an OpenAI-compatible endpoint in front of model backends, tracing into a store.

The reference hosts LiteLLM's proxy app; rollouthub serves its own engine (:mod:`rollouthub.llm_proxy.engine`)
with :class:`~rollouthub.utils.server_launcher.PythonServerLauncher`. The observable contract is the same: routes
under ``/rollout/{rid}/attempt/{aid}``, a span sequence id allocated at request start, ``return_token_ids``
forwarding, ``litellm_request`` / ``raw_gen_ai_request`` spans under that sequence id, stream conversion and the
store-capability checks of :meth:`LLMProxy.start`. See ``docs/llm-proxy.md`` for the differences.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, List, Mapping, Optional, Sequence, Union

from rollouthub.types import LLM, ProxyLLM
from rollouthub.utils.server_launcher import LaunchMode, PythonServerLauncher, PythonServerLauncherArgs

from .callbacks import LLMProxyCallback, registered_llm_callbacks, resolve_callbacks
from .middleware import resolve_middlewares
from .models import ModelConfig, model_names, parse_deployment, resolve_proxy_settings

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

    from .engine import ProxyEngine
    from .local_backend import LocalPolicyBackend

__all__ = ["LLMProxy", "get_active_llm_proxy", "set_active_llm_proxy"]

logger = logging.getLogger(__name__)

_REQUIRED_CAPABILITY: Dict[str, str] = {"mp": "zero_copy", "thread": "thread_safe", "asyncio": "async_safe"}

_active_lock = threading.Lock()
_active_proxy: Optional[LLMProxy] = None


def _active_llm_proxy() -> Optional[LLMProxy]:
    """The active proxy or ``None`` (internal, non-raising)."""
    return _active_proxy


def get_active_llm_proxy() -> LLMProxy:
    """The proxy most recently initialized in this process; ``ValueError`` if none was started."""
    proxy = _active_proxy
    if proxy is None:
        raise ValueError("No active LLM proxy: start an LLMProxy first.")
    return proxy


def set_active_llm_proxy(proxy: LLMProxy) -> None:
    """Make ``proxy`` the process-wide active proxy (a warning when it replaces another one)."""
    global _active_proxy
    with _active_lock:
        if _active_proxy is not None and _active_proxy is not proxy:
            logger.warning("Replacing the active LLM proxy %r with %r.", _active_proxy, proxy)
        _active_proxy = proxy


DEFAULT_HOST = "127.0.0.1"
"""Bind address when ``host`` is not given: loopback only, like the store server."""


class LLMProxy:
    """An OpenAI-compatible proxy that attributes every call to a rollout attempt and traces it into the store.

    Args:
        port: TCP port (a free port when ``None``).
        model_list: LiteLLM-style ``model_list`` entries (:class:`~rollouthub.llm_proxy.models.ModelConfig`).
        store: the store for sequence ids and spans (or :meth:`set_store` later).
        host: bind / advertised host (see the server launcher); ``None`` binds the loopback interface
            ``127.0.0.1``, like ``rollouthub store`` (the reference bound ``0.0.0.0``). Pass ``"0.0.0.0"`` to expose the
            proxy to runners on other machines.
        litellm_config: LiteLLM proxy config; the native engine honours ``litellm_settings.num_retries``,
            ``litellm_settings.request_timeout``, ``router_settings.num_retries``/``timeout`` and
            ``general_settings.master_key``; other keys are accepted and ignored (logged once).
        num_retries: retries of upstream connection errors and 5xx answers (stored as
            ``litellm_config["litellm_settings"]["num_retries"]`` unless already present there).
        num_workers: server processes (``mp`` mode only).
        launch_mode: ``"mp"`` (forked process, default), ``"thread"`` or ``"asyncio"``.
        launcher_args: full launcher configuration; excludes ``port``, ``host``, a non-default ``launch_mode``
            and ``num_workers != 1``.
        middlewares: ASGI middleware classes or aliases (``"rollout_attempt"``, ``"stream_conversion"``,
            ``"message_inspection"``); default ``["rollout_attempt", "stream_conversion"]``.
        callbacks: :class:`~rollouthub.llm_proxy.callbacks.LLMProxyCallback` classes or aliases
            (``"return_token_ids"``, ``"logprobs"``, ``"opentelemetry"``); default
            ``["return_token_ids", "opentelemetry"]``.
        local_backends: :class:`~rollouthub.llm_proxy.local_backend.LocalPolicyBackend` objects by name, served
            in this process for ``model_list`` entries whose ``litellm_params.model`` is ``"local/<name>"``
            (needs ``launch_mode="thread"`` or ``"asyncio"``).
    """

    def __init__(
        self,
        port: Optional[int] = None,
        model_list: Optional[List[ModelConfig]] = None,
        store: Optional[LightningStore] = None,
        host: Optional[str] = None,
        litellm_config: Optional[Dict[str, Any]] = None,
        num_retries: int = 0,
        num_workers: int = 1,
        launch_mode: LaunchMode = "mp",
        launcher_args: Optional[PythonServerLauncherArgs] = None,
        middlewares: Optional[Sequence[Union[str, type]]] = None,
        callbacks: Optional[Sequence[Union[str, type]]] = None,
        local_backends: Optional[Mapping[str, LocalPolicyBackend]] = None,
    ) -> None:
        """Validate the configuration; nothing is started (see :meth:`start`)."""
        self.host_given = host is not None or launcher_args is not None
        """Whether the user chose where the proxy binds (``host`` or ``launcher_args``); if not, an execution strategy
        whose runners run on other machines may change it (:meth:`serve_for_remote_runners`)."""
        if launcher_args is not None:
            if port is not None or host is not None or launch_mode != "mp" or num_workers != 1:
                raise ValueError(
                    "port, host, launch_mode and num_workers cannot be set when launcher_args is provided."
                )
            if launcher_args.healthcheck_url is None:
                logger.warning("The LLM proxy launcher has no healthcheck_url; readiness will not be checked.")
            self.launcher_args = launcher_args
        else:
            self.launcher_args = PythonServerLauncherArgs(
                port=port,
                host=DEFAULT_HOST if host is None else host,
                launch_mode=launch_mode,
                n_workers=num_workers,
                healthcheck_url="/health",
                startup_timeout=60.0,
            )
        self.model_list: List[ModelConfig] = [copy.deepcopy(entry) for entry in (model_list or [])]
        for entry in self.model_list:
            parse_deployment(entry, resolve_env=False)
        self.local_backends: Dict[str, LocalPolicyBackend] = dict(local_backends or {})
        self._check_local_launch_mode()
        self.litellm_config: Dict[str, Any] = copy.deepcopy(litellm_config or {})
        settings = self.litellm_config.setdefault("litellm_settings", {})
        if not isinstance(settings, dict):
            raise ValueError("litellm_config['litellm_settings'] must be a dict.")
        settings.setdefault("num_retries", num_retries)
        self._settings = resolve_proxy_settings(self.litellm_config)
        if self._settings.ignored_keys:
            logger.info(
                "The native LLM proxy ignores these litellm_config keys: %s", ", ".join(self._settings.ignored_keys)
            )
        self.middlewares: List[type] = resolve_middlewares(middlewares)
        self.callbacks: List[type] = resolve_callbacks(callbacks)  # type: ignore[arg-type]
        self.store = store
        self.server_launcher = PythonServerLauncher(None, self.launcher_args, self._serve_context)
        if self.launcher_args.port is None:  # keep the picked port across restarts
            self.launcher_args.port = self.server_launcher.port
        self._engine: Optional[ProxyEngine] = None
        self._callback_instances: List[LLMProxyCallback] = []

    # ------------------------------------------------------------------ pickling

    def __getstate__(self) -> Dict[str, Any]:
        """Drop runtime state (the engine, callback instances); the launcher pickles its configuration only."""
        state = self.__dict__.copy()
        state["_engine"] = None
        state["_callback_instances"] = []
        state["local_backends"] = {}  # they serve a model in this process only
        return state

    def __repr__(self) -> str:
        return f"<LLMProxy endpoint={self.server_launcher.access_endpoint} models={model_names(self.model_list)}>"

    # ------------------------------------------------------------------ configuration

    def get_store(self) -> Optional[LightningStore]:
        """The store spans and sequence ids go to."""
        return self.store

    def set_store(self, store: LightningStore) -> None:
        """Set the store (takes effect immediately for a running ``thread``/``asyncio`` proxy, at restart in mp)."""
        self.store = store

    def update_model_list(self, model_list: List[ModelConfig]) -> None:
        """Replace the model list; it takes effect at the next :meth:`start` / :meth:`restart`."""
        entries = [copy.deepcopy(entry) for entry in model_list]
        for entry in entries:
            parse_deployment(entry, resolve_env=False)
        self._check_local_launch_mode(entries)
        self.model_list = entries
        if self.is_running():
            logger.info("LLM proxy model list updated; call restart() to apply it.")

    def set_local_backend(self, name: str, backend: LocalPolicyBackend) -> None:
        """Serve ``backend`` for the ``model_list`` entries ``local/<name>`` (immediately when running)."""
        if not isinstance(name, str) or not name:
            raise ValueError("set_local_backend: name must be a non-empty string")
        self.local_backends[name] = backend

    def _check_local_launch_mode(self, model_list: Optional[List[ModelConfig]] = None) -> None:
        """Local backends are served in this process: refuse the forked ``mp`` launch mode (``ValueError``)."""
        entries = self.model_list if model_list is None else model_list
        local = [e["model_name"] for e in entries if parse_deployment(e, resolve_env=False).is_local]
        if local and self.launcher_args.launch_mode == "mp":
            raise ValueError(
                f"LLMProxy: model {local[0]!r} is served by a local backend, which launch_mode='mp' cannot serve (a "
                "forked server would never see new weights); use launch_mode='thread' or 'asyncio'."
            )

    @property
    def num_retries(self) -> int:
        """Effective retries of upstream failures."""
        return self._settings.num_retries

    # ------------------------------------------------------------------ lifecycle

    def initialize(self) -> None:
        """Global wiring done by :meth:`start`: requires a store; registers this proxy as the active one and its
        callbacks (once per process, see :func:`~rollouthub.llm_proxy.callbacks.initialize_llm_callbacks`);
        builds the engine app with the configured middlewares and the current model list."""
        if self.store is None:
            raise ValueError("The LLM proxy needs a store: pass store= or call set_store() first.")
        deployments = [parse_deployment(entry) for entry in self.model_list]
        self._check_local_launch_mode()
        for deployment in deployments:
            if deployment.is_local and deployment.upstream_model not in self.local_backends:
                raise ValueError(
                    f"LLMProxy: model {deployment.model_name!r} uses 'local/{deployment.upstream_model}' but no local "
                    f"backend {deployment.upstream_model!r} is registered (local_backends= or set_local_backend())."
                )
        os.environ["USE_OTEL_LITELLM_REQUEST_SPAN"] = "true"  # kept for compatibility with LiteLLM-based tooling
        set_active_llm_proxy(self)
        self._callback_instances = registered_llm_callbacks(self.callbacks)  # type: ignore[arg-type]
        from .engine import ProxyEngine

        self._engine = ProxyEngine(
            deployments,
            self._settings,
            self._callback_instances,
            llm_proxy=self,
            local_backends=self.local_backends,
        )
        self.server_launcher.app = self._engine.build_app(self.middlewares)

    @contextlib.asynccontextmanager
    async def _serve_context(self) -> AsyncIterator[None]:
        """Runs around serving, in the serving process: active proxy and HTTP sessions of the serving loop."""
        set_active_llm_proxy(self)
        try:
            yield
        finally:
            engine = self._engine
            if engine is not None:
                await engine.aclose()

    def _check_store(self) -> None:
        if self.store is None:
            raise ValueError("The LLM proxy needs a store: pass store= or call set_store() first.")
        mode = self.launcher_args.launch_mode
        capability = _REQUIRED_CAPABILITY.get(mode)
        if capability is not None and not self.store.capabilities.get(capability, False):
            hints = {
                "mp": "use a store server/client (e.g. LightningStoreServer) or launch_mode='thread'",
                "thread": "wrap it in LightningStoreThreaded or use a thread-safe store",
                "asyncio": "use an async-safe store",
            }
            raise RuntimeError(
                f"The store {type(self.store).__name__} does not support {capability}, which launch_mode={mode!r} "
                f"requires; {hints[mode]}."
            )

    async def start(self) -> None:
        """Check the store's capabilities against the launch mode, then serve (returns once healthy)."""
        self._check_store()
        self.initialize()
        logger.info("Starting the LLM proxy at %s (models: %s)", self.endpoint, model_names(self.model_list))
        await self.server_launcher.start()

    async def stop(self) -> None:
        """Stop serving (a warning and nothing else when not running)."""
        if not self.is_running():
            logger.warning("The LLM proxy is not running; nothing to stop.")
            return
        await self.server_launcher.stop()

    async def restart(self, *, _port: Optional[int] = None) -> None:
        """Stop if running, optionally move to another port, and start again (applying a new model list)."""
        if self.is_running():
            await self.stop()
        if _port is not None:
            self.launcher_args.port = _port
            self.server_launcher = PythonServerLauncher(None, self.launcher_args, self._serve_context)
        await self.start()

    def is_running(self) -> bool:
        """Whether the server is up."""
        return self.server_launcher.is_running()

    def serve_for_remote_runners(self, host: str, access_host: str) -> bool:
        """Bind ``host`` and advertise ``access_host`` instead of the loopback default, so that runners on other
        machines reach the proxy at the endpoint it publishes; returns whether the address changed.

        Nothing changes when the user gave ``host`` or ``launcher_args`` (their choice stands), or while the proxy
        is running (a warning: it keeps its address until restarted). The port is kept.
        """
        if self.host_given:
            return False
        if self.is_running():
            logger.warning(
                "The LLM proxy is already running at %s: runners on other machines may not reach it (start it "
                "inside the run, or give it host=).",
                self.endpoint,
            )
            return False
        self.launcher_args.host = host
        self.launcher_args.access_host = access_host
        self.server_launcher = PythonServerLauncher(None, self.launcher_args, self._serve_context)
        logger.info("The LLM proxy will serve at %s (bound to %s) for runners on other machines.", self.endpoint, host)
        return True

    # ------------------------------------------------------------------ resources

    @property
    def endpoint(self) -> str:
        """``http://<access_host>:<port>`` (no ``/v1``; both prefixed and unprefixed OpenAI routes are served)."""
        return self.server_launcher.access_endpoint

    def as_resource(
        self,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
        model: Optional[str] = None,
        sampling_parameters: Optional[Dict[str, Any]] = None,
    ) -> LLM:
        """The proxy as an LLM resource.

        Without ids, a :class:`~rollouthub.types.ProxyLLM` (agents route per attempt with ``get_base_url``); with
        both ids, an :class:`~rollouthub.types.LLM` whose endpoint ends in ``/rollout/{rid}/attempt/{aid}``; only
        one id → ``ValueError``. ``model`` defaults to the only configured model name (``ValueError`` when there
        are none or several).
        """
        if model is None:
            names = model_names(self.model_list)
            if not names:
                raise ValueError("The LLM proxy has no models configured; pass model= or set a model_list.")
            if len(names) > 1:
                raise ValueError(f"The LLM proxy serves several models ({names}); pass model= to choose one.")
            model = names[0]
        api_key = self._settings.master_key
        params = dict(sampling_parameters or {})
        if rollout_id is None and attempt_id is None:
            return ProxyLLM(endpoint=self.endpoint, model=model, sampling_parameters=params, api_key=api_key)
        if rollout_id is None or attempt_id is None:
            raise ValueError("rollout_id and attempt_id must be given together (or both omitted).")
        return LLM(
            endpoint=f"{self.endpoint}/rollout/{rollout_id}/attempt/{attempt_id}",
            model=model,
            sampling_parameters=params,
            api_key=api_key,
        )
