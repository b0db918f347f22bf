"""The :class:`Trainer`: builds the components and runs an agent with an algorithm."""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import warnings
from typing import Any, Dict, Optional, Sequence, Union

from rollouthub.algorithm.base import Algorithm, Dataset
from rollouthub.execution.base import ExecutionStrategy
from rollouthub.execution.events import ExecutionEvent
from rollouthub.llm_proxy import LLMProxy
from rollouthub.store.base import LightningStore
from rollouthub.types import NamedResources
from rollouthub.utils.process_lifetime import sigterm_raises

from .init_utils import build_component
from .interruption import cancel_interrupted_run, note_unfinished
from .progress import ProgressSetting, progress_line_from, with_progress_line
from .registry import ExecutionStrategyRegistry

__all__ = ["Trainer"]

logger = logging.getLogger(__name__)

ComponentSpec = Any
"""An instance, a class, a zero-argument factory, an import string (or registry alias), a dict, or ``None``."""


class Trainer:
    """Wire an agent, a runner, a tracer, an adapter, a store and an algorithm, and run them with a strategy.

    Every component parameter is a *ComponentSpec* (see :func:`~rollouthub.trainer.init_utils.build_component`).

    Args:
        dev: deprecated; use :meth:`dev`.
        n_runners: number of runners (default ``n_workers`` or 1).
        max_rollouts: cap on rollouts per runner (falls back to the deprecated ``max_tasks``).
        initial_resources: resources handed to the algorithm (e.g. the seed prompt).
        tracer: default ``AgentOpsTracer(agentops_managed=True, instrument_managed=True, daemon=daemon)``.
        adapter: default ``TracerTraceToTriplet()``; a dict without ``type`` configures that class.
        store: default ``InMemoryLightningStore`` (thread-safe when the strategy is client-server or ray).
        runner: default ``LitAgentRunner(tracer=..., max_rollouts=...)``.
        strategy: default ``ClientServerExecutionStrategy(n_runners=..., server_port=port)``; aliases ``"shm"`` and
            ``"cs"``.
        port: store-server port forwarded to a client-server strategy.
        algorithm: the algorithm (may stay ``None``: runners then serve externally enqueued rollouts).
        llm_proxy: optional :class:`~rollouthub.llm_proxy.LLMProxy` (``store`` injected for dict/class/string specs);
            the algorithm gets it through ``get_llm_proxy()`` with its store set to the strategy's store.
        n_workers: deprecated alias of ``n_runners``.
        max_tasks: deprecated alias of ``max_rollouts``.
        daemon: only meaningful for the legacy ``fit_v0``.
        triplet_exporter: deprecated alias of ``adapter``.
        hooks: one hook or a sequence of hooks given to every runner.
        progress: the progress line of :meth:`fit` and :meth:`dev` (finished/running/queued rollouts and the rate,
            every 5 s; in place on a terminal): ``True`` (default), ``False`` (off), an interval in seconds, or a
            :class:`~rollouthub.trainer.progress.ProgressLine`. See docs/runtime.md.
    """

    def __init__(
        self,
        *,
        dev: bool = False,
        n_runners: Optional[int] = None,
        max_rollouts: Optional[int] = None,
        initial_resources: Optional[NamedResources] = None,
        tracer: ComponentSpec = None,
        adapter: ComponentSpec = None,
        store: ComponentSpec = None,
        runner: ComponentSpec = None,
        strategy: ComponentSpec = None,
        port: Optional[int] = None,
        algorithm: ComponentSpec = None,
        llm_proxy: ComponentSpec = None,
        n_workers: Optional[int] = None,
        max_tasks: Optional[int] = None,
        daemon: bool = True,
        triplet_exporter: ComponentSpec = None,
        hooks: Union[None, Any, Sequence[Any]] = None,
        progress: ProgressSetting = True,
    ) -> None:
        self.worker_id: Optional[int] = None
        self.progress = progress_line_from(progress)
        self._dev = dev
        if dev:
            warnings.warn(
                "Trainer(dev=True) is deprecated; use Trainer.dev() instead.", DeprecationWarning, stacklevel=2
            )
        self.daemon = daemon
        if not daemon:
            logger.warning("daemon=False only affects the legacy fit_v0 loop.")

        if n_workers is not None:
            warnings.warn("n_workers is deprecated; use n_runners.", DeprecationWarning, stacklevel=2)
            if n_runners is None:
                n_runners = n_workers
            elif n_runners != n_workers:
                logger.warning("Both n_runners=%s and n_workers=%s given; using n_runners.", n_runners, n_workers)
        self.n_runners: int = n_runners if n_runners is not None else 1

        if max_tasks is not None:
            warnings.warn("max_tasks is deprecated; use max_rollouts.", DeprecationWarning, stacklevel=2)
            if max_rollouts is None:
                max_rollouts = max_tasks
            elif max_rollouts != max_tasks:
                logger.warning(
                    "Both max_rollouts=%s and max_tasks=%s given; using max_rollouts.", max_rollouts, max_tasks
                )
        self.max_rollouts: Optional[int] = max_rollouts

        self._tracer_spec = tracer
        self.tracer = self._make_tracer(tracer)

        if triplet_exporter is not None:
            warnings.warn("triplet_exporter is deprecated; use adapter.", DeprecationWarning, stacklevel=2)
            if adapter is None:
                adapter = triplet_exporter
            else:
                logger.warning("Both adapter and triplet_exporter given; using adapter.")
        self.adapter = self._make_adapter(adapter)

        self.algorithm: Optional[Algorithm] = build_component(
            algorithm, expected_type=Algorithm, spec_name="algorithm", allow_none=True
        )
        self.initial_resources = initial_resources
        self.port = port
        self.strategy: ExecutionStrategy = self._make_strategy(strategy, port)
        self.store: LightningStore = self._make_store(store)
        self._runner_spec = runner
        self.runner = self._make_runner(runner, self.tracer)

        strategy_runners = getattr(self.strategy, "n_runners", None)
        if isinstance(strategy_runners, int) and not isinstance(strategy_runners, bool) and strategy_runners > 0:
            self.n_runners = strategy_runners

        self.llm_proxy = self._make_llm_proxy(llm_proxy)

        if hooks is None:
            self.hooks: tuple[Any, ...] = ()
        elif isinstance(hooks, (list, tuple)):
            self.hooks = tuple(hooks)
        else:
            self.hooks = (hooks,)

    # -- pickling ---------------------------------------------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        """A copy of the trainer (the runner bundle sent to a runner on another machine, e.g. by the ``ray``
        strategy) leaves behind what lives in this process: its store (the copy's runners use the store the
        strategy gives them), its LLM proxy (served here; runners reach it by address) and its algorithm (it runs
        here; it may hold models or clients that have no business in a runner)."""
        state = self.__dict__.copy()
        state["store"] = None
        state["llm_proxy"] = None
        state["algorithm"] = None
        return state

    # -- deprecated aliases -----------------------------------------------------------------------------------------

    @property
    def n_workers(self) -> int:
        """Deprecated alias of :attr:`n_runners`."""
        return self.n_runners

    @property
    def max_tasks(self) -> Optional[int]:
        """Deprecated alias of :attr:`max_rollouts`."""
        return self.max_rollouts

    @property
    def triplet_exporter(self) -> Any:
        """Deprecated alias of :attr:`adapter`."""
        return self.adapter

    # -- component building -----------------------------------------------------------------------------------------

    def _make_tracer(self, spec: ComponentSpec) -> Any:
        from rollouthub.tracer import Tracer

        def default() -> Any:
            from rollouthub.tracer import AgentOpsTracer

            # Nobody asked for AgentOps here: without the extra, the fallback to native tracing is a debug line.
            return AgentOpsTracer(
                agentops_managed=True, instrument_managed=True, daemon=self.daemon, fallback_warning=False
            )

        return build_component(spec, expected_type=Tracer, spec_name="tracer", default_factory=default)

    def _make_adapter(self, spec: ComponentSpec) -> Any:
        from rollouthub.adapter import TraceAdapter, TracerTraceToTriplet

        return build_component(
            spec,
            expected_type=TraceAdapter,
            spec_name="adapter",
            default_factory=TracerTraceToTriplet,
            dict_requires_type=False,
            dict_default_cls=TracerTraceToTriplet,
        )

    def _make_strategy(self, spec: ComponentSpec, port: Optional[int]) -> ExecutionStrategy:
        from rollouthub.execution.client_server import ClientServerExecutionStrategy

        if isinstance(spec, ExecutionStrategy):
            if port is not None and isinstance(spec, ClientServerExecutionStrategy):
                spec.server_port = port
            return spec
        defaults: Dict[str, Any] = {"n_runners": self.n_runners}
        if port is not None:
            defaults["server_port"] = port

        def default() -> ExecutionStrategy:
            return ClientServerExecutionStrategy(**defaults)

        strategy = build_component(
            spec,
            expected_type=ExecutionStrategy,
            spec_name="strategy",
            default_factory=default,
            optional_defaults=defaults,
            registry=ExecutionStrategyRegistry,
        )
        assert strategy is not None
        return strategy

    def _make_store(self, spec: ComponentSpec) -> LightningStore:
        from rollouthub.execution.client_server import ClientServerExecutionStrategy
        from rollouthub.execution.ray import RayExecutionStrategy
        from rollouthub.store.memory import InMemoryLightningStore

        def default() -> LightningStore:
            # Strategies that serve the store over HTTP from a server thread need a thread-safe one.
            thread_safe = isinstance(self.strategy, (ClientServerExecutionStrategy, RayExecutionStrategy))
            return InMemoryLightningStore(thread_safe=thread_safe)

        store = build_component(spec, expected_type=LightningStore, spec_name="store", default_factory=default)
        assert store is not None
        return store

    def _runner_defaults(self, tracer: Any) -> Dict[str, Any]:
        defaults: Dict[str, Any] = {"tracer": tracer}
        if self.max_rollouts is not None:
            defaults["max_rollouts"] = self.max_rollouts
        return defaults

    def _make_runner(self, spec: ComponentSpec, tracer: Any) -> Any:
        from rollouthub.runner import LitAgentRunner, Runner

        defaults = self._runner_defaults(tracer)

        def default() -> Any:
            return LitAgentRunner(**defaults)

        return build_component(
            spec, expected_type=Runner, spec_name="runner", default_factory=default, optional_defaults=defaults
        )

    def _make_llm_proxy(self, spec: ComponentSpec) -> Optional[LLMProxy]:
        """Build the LLM proxy: instances as-is; dicts default ``store`` to the trainer's store; classes and
        import strings get ``store`` injected when they accept it."""
        if spec is None or isinstance(spec, LLMProxy):
            return spec
        if isinstance(spec, dict) and "store" not in spec:
            spec = {**spec, "store": self.store}
        return build_component(  # type: ignore[no-any-return]
            spec,
            expected_type=LLMProxy,
            spec_name="llm_proxy",
            allow_none=True,
            optional_defaults={"store": self.store},
            dict_requires_type=False,
            dict_default_cls=LLMProxy,
        )

    def _fresh_runner(self) -> Any:
        """A runner with its own tracer, for extra runner threads of the shared-memory strategy.

        Rebuilt from the specs when they are not instances; otherwise a deep copy; as a last resort the shared
        runner (with a warning).
        """
        from rollouthub.tracer import Tracer

        try:
            if not isinstance(self._tracer_spec, Tracer):
                tracer = self._make_tracer(self._tracer_spec)
            else:
                try:
                    tracer = copy.deepcopy(self._tracer_spec)
                except Exception:  # e.g. tracers holding locks: a fresh instance of the same class
                    tracer = type(self._tracer_spec)()
            if self._runner_spec is None or not _is_instance_spec(self._runner_spec):
                return self._make_runner(self._runner_spec, tracer)
            return copy.deepcopy(self.runner)
        except Exception:
            logger.warning(
                "Could not create a separate runner for an extra runner thread; sharing one runner (and tracer) "
                "between threads, which may mix traces. Use the client-server strategy for n_runners > 1.",
                exc_info=True,
            )
            return self.runner

    # -- bundles ----------------------------------------------------------------------------------------------------

    async def _algorithm_bundle(
        self,
        store: LightningStore,
        event: ExecutionEvent,
        train_dataset: Optional[Dataset[Any]],
        val_dataset: Optional[Dataset[Any]],
        algorithm: Optional[Algorithm],
    ) -> None:
        """Wire and run the algorithm against the strategy's store; without one, wait for the stop event."""
        if algorithm is None:
            while not event.is_set():
                await asyncio.sleep(0.1)
            return
        algorithm.set_trainer(self)
        algorithm.set_store(store)
        algorithm.set_adapter(self.adapter)
        if self.initial_resources is not None:
            algorithm.set_initial_resources(self.initial_resources)
        if self.llm_proxy is not None:
            self.llm_proxy.set_store(store)
            hosts = self.strategy.remote_runner_hosts()
            if hosts is not None:  # runners on other machines: the proxy must not stay on loopback
                self.llm_proxy.serve_for_remote_runners(*hosts)
            algorithm.set_llm_proxy(self.llm_proxy)
        try:
            if algorithm.is_async():
                await algorithm.run(train_dataset=train_dataset, val_dataset=val_dataset)  # type: ignore[misc]
            else:
                algorithm.run(train_dataset=train_dataset, val_dataset=val_dataset)
        except (KeyboardInterrupt, asyncio.CancelledError):
            logger.info("The algorithm was interrupted.")
            raise
        except BaseException:
            logger.exception("The algorithm raised an exception.")
            raise

    async def _runner_bundle(self, store: LightningStore, worker_id: int, event: ExecutionEvent, agent: Any) -> None:
        """Initialise a runner worker, iterate over the queue until stopped, then tear it down."""
        from rollouthub.execution.shared_memory import SharedMemoryExecutionStrategy

        # A runner in another process (e.g. a Ray actor) gets copies of the agent and the trainer: reattach them.
        agent.set_trainer(self)
        runner = self.runner
        if isinstance(self.strategy, SharedMemoryExecutionStrategy) and self.strategy.n_runners > 1 and worker_id > 0:
            runner = self._fresh_runner()
            if runner is not self.runner:
                agent = copy.copy(agent)
        initialized = worker_initialized = False
        try:
            runner.init(agent=agent, hooks=list(self.hooks))
            initialized = True
            runner.init_worker(worker_id, store)
            worker_initialized = True
            await runner.iter(event=event)
        except (KeyboardInterrupt, asyncio.CancelledError):
            logger.info("[Worker %d] The runner was interrupted.", worker_id)
            raise
        except BaseException:
            logger.exception("[Worker %d] The runner raised an exception.", worker_id)
            raise
        finally:
            if worker_initialized:
                try:
                    runner.teardown_worker(worker_id)
                except Exception:
                    logger.exception("[Worker %d] Error in teardown_worker.", worker_id)
            if initialized:
                try:
                    runner.teardown()
                except Exception:
                    logger.exception("[Worker %d] Error in teardown.", worker_id)

    # -- public entry points ----------------------------------------------------------------------------------------

    def _run(
        self,
        agent: Any,
        algorithm: Optional[Algorithm],
        train_dataset: Optional[Dataset[Any]],
        val_dataset: Optional[Dataset[Any]],
    ) -> None:
        agent.set_trainer(self)
        algorithm_bundle = functools.partial(
            self._algorithm_bundle, train_dataset=train_dataset, val_dataset=val_dataset, algorithm=algorithm
        )
        runner_bundle = functools.partial(self._runner_bundle, agent=agent)
        # An interrupted run cancels the rollouts it enqueued and no runner finished (see .interruption).
        enqueues = algorithm is not None and getattr(self.strategy, "role", "both") != "runner"
        run_store = self.strategy.run_store(self.store)  # e.g. a client to the server the algorithm uses
        before = note_unfinished(run_store) if enqueues else None
        if getattr(self.strategy, "role", "both") != "algorithm":
            # Runners run here or in processes forked from here: import the tracer's heavy modules once, now.
            self.tracer.preload()
        with sigterm_raises(only_if_default=True):
            self.strategy.execute(with_progress_line(algorithm_bundle, self.progress), runner_bundle, self.store)
        interruption = getattr(self.strategy, "interrupted", None)
        if isinstance(interruption, BaseException):
            cancel_interrupted_run(run_store, before, interruption)
            raise interruption

    def fit(
        self,
        agent: Any,
        train_dataset: Union[None, str, Dataset[Any]] = None,
        *,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> None:
        """Train: run the algorithm and the runners with the configured strategy until the algorithm is done.

        Ctrl+C or SIGTERM (while SIGTERM has its default action, fit turns it into
        :class:`~rollouthub.utils.process_lifetime.Terminated`, a ``KeyboardInterrupt``) stops the runners, cancels
        the run's unfinished rollouts (:mod:`rollouthub.trainer.interruption`) and re-raises the interruption:
        an interrupted fit never returns as if it had finished.
        """
        if isinstance(train_dataset, str):
            warnings.warn(
                "Passing a server URL to fit() is the deprecated v0.1 protocol.", DeprecationWarning, stacklevel=2
            )
            return self.fit_v0(agent, train_dataset)
        self._run(agent, self.algorithm, train_dataset, val_dataset)

    def dev(
        self,
        agent: Any,
        train_dataset: Optional[Dataset[Any]] = None,
        *,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> None:
        """Dry run with a :class:`~rollouthub.algorithm.fast.FastAlgorithm` (default: a fresh ``Baseline``)."""
        from rollouthub.algorithm.fast import Baseline, FastAlgorithm

        algorithm = self.algorithm if self.algorithm is not None else Baseline()
        if not isinstance(algorithm, FastAlgorithm):
            raise TypeError(
                f"Trainer.dev() requires a FastAlgorithm (e.g. Baseline), got {type(algorithm).__name__}. "
                "Use fit() for full algorithms."
            )
        self._run(agent, algorithm, train_dataset, val_dataset)

    def fit_v0(self, agent: Any, backend: str, dev_backend: Optional[str] = None) -> None:
        """The deprecated v0.1 HTTP training loop; not provided (``NotImplementedError``)."""
        raise NotImplementedError(
            "The v0.1 server protocol (fit with a URL) is not supported; pass datasets and an algorithm instead."
        )


def _is_instance_spec(spec: Any) -> bool:
    """Whether a component spec is an already-built object (not a class, factory, string or dict)."""
    return not (spec is None or isinstance(spec, (type, str, dict)) or callable(spec))
