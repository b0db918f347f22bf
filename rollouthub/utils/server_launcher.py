"""Run an ASGI app with uvicorn in the current event loop, in a thread, or in forked processes.

Design notes (differences from the reference, all documented in ``docs/server.md``):

* The listening socket is bound **by the launcher before uvicorn starts** and handed to uvicorn. A port that is
  already taken therefore fails immediately with :class:`PortBindError` (a ``RuntimeError`` whose message starts with
  the reference's "Server did not start up within", and contains "address already in use"), logged once, instead of
  waiting for the start-up timeout.
* uvicorn serves with its ``zttp`` HTTP protocol (and uvloop): as cheap as ``httptools`` and it bounds request heads
  (a request line or header line of 16 KiB, 100 header lines, ~64 KiB in all; beyond: 400 and the connection is
  reset). With ``max_header_bytes`` set -- or where ``zttp`` is not installed (it needs Python >= 3.11) -- uvicorn's
  ``h11`` protocol serves instead, bounding the head at ``max_header_bytes`` (default 64 KiB) at roughly three times
  the HTTP CPU per request (``docs/server.md``, "Slow and dawdling clients"). No choice leaves request heads
  unbounded. Both are uvicorn's stock protocols, used as they are.
* ``mp`` mode with ``n_workers > 1`` does not need gunicorn: a supervisor process (forked from the caller) binds
  nothing itself but inherits the pre-bound socket, forks ``n_workers`` uvicorn workers that all accept on that socket
  (the app and its store are created once and inherited, like gunicorn's ``preload_app``), restarts workers that die
  unexpectedly, marks dead workers in the Prometheus multiprocess directory, and forwards SIGTERM/SIGINT for a graceful
  shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import multiprocessing
import os
import queue
import signal
import socket
import threading
import time
import traceback
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import (
    Any,
    AsyncContextManager,
    AsyncIterator,
    Callable,
    Coroutine,
    Dict,
    List,
    Literal,
    Optional,
    Tuple,
    TypeVar,
)

from rollouthub.utils.process_lifetime import die_with_parent

__all__ = [
    "LaunchMode",
    "PythonServerLauncherArgs",
    "PythonServerLauncher",
    "ChildEvent",
    "noop_context",
    "pick_free_port",
    "bind_socket",
    "PortBindError",
    "DEFAULT_H11_MAX_HEADER_BYTES",
    "http_protocol",
    "describe_request_head_bound",
    "zttp_available",
]

T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new event loop: uvloop when installed (less CPU per request), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


logger = logging.getLogger(__name__)

LaunchMode = Literal["asyncio", "thread", "mp"]
"""How the server runs: a task in the caller's loop, a daemon thread with its own loop, or forked process(es)."""

_POLL_INTERVAL = 0.02


@dataclass
class ChildEvent:
    """Readiness or failure report sent from a server thread/process to the launcher."""

    kind: Literal["ready", "error"]
    exc_type: Optional[str] = None
    message: Optional[str] = None
    traceback: Optional[str] = None


@dataclass
class PythonServerLauncherArgs:
    """Configuration of :class:`PythonServerLauncher`."""

    port: Optional[int] = None
    host: Optional[str] = None
    access_host: Optional[str] = None
    launch_mode: LaunchMode = "asyncio"
    n_workers: int = 1
    healthcheck_url: Optional[str] = None
    log_level: int = logging.INFO
    access_log: bool = False
    startup_timeout: float = 60.0
    kill_unhealthy_server: bool = True
    thread_join_timeout: float = 10.0
    process_join_timeout: float = 10.0
    timeout_keep_alive: int = 30
    limit_concurrency: Optional[int] = None
    """uvicorn's ``limit_concurrency``: with this many connections (or requests in progress), new requests get 503."""
    max_header_bytes: Optional[int] = None
    """The largest request head (400 and close beyond it). Set, uvicorn serves with its ``h11`` protocol
    (``h11_max_incomplete_event_size``); ``None``: its ``zttp`` protocol with its fixed bounds (see
    :func:`http_protocol`), or ``h11`` bounded at :data:`DEFAULT_H11_MAX_HEADER_BYTES` where ``zttp`` is missing."""
    server_header: bool = False
    """Whether responses carry uvicorn's ``server: uvicorn`` header (off: it names the software and costs CPU)."""
    date_header: bool = True
    """Whether responses carry a ``date`` header (uvicorn's, refreshed every second; RFC 9110 asks an origin server
    with a clock to send it)."""


