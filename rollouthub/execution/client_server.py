"""``ClientServerExecutionStrategy``: a store server with the algorithm, runners in processes.

The algorithm side wraps the store in a :class:`~rollouthub.store.client_server.LightningStoreServer`; every
runner process talks to it through a :class:`~rollouthub.store.client.LightningStoreClient`. Stopping is
cooperative (a shared multiprocessing event), then escalates: SIGINT, SIGTERM, SIGKILL.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import time
from typing import Any, Callable, List, Literal, Optional, Sequence, Tuple

from rollouthub.env_var import LightningEnvVar, resolve_bool_env_var, resolve_int_env_var, resolve_str_env_var
from rollouthub.store.base import LightningStore
from rollouthub.utils.process_lifetime import die_with_parent, quiet_interrupted_tasks
from rollouthub.utils.server_launcher import bind_socket

from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle
from .events import ExecutionEvent, MultiprocessingEvent

__all__ = ["ClientServerExecutionStrategy"]

logger = logging.getLogger(__name__)

Role = Literal["algorithm", "runner", "both"]


class ClientServerExecutionStrategy(ExecutionStrategy):
    """Run the algorithm next to a store server and the runners as separate processes talking HTTP to it.

    Args:
        role: ``"algorithm"``, ``"runner"`` or ``"both"`` (default: env ``AGL_CURRENT_ROLE``, else ``"both"``).
        server_host: bind host (algorithm) / connect host (runner); env ``AGL_SERVER_HOST``, else ``"localhost"``.
        server_port: store server port; env ``AGL_SERVER_PORT``, else 4747.
        n_runners: number of runner processes (``runner-<i>``, worker ids ``0..n-1``).
        graceful_timeout: seconds child processes get to stop after the stop event is set.
        terminate_timeout: seconds to wait after each of SIGINT, SIGTERM and SIGKILL.
        main_process: ``"algorithm"`` (runners in children) or ``"runner"`` (the algorithm in a child process
            ``algorithm``; requires role ``"both"`` and ``n_runners == 1``).
        managed_store: start the server / clients automatically (env ``AGL_MANAGED_STORE``, else True); unmanaged
            means the given store is used as-is on both sides.
        allowed_exit_codes: exit codes of child processes considered normal (``None`` is always allowed).
    """

    alias: str = "cs"

    def __init__(
        self,
        role: Optional[Role] = None,
        server_host: Optional[str] = None,
        server_port: Optional[int] = None,
        n_runners: int = 1,
        graceful_timeout: float = 10.0,
        terminate_timeout: float = 10.0,
        main_process: Literal["algorithm", "runner"] = "algorithm",
        managed_store: Optional[bool] = None,
        allowed_exit_codes: Sequence[int] = (0, -15),
    ) -> None:
        resolved_role = resolve_str_env_var(LightningEnvVar.AGL_CURRENT_ROLE, role, fallback="both")
        if resolved_role not in ("algorithm", "runner", "both"):
            raise ValueError(f"role must be 'algorithm', 'runner' or 'both', got {resolved_role!r}.")
        self.role: Role = resolved_role  # type: ignore[assignment]
        self.server_host: str = resolve_str_env_var(LightningEnvVar.AGL_SERVER_HOST, server_host, fallback="localhost")  # type: ignore[assignment]
        self.server_port: int = resolve_int_env_var(LightningEnvVar.AGL_SERVER_PORT, server_port, fallback=4747)  # type: ignore[assignment]
        self.managed_store: bool = resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE, managed_store, fallback=True)
        if main_process not in ("algorithm", "runner"):
            raise ValueError("main_process must be 'algorithm' or 'runner'.")
        if main_process == "runner":
            if self.role != "both":
                raise ValueError("main_process='runner' requires role='both'.")
            if n_runners != 1:
                raise ValueError("main_process='runner' requires n_runners to be 1.")
        if n_runners < 1:
            raise ValueError("n_runners must be at least 1.")
        self.n_runners = n_runners
        self.graceful_timeout = graceful_timeout
        self.terminate_timeout = terminate_timeout
        self.main_process = main_process
        self.allowed_exit_codes: Tuple[int, ...] = tuple(allowed_exit_codes)

    def __repr__(self) -> str:
        # server_host/server_port only mean something for a managed store: an unmanaged one is used as given.
        server = f"server={self.server_host}:{self.server_port}, " if self.managed_store else ""
        return (
            f"ClientServerExecutionStrategy(role={self.role!r}, {server}n_runners={self.n_runners}, "
            f"main_process={self.main_process!r}, managed_store={self.managed_store})"
        )

    # -- the two sides ----------------------------------------------------------------------------------------------

    async def _execute_algorithm(
        self,
        algorithm: AlgorithmBundle,
        store: LightningStore,
        event: ExecutionEvent,
        before_server_stop: Optional[Callable[[], None]] = None,
        stop_runners: Optional[Callable[[], None]] = None,
    ) -> None:
        """Run the algorithm bundle, behind a store server when the store is managed.

        ``before_server_stop`` (blocking, run in a worker thread) is called after the algorithm returns and before
        the server stops, so local runner processes can finish their last store calls against a live server.
        ``stop_runners`` (blocking, in a worker thread) is its counterpart when the algorithm side is interrupted:
        local runners are stopped while the server still answers their last calls (marking their attempts).
        """
        quiet_interrupted_tasks(asyncio.get_running_loop())
        server: Optional[Any] = None
        try:
            if self.managed_store:
                from rollouthub.store.client_server import LightningStoreServer

                server = LightningStoreServer(store, host=self.server_host, port=self.server_port)
                await server.start()
                await algorithm(server, event)
                if before_server_stop is not None:
                    await asyncio.to_thread(before_server_stop)
            else:
                await algorithm(store, event)
        except (asyncio.CancelledError, KeyboardInterrupt):
            logger.warning("Algorithm side interrupted; signalling runners to stop.")
            event.set()
            if server is not None and stop_runners is not None:
                await asyncio.to_thread(stop_runners)
            raise
        except BaseException:
            logger.exception("Algorithm side failed; signalling runners to stop.")
            event.set()
            raise
        finally:
            if server is not None:
                try:
                    await server.stop()
                except Exception:
                    logger.exception("Error while stopping the store server.")

    async def _execute_runner(
        self, runner: RunnerBundle, worker_id: int, store: Optional[LightningStore], event: ExecutionEvent
    ) -> None:
        """Run one runner bundle, through a fresh HTTP client when the store is managed."""
        quiet_interrupted_tasks(asyncio.get_running_loop())
        client: Optional[Any] = None
        try:
            if self.managed_store:
                from rollouthub.store.client import LightningStoreClient

                # No wait for the server here: the runner starts at once, and the client retries on its health-probe
                # schedule until the server (started by the algorithm side, maybe later) answers.
                client = LightningStoreClient(f"http://{self.server_host}:{self.server_port}")
                await runner(client, worker_id, event)
            else:
                if store is None:
                    raise ValueError("An unmanaged client-server strategy needs a store for the runners.")
                await runner(store, worker_id, event)
        except (asyncio.CancelledError, KeyboardInterrupt):
            logger.warning("Runner %d interrupted; signalling the others to stop.", worker_id)
            event.set()
            raise
        except BaseException:
            logger.exception("Runner %d failed; signalling the others to stop.", worker_id)
            event.set()
            raise
        finally:
            if client is not None:
                try:
                    await client.close()
                except Exception:
                    logger.debug("Error while closing the runner's store client.", exc_info=True)

    # -- process helpers --------------------------------------------------------------------------------------------

    def _spawn_runners(
        self, ctx: Any, runner: RunnerBundle, store: LightningStore, event: ExecutionEvent
    ) -> List[multiprocessing.process.BaseProcess]:
        processes: List[multiprocessing.process.BaseProcess] = []
        child_store = None if self.managed_store else store
        for i in range(self.n_runners):
            p = ctx.Process(
                target=_runner_process_main, args=(self, runner, i, child_store, event, os.getpid()), name=f"runner-{i}"
            )
            p.start()
            processes.append(p)
        logger.info("Started %d runner process(es): %s", len(processes), [p.pid for p in processes])
        return processes

    def _shutdown_processes(self, processes: List[multiprocessing.process.BaseProcess], event: ExecutionEvent) -> None:
        """Four-step escalation: stop event, SIGINT, SIGTERM, SIGKILL."""
        event.set()
        alive = _join_all(processes, self.graceful_timeout)
        if alive:
            logger.warning("Sending SIGINT to %d process(es) still alive after the stop event.", len(alive))
            for p in alive:
                _signal(p, signal.SIGINT)
            alive = _join_all(alive, self.terminate_timeout)
        if alive:
            logger.warning("Terminating %d process(es) still alive after SIGINT.", len(alive))
            for p in alive:
                p.terminate()
            alive = _join_all(alive, self.terminate_timeout)
        if alive:
            logger.error("Killing %d process(es) still alive after SIGTERM.", len(alive))
            for p in alive:
                p.kill()
            alive = _join_all(alive, self.terminate_timeout)
        for p in alive:
            logger.error("Process %s (pid %s) survived SIGKILL.", p.name, p.pid)

    def _check_exit_codes(self, processes: List[multiprocessing.process.BaseProcess], handling_error: bool) -> None:
        bad = [
            (p.name, p.exitcode)
            for p in processes
            if p.exitcode is not None and p.exitcode not in self.allowed_exit_codes
        ]
        if not bad:
            return
        message = f"Subprocesses failed with unexpected exit codes: {bad}"
        if handling_error:
            logger.warning(message)
        else:
            raise RuntimeError(message)

    # -- execute ----------------------------------------------------------------------------------------------------

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        """Run this process's role(s) and block until everything has stopped."""
        ctx = multiprocessing.get_context()
        event = MultiprocessingEvent(ctx=ctx)
        processes: List[multiprocessing.process.BaseProcess] = []
        error: Optional[BaseException] = None
        interrupted = False
        self.interrupted = None
        if self.role not in ("algorithm", "runner", "both"):  # e.g. assigned after construction
            raise ValueError(f"Unknown role: {self.role}")
        if self.managed_store:
            logger.info("Executing with %r (pid %d).", self, os.getpid())
        else:
            logger.info("Executing with %r on the store %r (pid %d).", self, store, os.getpid())
        if self.managed_store and self.role == "both":
            # Local runners start before the server and connect to whatever answers on the port: make sure the port
            # is free first, so that they never claim another server's rollouts (the port is in use: PortBindError,
            # before anything starts).
            bind_socket(self.server_host or "0.0.0.0", self.server_port).close()
        try:
            if self.role == "algorithm":
                asyncio.run(self._execute_algorithm(algorithm, store, event))
            elif self.role == "runner":
                if self.n_runners == 1:
                    asyncio.run(self._execute_runner(runner, 0, store, event))
                else:
                    processes = self._spawn_runners(ctx, runner, store, event)
                    for p in processes:
                        while p.is_alive():
                            p.join(0.2)
            elif self.main_process == "algorithm":
                processes = self._spawn_runners(ctx, runner, store, event)
                spawned = processes

                def let_runners_finish() -> None:
                    event.set()
                    _join_all(spawned, self.graceful_timeout)

                def stop_runners() -> None:
                    self._shutdown_processes(spawned, event)

                try:
                    asyncio.run(self._execute_algorithm(algorithm, store, event, let_runners_finish, stop_runners))
                finally:
                    event.set()
            else:
                p = ctx.Process(
                    target=_algorithm_process_main, args=(self, algorithm, store, event, os.getpid()), name="algorithm"
                )
                p.start()
                processes = [p]
                asyncio.run(self._execute_runner(runner, 0, store, event))
                while p.is_alive():
                    p.join(0.2)
        except KeyboardInterrupt as exc:
            logger.warning("KeyboardInterrupt received; initiating cooperative shutdown...")
            event.set()
            interrupted = True
            self.interrupted = exc
        except BaseException as exc:
            event.set()
            error = exc
        finally:
            if processes:
                self._shutdown_processes(processes, event)
                self._check_exit_codes(processes, handling_error=error is not None or interrupted)
        if error is not None:
            raise error