DEFAULT_H11_MAX_HEADER_BYTES = 64 * 1024
"""Request-head bound when uvicorn's ``h11`` protocol serves because ``zttp`` is not installed (zttp's own total)."""


def zttp_available() -> bool:
    """Whether uvicorn's ``zttp`` HTTP protocol can be used (the ``zttp`` package imports)."""
    try:
        import zttp  # noqa: F401
    except ImportError:
        return False
    return True


def http_protocol(max_header_bytes: Optional[int]) -> Tuple[Literal["zttp", "h11"], Optional[int]]:
    """The uvicorn HTTP protocol that serves, and the ``h11`` head bound to give it.

    ``max_header_bytes`` given: ``("h11", max_header_bytes)``. Otherwise ``("zttp", None)`` -- zttp answers 400 and
    resets the connection past a 16 KiB request line or header line, 100 header lines or ~64 KiB of head -- or, where
    zttp is not installed, ``("h11", DEFAULT_H11_MAX_HEADER_BYTES)``: request heads are bounded either way.
    """
    if max_header_bytes is not None:
        return "h11", max_header_bytes
    if zttp_available():
        return "zttp", None
    return "h11", DEFAULT_H11_MAX_HEADER_BYTES


def describe_request_head_bound(max_header_bytes: Optional[int]) -> str:
    """One line for logs: how request heads are bounded with these settings."""
    protocol, max_head = http_protocol(max_header_bytes)
    if protocol == "zttp":
        return "16 KiB per line, 100 lines, ~64 KiB in all (zttp protocol)"
    return f"{max_head} bytes (h11 protocol)"


@contextlib.asynccontextmanager
async def noop_context() -> AsyncIterator[None]:
    """Default serve context: does nothing."""
    yield


def pick_free_port(host: str = "127.0.0.1") -> int:
    """Return a currently free TCP port on ``host`` (the OS picks it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class PortBindError(RuntimeError):
    """The launcher could not bind its listening socket (e.g. the port is taken).

    The message keeps the reference's ``"Server did not start up within"`` prefix; :attr:`reason` is the
    one-line cause, which :func:`bind_socket` has already logged once (callers need not report it again).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"Server did not start up within the start-up timeout: {reason}")
        self.reason = reason


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind a listening TCP socket; raises :class:`PortBindError` ("address already in use" when the port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio only enables TCP_NODELAY on accepted sockets whose proto is TCP, and without
    # it responses written in two parts (headers, body) stall ~40 ms on delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            reason = (
                f"cannot bind {host}:{port}: address already in use. Another process (possibly another store server) "
                "is listening on that port; stop it or choose another port."
            )
        else:
            reason = f"cannot bind {host}:{port}: {exc.strerror or exc}"
        logger.error("%s", reason[0].upper() + reason[1:])
        raise PortBindError(reason) from exc
    return sock