def _signal(process: multiprocessing.process.BaseProcess, sig: int) -> None:
    if process.pid is None:
        return
    try:
        os.kill(process.pid, sig)
    except ProcessLookupError:
        pass


def _join_all(
    processes: List[multiprocessing.process.BaseProcess], timeout: float
) -> List[multiprocessing.process.BaseProcess]:
    """Join every process until ``timeout`` elapses in total; return those still alive."""
    deadline = time.monotonic() + timeout
    for p in processes:
        remaining = deadline - time.monotonic()
        if remaining > 0:
            p.join(remaining)
    return [p for p in processes if p.is_alive()]


def _runner_process_main(
    strategy: ClientServerExecutionStrategy,
    runner: RunnerBundle,
    worker_id: int,
    store: Optional[LightningStore],
    event: ExecutionEvent,
    parent_pid: Optional[int] = None,
) -> None:
    """Entry point of a runner child process (it stops, as on SIGTERM, when ``parent_pid`` ends)."""
    die_with_parent(parent_pid)
    try:
        asyncio.run(strategy._execute_runner(runner, worker_id, store, event))
    except KeyboardInterrupt:
        logger.info("Runner %d received KeyboardInterrupt; exiting.", worker_id)


def _algorithm_process_main(
    strategy: ClientServerExecutionStrategy,
    algorithm: AlgorithmBundle,
    store: LightningStore,
    event: ExecutionEvent,
    parent_pid: Optional[int] = None,
) -> None:
    """Entry point of the algorithm child process (``main_process="runner"``; it stops when ``parent_pid`` ends)."""
    die_with_parent(parent_pid)
    try:
        asyncio.run(strategy._execute_algorithm(algorithm, store, event))
        # Fix of a reference quirk: a finished algorithm also stops the runner on the main process.
        event.set()
    except KeyboardInterrupt:
        logger.info("Algorithm process received KeyboardInterrupt; exiting.")