def _default_outbound_ip() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("8.8.8.8", 80))  # no packet is sent for UDP connect
            return str(sock.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def _probe(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback health probe
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _uvicorn_log_level(level: int) -> str:
    return logging.getLevelName(level).lower() if isinstance(level, int) else str(level).lower()


class PythonServerLauncher:
    """Start/stop an ASGI ``app`` with uvicorn according to :class:`PythonServerLauncherArgs`."""

    def __init__(
        self,
        app: Any,
        args: PythonServerLauncherArgs,
        serve_context: Optional[Callable[[], AsyncContextManager[Any]]] = None,
    ) -> None:
        self.app = app
        self.args = args
        self.serve_context: Callable[[], AsyncContextManager[Any]] = serve_context or noop_context
        if args.host is None:
            logger.warning("No host given to the server launcher; binding to 0.0.0.0")
            self._host = "0.0.0.0"
        else:
            self._host = args.host
        if args.port is None:
            self._port = pick_free_port("127.0.0.1" if self._host in ("0.0.0.0", "localhost") else self._host)
            logger.warning("No port given to the server launcher; using free port %d", self._port)
        else:
            self._port = int(args.port)
        if args.access_host is not None:
            self._access_host = args.access_host
        elif self._host in ("0.0.0.0", "::"):
            self._access_host = _default_outbound_ip()
        else:
            self._access_host = self._host
        self._init_runtime_state()

    def _init_runtime_state(self) -> None:
        self._server: Any = None
        self._serve_task: Optional[asyncio.Task[Any]] = None
        self._thread: Optional[threading.Thread] = None
        self._thread_stop: Optional[threading.Event] = None
        self._process: Any = None
        self._socket: Optional[socket.socket] = None
        self._running = False

    # -- pickling ------------------------------------------------------------------------------------------------------
    def __getstate__(self) -> Dict[str, Any]:
        return {
            "app": self.app,
            "args": self.args,
            "serve_context": self.serve_context,
            "_host": self._host,
            "_port": self._port,
            "_access_host": self._access_host,
        }

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime_state()

    # -- properties ----------------------------------------------------------------------------------------------------
    @property
    def host(self) -> str:
        """Bind host."""
        return self._host

    @property
    def port(self) -> int:
        """Bind port."""
        return self._port

    @property
    def access_host(self) -> str:
        """Host advertised to clients."""
        return self._access_host

    @property
    def endpoint(self) -> str:
        """``http://<host>:<port>``."""
        return f"http://{_fmt_host(self._host)}:{self._port}"

    @property
    def access_endpoint(self) -> str:
        """``http://<access_host>:<port>``."""
        return f"http://{_fmt_host(self._access_host)}:{self._port}"

    @property
    def health_url(self) -> Optional[str]:
        """Access endpoint + health path, or ``None`` when no health check is configured."""
        path = self.args.healthcheck_url
        if path is None:
            return None
        if not path.startswith("/"):
            path = "/" + path
        return self.access_endpoint + path

    def is_running(self) -> bool:
        """Whether the server was started and not stopped (and its thread/process is alive)."""
        if not self._running:
            return False
        if self._thread is not None:
            return self._thread.is_alive()
        if self._process is not None:
            return bool(self._process.is_alive())
        if self._serve_task is not None:
            return not self._serve_task.done()
        return False

    # -- uvicorn -------------------------------------------------------------------------------------------------------
    def _uvicorn_server(self) -> Any:
        import uvicorn

        protocol, max_head = http_protocol(self.args.max_header_bytes)
        config = uvicorn.Config(
            self.app,
            http=protocol,
            host=self._host,
            port=self._port,
            log_level=_uvicorn_log_level(self.args.log_level),
            access_log=self.args.access_log,
            timeout_keep_alive=self.args.timeout_keep_alive,
            limit_concurrency=self.args.limit_concurrency,
            h11_max_incomplete_event_size=max_head,
            lifespan="off",
            timeout_graceful_shutdown=max(1, int(self.args.process_join_timeout / 2)),
            server_header=self.args.server_header,
            date_header=self.args.date_header,
        )
        return uvicorn.Server(config)

    async def _serve_with_context(self, server: Any, sock: socket.socket) -> None:
        async with self.serve_context():
            await server.serve(sockets=[sock])

    async def _wait_started(self, server: Any, is_failed: Callable[[], bool], deadline: float, t0: float) -> None:
        while not server.started:
            if is_failed() or time.monotonic() > deadline:
                raise RuntimeError(f"Server did not start up within {time.monotonic() - t0:.2f} seconds.")
            await asyncio.sleep(_POLL_INTERVAL)

    async def _wait_healthy(self, deadline: float, is_failed: Callable[[], bool] = lambda: False) -> bool:
        url = self.health_url
        if url is None:
            return True
        while True:
            if await asyncio.to_thread(_probe, url):
                return True
            if time.monotonic() > deadline or is_failed():
                return False
            await asyncio.sleep(_POLL_INTERVAL)

    # -- lifecycle -----------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the server and return once it is up and (if configured) healthy."""
        if self._running:
            raise RuntimeError("Server is already running; stop it before starting it again.")
        mode = self.args.launch_mode
        if mode == "asyncio":
            await self._start_asyncio()
        elif mode == "thread":
            await self._start_thread()
        elif mode == "mp":
            await self._start_mp()
        else:
            raise ValueError(f"Unknown launch mode: {mode!r}")

    async def _start_asyncio(self) -> None:
        t0 = time.monotonic()
        deadline = t0 + self.args.startup_timeout
        sock = bind_socket(self._host, self._port)
        self._socket = sock
        server = self._uvicorn_server()
        self._server = server
        task = asyncio.create_task(self._serve_with_context(server, sock))
        self._serve_task = task
        self._running = True
        try:
            await self._wait_started(server, task.done, deadline, t0)
        except RuntimeError:
            await self._cancel_asyncio()
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise RuntimeError(
                    f"Server did not start up within {time.monotonic() - t0:.2f} seconds: {task.exception()!r}"
                ) from task.exception()
            raise
        if not await self._wait_healthy(deadline, lambda: task.done() or bool(server.should_exit)):
            if self.args.kill_unhealthy_server:
                await self.stop()
                raise RuntimeError(f"Server is not healthy at {self.health_url} after start-up.")
            logger.error("Server is not healthy at %s after start-up; leaving it running.", self.health_url)

    async def _cancel_asyncio(self) -> None:
        task = self._serve_task
        self._running = False
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self._close_socket()

    async def _start_thread(self) -> None:
        t0 = time.monotonic()
        sock = bind_socket(self._host, self._port)
        self._socket = sock
        events: queue.Queue[ChildEvent] = queue.Queue()
        stop = threading.Event()
        self._thread_stop = stop
        server = self._uvicorn_server()
        self._server = server
        startup_timeout = self.args.startup_timeout

        async def main() -> None:
            deadline = time.monotonic() + startup_timeout
            serve = asyncio.create_task(self._serve_with_context(server, sock))
            try:
                await self._wait_started(server, serve.done, deadline, t0)
                if not await self._wait_healthy(deadline, lambda: serve.done() or bool(server.should_exit)):
                    raise RuntimeError(f"Server is not healthy at {self.health_url} after start-up.")
            except BaseException as exc:  # report and shut down
                err: BaseException = exc
                tb = traceback.format_exc()
                server.should_exit = True
                if not serve.done():
                    serve.cancel()
                with contextlib.suppress(BaseException):
                    await serve
                if serve.done() and not serve.cancelled() and serve.exception() is not None:
                    err = serve.exception()  # type: ignore[assignment]
                events.put(ChildEvent("error", type(err).__name__, str(err), tb))
                return
            events.put(ChildEvent("ready"))
            while not stop.is_set() and not serve.done():
                await asyncio.sleep(0.05)
            server.should_exit = True
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(serve, timeout=5.0)

        def run() -> None:
            try:
                run_event_loop(main())
            except BaseException as exc:  # pragma: no cover - defensive
                events.put(ChildEvent("error", type(exc).__name__, str(exc), traceback.format_exc()))

        thread = threading.Thread(target=run, name="rollouthub-server", daemon=True)
        self._thread = thread
        self._running = True
        thread.start()
        event = await self._wait_event(lambda: events.get(timeout=0.05), thread.is_alive, 2 * startup_timeout)
        if event.kind == "error":
            self._running = False
            thread.join(self.args.thread_join_timeout)
            self._close_socket()
            raise RuntimeError(event.message or "Server failed to start.")

    async def _wait_event(self, get: Callable[[], ChildEvent], alive: Callable[[], bool], timeout: float) -> ChildEvent:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await asyncio.to_thread(get)
            except queue.Empty:
                pass
            if not alive():
                try:
                    return get()
                except queue.Empty:
                    return ChildEvent("error", "RuntimeError", "Server exited before reporting readiness.")
            if time.monotonic() > deadline:
                return ChildEvent("error", "RuntimeError", f"Server did not start up within {timeout:.2f} seconds.")

    async def _start_mp(self) -> None:
        try:
            ctx = multiprocessing.get_context("fork")
        except ValueError as exc:
            raise RuntimeError("The 'mp' launch mode requires the 'fork' start method.") from exc
        sock = bind_socket(self._host, self._port)
        self._socket = sock
        events: Any = ctx.Queue()
        process = ctx.Process(
            target=_mp_supervisor_main,
            args=(self, sock, events, os.getpid()),
            name="rollouthub-server",
            daemon=self.args.n_workers <= 1,
        )
        self._process = process
        self._running = True
        process.start()

        def get() -> ChildEvent:
            return events.get(timeout=0.05)  # type: ignore[no-any-return]

        event = await self._wait_event(get, process.is_alive, 2 * self.args.startup_timeout)
        self._close_socket()  # the child owns it now
        if event.kind == "error":
            await self._stop_process()
            raise RuntimeError(event.message or "Server failed to start.")

    def _close_socket(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.close()
            self._socket = None

    async def stop(self) -> None:
        """Stop the server gracefully: asyncio exits then cancels, thread joins, mp sends SIGTERM then SIGKILL."""
        mode = self.args.launch_mode
        try:
            if mode == "asyncio":
                await self._stop_asyncio()
            elif mode == "thread":
                await self._stop_thread()
            else:
                await self._stop_process()
        finally:
            self._running = False
            self._close_socket()

    async def _stop_asyncio(self) -> None:
        server, task = self._server, self._serve_task
        if server is not None:
            server.should_exit = True
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=5.0)
            except asyncio.TimeoutError:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            except BaseException:  # noqa: BLE001 - the serving task failed; nothing left to stop
                pass
        self._serve_task = None

    async def _stop_thread(self) -> None:
        thread, stop = self._thread, self._thread_stop
        if stop is not None:
            stop.set()
        if self._server is not None:
            self._server.should_exit = True
        if thread is not None:
            await asyncio.to_thread(thread.join, self.args.thread_join_timeout)
            if thread.is_alive():
                raise RuntimeError("Threaded server refused to shut down.")
        self._thread = None

    async def _stop_process(self) -> None:
        process = self._process
        if process is None:
            return
        if process.is_alive() and process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            await asyncio.to_thread(process.join, self.args.process_join_timeout)
            if process.is_alive():
                process.kill()
                await asyncio.to_thread(process.join, 5.0)
                if process.is_alive():
                    raise RuntimeError("Server process refused to shut down.")
        else:
            process.join(0.1)
        self._process = None

    async def reload(self) -> None:
        """Stop (if running) and start again."""
        if self.is_running():
            await self.stop()
        await self.start()

    async def run_forever(self) -> None:
        """Start, then block until the server ends; cancellation/KeyboardInterrupt stops it gracefully."""
        try:
            await self.start()
            while self.is_running():
                await asyncio.sleep(0.1)
        except (asyncio.CancelledError, KeyboardInterrupt):
            if self._running:
                await self.stop()
            raise
        await self.stop()


def _fmt_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


# ---------------------------------------------------------------------------------------------------------------------
# mp mode: supervisor and workers (run in forked processes)
# ---------------------------------------------------------------------------------------------------------------------


def _run_uvicorn_worker(launcher: PythonServerLauncher, sock: socket.socket) -> None:
    """Run one uvicorn server on the inherited socket until SIGTERM/SIGINT."""
    _reset_forked_asyncio_state()
    server = launcher._uvicorn_server()

    async def main() -> None:
        await launcher._serve_with_context(server, sock)

    run_event_loop(main())


def _reset_forked_asyncio_state() -> None:
    """Forget the parent's event loop and signal plumbing after ``fork``.

    The child keeps the parent's event loop as its current loop; the inherited signal wakeup fd would forward the
    child's signals into the *parent's* event loop; and the parent's asyncio signal handlers would swallow signals.
    (asyncio itself does not report the parent's *running* loop in a forked child: it checks the process id.)
    """
    with contextlib.suppress(Exception):
        asyncio.set_event_loop(None)
    with contextlib.suppress(Exception):
        signal.set_wakeup_fd(-1)
    with contextlib.suppress(Exception):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _mp_supervisor_main(launcher: PythonServerLauncher, sock: socket.socket, events: Any, owner_pid: int) -> None:
    """Body of the forked server process: one uvicorn server, or a supervisor of ``n_workers`` forked workers.

    It stops (as on SIGTERM) when the process that started it ends, and so do its workers when it ends: killing the
    owner never leaves a server behind.
    """
    _reset_forked_asyncio_state()
    die_with_parent(owner_pid)
    n_workers = max(1, launcher.args.n_workers)
    health_url = launcher.health_url
    deadline = time.monotonic() + launcher.args.startup_timeout

    def report_when_healthy(is_alive: Callable[[], bool], on_fail: Callable[[], None]) -> None:
        while time.monotonic() < deadline:
            if not is_alive():
                break
            if health_url is None or _probe(health_url):
                events.put(ChildEvent("ready"))
                return
            time.sleep(_POLL_INTERVAL)
        events.put(ChildEvent("error", "RuntimeError", f"Server is not healthy at {health_url} after start-up."))
        on_fail()

    if n_workers == 1:
        server = launcher._uvicorn_server()

        def watch() -> None:
            report_when_healthy(lambda: True, lambda: setattr(server, "should_exit", True))

        threading.Thread(target=watch, daemon=True).start()
        try:
            run_event_loop(launcher._serve_with_context(server, sock))
        except KeyboardInterrupt:  # Ctrl+C reached the whole process group; uvicorn already shut down
            pass
        except BaseException as exc:  # noqa: BLE001
            events.put(ChildEvent("error", type(exc).__name__, str(exc), traceback.format_exc()))
        return

    workers: List[int] = []
    stopping = threading.Event()

    supervisor_pid = os.getpid()

    def spawn() -> int:
        pid = os.fork()
        if pid == 0:  # worker
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                die_with_parent(supervisor_pid)
                _run_uvicorn_worker(launcher, sock)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        return pid

    def on_signal(signum: int, frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for _ in range(n_workers):
        workers.append(spawn())

    threading.Thread(
        target=report_when_healthy, args=(lambda: not stopping.is_set(), stopping.set), daemon=True
    ).start()

    while not stopping.is_set():
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pid = 0
        if pid and pid in workers:
            _mark_prometheus_dead(pid)
            workers.remove(pid)
            if not stopping.is_set():
                logger.warning("Store worker %d exited unexpectedly; starting a replacement.", pid)
                workers.append(spawn())
        stopping.wait(0.1)

    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    grace = time.monotonic() + max(1.0, launcher.args.process_join_timeout / 2)
    while workers and time.monotonic() < grace:
        for pid in list(workers):
            with contextlib.suppress(ChildProcessError):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    workers.remove(pid)
                    _mark_prometheus_dead(pid)
        time.sleep(0.05)
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        _mark_prometheus_dead(pid)


def _mark_prometheus_dead(pid: int) -> None:
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    try:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
    except Exception:  # noqa: BLE001
        logger.debug("Could not mark pid %d dead in the Prometheus multiprocess directory", pid, exc_info=True)
